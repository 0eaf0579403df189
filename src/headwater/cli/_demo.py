"""``headwater demo``: the example agents and their page, served on 127.0.0.1.

The gateway is started through ``headwater.gateway.serve`` with this module's
``app`` as its target; the app is built on first access to ``app`` (a module
``__getattr__``) by :func:`demo_app`, from what :func:`demo_command` configured.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import webbrowser
from dataclasses import dataclass
from typing import Any

from ._common import check_port, use_cors_origins

BROWSER_DELAY = 1.0
"""Seconds between printing the URL and opening the browser (the server is up by then)."""


@dataclass(slots=True)
class _Config:
    database_url: str
    model: Any  # BaseLlm; typed loosely so this module imports nothing heavy


_config: _Config | None = None  # set by demo_command before the server imports ``app``


def demo_command(args: Any) -> int:  # argparse.Namespace
    """Serve the demo until Ctrl-C (or run the terminal turn with ``--terminal``)."""
    if args.terminal:
        from ..core.run_config import StreamingMode
        from ._terminal import demo

        return asyncio.run(demo(args.prompt, args.db, args.model, StreamingMode(args.mode),
                                sys.stdout))
    global _config
    use_cors_origins(args.cors_origin)
    from ._models import describe_model, resolve_model
    from ._store import database_url, open_store, probe

    service, shown = open_store(args.db)
    asyncio.run(_probe_and_close(service, shown, probe))
    model = resolve_model(args.model)
    check_port("127.0.0.1", args.port)
    _config = _Config(database_url(args.db), model)
    url = f"http://127.0.0.1:{args.port}/"
    print(f"headwater demo: serving the example agents at {url}\n"
          f"  model {describe_model(model)}; sessions in {shown}\n"
          "  Ctrl-C stops it.", flush=True)
    if not args.no_browser:
        threading.Timer(BROWSER_DELAY, webbrowser.open, (url,)).start()
    from ..gateway.serve import serve

    serve(f"{__name__}:app", host="127.0.0.1", port=args.port, log_level="warning")
    return 0


async def _probe_and_close(service: Any, shown: str, probe: Any) -> None:
    try:
        await probe(service, shown)
    finally:
        await service.close()


def demo_app(database_url: str, model: Any) -> Any:
    """``headwater demo``'s app: the gateway (dev mode: one local user) over the demo
    agents on ``model`` (a ``BaseLlm``), sessions in ``database_url``."""
    return build_app(_Config(database_url, model))


def build_app(config: _Config) -> Any:
    """The gateway over the demo agents, as configured."""
    from ..core.settings import get_settings
    from ..gateway.app import create_app
    from ..models.demo import DemoModel
    from ._agents import demo_agents, page_frames, page_suggestions

    settings = get_settings().model_copy(update={"database_url": config.database_url})
    app = create_app(demo_agents(config.model), settings=settings)
    # The page offers the prompts, each to the agent that has its tool (live: the
    # watcher and the counter), and the counter's bundled frames.
    app.state.page_suggestions = page_suggestions()
    app.state.page_frames = page_frames()
    if isinstance(config.model, DemoModel):
        app.state.page_note = "scripted model"
    return app


def __getattr__(name: str) -> Any:
    if name != "app" or _config is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    app = build_app(_config)
    globals()["app"] = app
    return app
