"""``WS /live/{session_id}``: a live run over a WebSocket."""

from __future__ import annotations

from fastapi import FastAPI

from .core import Gateway


def add_live_routes(app: FastAPI, gw: Gateway) -> None:
    """Add the live WebSocket to ``app`` (nothing yet)."""
