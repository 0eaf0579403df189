"""The web page at ``GET /``: plain ES modules and a stylesheet shipped in the package.

No CDN and no build step: ``static/`` is served as it is. The page follows the
frame protocol (docs/frame-protocol.md) with ``fetch`` and a streaming SSE
reader; its chat state is the seed-004 reducer in ``static/reducer.js``.
Everything the page loads comes from this origin (a ``Content-Security-Policy``
says so). The page itself needs no token; in an app with auth it asks for one
and sends it as ``Authorization: Bearer`` on every API call.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, Response

from .core import Gateway
from .problems import GatewayHTTPError

_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
          ".html": "text/html; charset=utf-8", ".svg": "image/svg+xml"}
_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data: blob:; "
                               "media-src 'self' blob:; connect-src 'self'; "
                               "frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}


@cache
def _asset(name: str) -> str | None:
    """A file of ``static/`` as text; ``None`` when there is no such file."""
    folder = resources.files(__package__).joinpath("static")
    if "/" in name or "\\" in name or name.startswith(".") or not any(
            name.endswith(ext) for ext in _TYPES):
        return None
    path = folder.joinpath(name)
    return path.read_text("utf-8") if path.is_file() else None


def add_page_routes(app: FastAPI, gw: Gateway) -> None:
    """Serve the page at ``GET /`` and its files at ``GET /static/{name}``.

    The routes are public (the files hold no data) and left out of the OpenAPI
    schema. A missing file answers 404 ``not_found``.
    """
    auth = "none" if gw.dev_mode else "bearer"

    @app.get("/", include_in_schema=False)
    async def page() -> HTMLResponse:
        html = _asset("index.html")
        assert html is not None, "the package ships static/index.html"
        return HTMLResponse(html.replace("{{auth}}", auth), headers=_HEADERS)

    @app.get("/static/{name}", include_in_schema=False)
    async def asset(name: str) -> Response:
        text = _asset(name)
        if text is None:
            raise GatewayHTTPError("not_found", "no such file")
        suffix = name[name.rfind("."):]
        return Response(text, media_type=_TYPES[suffix], headers=_HEADERS)
