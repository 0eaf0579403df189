"""``headwater chat``'s side of the frame protocol (docs/frame-protocol.md), over httpx.

It drives a gateway the way its page does: sessions with ``POST /sessions``,
runs with ``POST /sessions/{sid}/runs`` read as a stream of typed SSE frames,
Stop with ``POST /runs/{id}/cancel``, approvals answered with a new run whose
body holds ``approvals``. Failures come out as :class:`GatewayError` with the
gateway's error code and message (``network`` when it could not be reached or
the connection broke, with the reason).
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from ..core.errors import SSEDecodeError
from ..core.settings import get_settings
from ..core.sse import SSEDecoder

CONNECT_TIMEOUT = 10.0
"""Seconds to connect to the gateway, and to wait for any answer but a stream's next frame."""

READ_TIMEOUT = 120.0
"""Seconds a run's stream may stay silent (the gateway sends heartbeats every 15 s)."""

_CONFIG = re.compile(r'<script[^>]*id="headwater-config"[^>]*>(.*?)</script>', re.S)


class GatewayError(Exception):
    """The gateway refused a request, or could not be reached (``code`` says which)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(slots=True)
class WireFrame:
    """One SSE frame of a run as read off the wire: its id, type (``delta``, …) and data."""

    id: str
    type: str
    data: dict[str, Any]  # the frame's JSON


class GatewayRun:
    """A run being read: its id (``X-Run-Id``) and its frames, in order."""

    def __init__(self, run_id: str, response: httpx.Response) -> None:
        self.run_id = run_id
        self._response = response

    async def frames(self) -> AsyncIterator[WireFrame]:
        """The frames as they arrive; ends after the terminal frame or when the stream does.

        Raises:
            GatewayError: ``network`` when the connection broke; ``internal`` when
                a frame's data is not JSON or too large (not a headwater gateway's
                stream).
        """
        settings = get_settings()  # the bounds of every SSE decoder
        decoder = SSEDecoder(settings.sse_max_line_chars, settings.sse_max_event_chars)
        try:
            async for chunk in self._response.aiter_bytes():
                for event in decoder.feed(chunk):
                    frame = WireFrame(event.id or "", event.event, _frame_data(event.data))
                    yield frame
                    if frame.type in ("done", "error"):
                        return
        except httpx.TransportError as exc:
            raise GatewayError("network", f"the stream broke: {_reason(exc)}") from None
        except SSEDecodeError as exc:
            raise GatewayError("internal", f"the server sent an event stream {exc}; is it a "
                               "headwater gateway?") from None


class GatewayClient:
    """A gateway at ``base_url`` (``token``: sent as ``Authorization: Bearer``)."""

    def __init__(self, base_url: str, token: str | None = None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.base_url = base_url.rstrip("/") + "/"
        self._http = httpx.AsyncClient(
            base_url=self.base_url, headers=headers, trust_env=False,
            timeout=httpx.Timeout(CONNECT_TIMEOUT, read=READ_TIMEOUT))

    async def aclose(self) -> None:
        """Close the connections."""
        await self._http.aclose()

    async def _call(self, method: str, path: str, body: Any = None) -> Any:  # JSON in and out
        try:
            response = await self._http.request(method, path, json=body,
                                                timeout=CONNECT_TIMEOUT)
        except httpx.TransportError as exc:
            raise _unreachable(exc, self.base_url) from None
        if response.is_error:
            raise _refusal(response)
        if response.status_code == 204:
            return None
        try:
            return response.json()
        except ValueError:  # a server that answers, but not as a gateway does
            raise GatewayError("internal", f"{self.base_url} answered {path.split('?')[0]} "
                               "with something other than JSON: is it a headwater "
                               "gateway?") from None

    async def page_config(self) -> dict[str, Any]:  # the page's JSON
        """What the gateway tells its page: ``agents`` (name, model), ``note``, … ;
        empty when the app serves no page."""
        try:
            response = await self._http.get("", timeout=CONNECT_TIMEOUT)
        except httpx.TransportError as exc:
            raise _unreachable(exc, self.base_url) from None
        match = _CONFIG.search(response.text) if response.is_success else None
        if match is None:
            return {}
        try:
            found = json.loads(match.group(1))
        except ValueError:
            return {}
        return found if isinstance(found, dict) else {}

    async def check(self) -> None:
        """One cheap call (``GET /sessions?limit=1``): the gateway answers and takes the token.

        Raises:
            GatewayError: ``network``, ``unauthorized``, …
        """
        await self._call("GET", "sessions?limit=1")

    async def create_session(self, agent: str | None) -> dict[str, Any]:
        """A new session (of ``agent``, else the gateway's first agent)."""
        result: dict[str, Any] = await self._call("POST", "sessions",
                                                  {"agent": agent} if agent else {})
        return result

    async def get_session(self, session_id: str) -> dict[str, Any]:
        """One session of the caller's (``not_found`` for another user's)."""
        result: dict[str, Any] = await self._call("GET", f"sessions/{session_id}")
        return result

    async def history(self, session_id: str) -> list[dict[str, Any]]:
        """Every stored event of the session, oldest first."""
        items: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            query = f"?limit=200&cursor={cursor}" if cursor else "?limit=200"
            page = await self._call("GET", f"sessions/{session_id}/events{query}")
            items += page["items"]
            cursor = page.get("next_cursor")
            if not cursor:
                return items

    async def trace(self, run_id: str) -> dict[str, Any]:
        """The run's trace (``GET /runs/{id}/trace``, docs/inspector.md)."""
        result: dict[str, Any] = await self._call("GET", f"runs/{run_id}/trace")
        return result

    async def delete_session(self, session_id: str) -> None:
        """Delete one of the caller's sessions and its events."""
        await self._call("DELETE", f"sessions/{session_id}")

    async def cancel(self, run_id: str) -> None:
        """Stop a run (its stream ends with ``error`` ``cancelled``); a run that has
        already ended is no error."""
        try:
            await self._call("POST", f"runs/{run_id}/cancel")
        except GatewayError as exc:
            if exc.code != "not_found":
                raise

    @asynccontextmanager
    async def run(self, session_id: str, body: dict[str, Any]) -> AsyncIterator[GatewayRun]:
        """Start a run (``body``: ``message`` or ``approvals``) and hold its stream open.

        Leaving the block closes the stream; a run that has not ended then stops
        (the gateway cancels a run whose only reader went away).

        Raises:
            GatewayError: the run was refused (``session_busy``, ``not_found``, …) or
                the gateway could not be reached.
        """
        request = self._http.build_request("POST", f"sessions/{session_id}/runs", json=body)
        try:
            response = await self._http.send(request, stream=True)
        except httpx.TransportError as exc:
            raise _unreachable(exc, self.base_url) from None
        try:
            if response.is_error:
                await response.aread()
                raise _refusal(response)
            yield GatewayRun(response.headers.get("X-Run-Id", ""), response)
        finally:
            await response.aclose()


def _reason(exc: httpx.TransportError) -> str:
    """What went wrong, in words: the exception's text, else its kind (a reset has none)."""
    text = str(exc).strip()
    return f"{text} ({type(exc).__name__})" if text else type(exc).__name__


def _unreachable(exc: httpx.TransportError, base_url: str) -> GatewayError:
    """``network``: no connection could be made, or the one made broke before the answer
    (the server went away, or closed it while the request was still being sent)."""
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return GatewayError("network", f"cannot reach {base_url}: {_reason(exc)}")
    return GatewayError("network", f"the connection to {base_url} broke before the server "
                        f"answered: {_reason(exc)}")


def _refusal(response: httpx.Response) -> GatewayError:
    try:
        error = response.json()["error"]
        return GatewayError(str(error["code"]), str(error.get("message", "")))
    except (ValueError, KeyError, TypeError):
        return GatewayError("internal", f"HTTP {response.status_code}")


def _frame_data(data: bytes) -> Any:  # Any: the frame's JSON payload
    try:
        return json.loads(data)
    except ValueError:
        raise GatewayError("internal", "the server sent an event whose data is not JSON; "
                           "is it a headwater gateway?") from None
