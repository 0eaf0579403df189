"""``headwater serve module:attr``."""

from __future__ import annotations

from typing import Any

from ._common import check_port, use_cors_origins


def serve_command(args: Any) -> int:  # argparse.Namespace
    """Serve the target until stopped; bad targets raise ``UserError`` (exit code 2)."""
    from ..gateway.serve import serve  # the web stack loads only for this command
    from ..settings import get_settings

    get_settings()  # a bad HEADWATER_* setting fails here, in words
    use_cors_origins(args.cors_origin)
    model = args.model
    if model is not None:
        from ._models import resolve_model

        resolve_model(model)  # an unknown provider or a missing key fails here, in words
        model = "demo:demo" if model == "demo" else model
    check_port(args.host, args.port)  # a busy port fails here, in words
    serve(args.target, host=args.host, port=args.port, reload=args.reload,
          insecure_dev=args.insecure_dev, log_level=args.log_level, model=model)
    return 0
