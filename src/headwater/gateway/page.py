"""The web page at ``GET /``: plain ES modules and a stylesheet shipped in the package.

No CDN and no build step: ``static/`` is served as it is. The page follows the
frame protocol (docs/frame-protocol.md) with ``fetch`` and a streaming SSE
reader; its chat state is the seed-004 reducer in ``static/reducer.js``.
Everything the page loads comes from this origin (a ``Content-Security-Policy``
says so). The page itself needs no token; in an app with auth it asks for one
and sends it as ``Authorization: Bearer`` on every API call.

What the page knows about the app comes in the HTML, as JSON (:class:`PageConfig`):
the agents with their model names, whether each takes live input (frames:
``input_stream``) and whether it has a live streaming tool (``live``: the page
takes a transfer to an agent of that name to a live session with it), and
optional hooks an app may set on ``app.state`` —
``page_suggestions`` (prompts shown as buttons: text, or ``{"text", "agent"?,
"live"?}`` to ask a given agent, over the live WebSocket with ``live``),
``page_note`` (a short label in the header, such as "scripted model") and
``page_frames`` (``{"fps": n, "frames": [(mime_type, bytes), ...]}``: a sample
image sequence the live panel can stream as ``realtime`` messages, served as
base64 JSON at ``GET /page/frames``).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from functools import cache
from importlib import resources
from typing import Any, TypedDict

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from ..agents.agent import Agent
from .core import Gateway, GatewayDep
from .http.problems import GatewayHTTPError

_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
          ".html": "text/html; charset=utf-8", ".svg": "image/svg+xml"}
_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data: blob:; "
                               "media-src 'self' blob:; connect-src 'self'; "
                               "frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}


class AgentInfo(TypedDict):
    """An agent as the page lists it; ``input_stream``: it has a tool that consumes the
    live input stream (a ``LiveRequestQueue`` parameter), so the page offers it frames;
    ``live``: it has a live streaming tool (``kind="live"``), so its turns belong on the
    live WebSocket."""

    name: str
    model: str
    input_stream: bool
    live: bool


class Suggestion(TypedDict):
    """A prompt the page offers; ``agent`` (when set) answers it, over WS with ``live``."""

    text: str
    agent: str | None
    live: bool


class PageConfig(TypedDict):
    """What the page is told about the app (JSON in ``index.html``)."""

    auth: str
    agents: list[AgentInfo]
    suggestions: list[Suggestion]
    note: str
    sample_frames: int


def _model_name(gw: Gateway, name: str) -> str:
    agent = gw.runners[name].agent
    if not isinstance(agent, Agent):
        return type(agent).__name__  # a workflow agent calls no model itself
    try:
        return agent.model.model
    except Exception:  # a model string that cannot be resolved yet: the page still loads
        return "unresolved model"


def _agent_info(gw: Gateway, name: str) -> AgentInfo:
    agent = gw.runners[name].agent  # a live run drives the root LLM agent alone
    tools = agent.known_tools if isinstance(agent, Agent) else ()  # no listing for a page
    return AgentInfo(name=name, model=_model_name(gw, name),
                     input_stream=any(t.consumes_input_stream for t in tools),
                     live=any(t.options.kind == "live" for t in tools))


def _suggestion(given: str | Mapping[str, Any]) -> Suggestion:  # Any: app-given JSON
    if isinstance(given, str):
        return Suggestion(text=given, agent=None, live=False)
    agent = given.get("agent")
    return Suggestion(text=str(given["text"]), agent=None if agent is None else str(agent),
                      live=bool(given.get("live", False)))


def page_config(app: FastAPI, gw: Gateway) -> PageConfig:
    """The page's view of ``app``: auth mode, agents (default first) and the hooks."""
    suggestions: Sequence[str | Mapping[str, Any]] = getattr(app.state, "page_suggestions", ())
    return PageConfig(
        auth="none" if gw.dev_mode else "bearer",
        agents=[_agent_info(gw, n) for n in gw.runners],
        suggestions=[_suggestion(s) for s in suggestions],
        note=str(getattr(app.state, "page_note", "")),
        sample_frames=len(_given_frames(app).get("frames", ())),
    )


class SampleFrame(TypedDict):
    """One frame of the sample sequence: its media type and base64 bytes."""

    mime_type: str
    data: str


class SampleFrames(TypedDict):
    """``GET /page/frames``: the app's sample image sequence and its frame rate."""

    fps: float
    frames: list[SampleFrame]


def _given_frames(app: FastAPI) -> Mapping[str, Any]:  # app-given: fps, (mime, bytes) pairs
    given: Mapping[str, Any] = getattr(app.state, "page_frames", None) or {}
    return given


def _frames_of(app: FastAPI) -> SampleFrames:
    given = _given_frames(app)
    frames = [SampleFrame(mime_type=str(mime), data=base64.b64encode(data).decode("ascii"))
              for mime, data in given.get("frames", ())]
    return SampleFrames(fps=float(given.get("fps", 4)), frames=frames)


def _script_json(config: PageConfig) -> str:
    # Inside <script type="application/json">: no "</script>" or "<!--" can close it.
    return json.dumps(config).replace("<", "\\u003c").replace(">", "\\u003e")


@cache
def _asset(name: str) -> str | None:
    """A file of ``static/`` as text; ``None`` when there is no such file."""
    folder = resources.files(__package__).joinpath("static")
    if "/" in name or "\\" in name or name.startswith(".") or not any(
            name.endswith(ext) for ext in _TYPES):
        return None
    path = folder.joinpath(name)
    return path.read_text("utf-8") if path.is_file() else None


router = APIRouter(include_in_schema=False)
"""The page at ``GET /``, its files at ``GET /static/{name}`` and the app's sample
frames (``page_frames``) at ``GET /page/frames``.

The routes are public (they hold no user data) and left out of the OpenAPI
schema. A missing file, or an app without sample frames, answers 404
``not_found``.
"""


@router.get("/")
async def page(request: Request, gw: GatewayDep) -> HTMLResponse:
    html = _asset("index.html")
    assert html is not None, "the package ships static/index.html"
    config = _script_json(page_config(request.app, gw))
    return HTMLResponse(html.replace("{{config}}", config), headers=_HEADERS)


@router.get("/page/frames")
async def frames(request: Request) -> Response:
    found = _frames_of(request.app)
    if not found["frames"]:
        raise GatewayHTTPError("not_found", "this app offers no sample frames")
    return JSONResponse(found, headers=_HEADERS)


@router.get("/static/{name}")
async def asset(name: str) -> Response:
    text = _asset(name)
    if text is None:
        raise GatewayHTTPError("not_found", "no such file")
    suffix = name[name.rfind("."):]
    return Response(text, media_type=_TYPES[suffix], headers=_HEADERS)
