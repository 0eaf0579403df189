"""Fixtures of the adapter tests: a loopback FakeProvider (tests/conftest.py) and an HTTP client."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    """A plain HTTP client the adapters under test share."""
    async with httpx.AsyncClient() as c:
        yield c
