"""``POST /vercel/{agent}``: the same runs as the Vercel AI SDK UI message stream."""

from __future__ import annotations

from fastapi import FastAPI

from .core import Gateway


def add_vercel_routes(app: FastAPI, gw: Gateway) -> None:
    """Add the Vercel endpoint to ``app`` (nothing yet)."""
