"""``POST /ag-ui/{agent}``: the same runs as AG-UI events."""

from __future__ import annotations

from fastapi import FastAPI

from .core import Gateway


def add_agui_routes(app: FastAPI, gw: Gateway) -> None:
    """Add the AG-UI endpoint to ``app`` (nothing yet)."""
