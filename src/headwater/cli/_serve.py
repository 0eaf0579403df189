"""``headwater serve module:attr``."""

from __future__ import annotations

import asyncio
import os
from typing import Any
from urllib.parse import urlsplit

from ._common import CommandError, check_port, use_cors_origins

REDIS_SCHEMES = ("redis", "rediss", "unix")
"""The schemes of a Redis URL (redis-py's ``from_url``)."""


def serve_command(args: Any) -> int:  # argparse.Namespace
    """Serve the target until stopped; bad targets raise ``UserError`` (exit code 2)."""
    from ..core.settings import get_settings
    from ..gateway.serve import serve  # the web stack loads only for this command

    get_settings()  # a bad HEADWATER_* setting fails here, in words
    use_cors_origins(args.cors_origin)
    use_database(args.db)
    use_redis(args.redis_url)
    if args.workers > 1 and not args.reload and not get_settings().redis_url:
        raise CommandError(
            f"--workers {args.workers} needs --redis-url (or HEADWATER_REDIS_URL): workers "
            "share runs through Redis; without it a run could be followed or cancelled only "
            "through the worker that runs it")
    model = args.model
    if model is not None:
        from ._models import resolve_model

        resolve_model(model)  # an unknown provider or a missing key fails here, in words
    check_port(args.host, args.port)  # a busy port fails here, in words
    serve(args.target, host=args.host, port=args.port, reload=args.reload,
          insecure_dev=args.insecure_dev, log_level=args.log_level, model=model,
          workers=args.workers)
    return 0


def use_database(db: str | None) -> None:
    """``--db`` (else ``HEADWATER_DATABASE_URL``, when set): open the store, which brings
    its schema to head (``database_auto_migrate``; once, however many workers follow),
    and make it the served app's (``HEADWATER_DATABASE_URL``, which workers inherit).

    Raises:
        CommandError: a malformed or unsupported URL, a store that does not answer, or
            one whose schema cannot be brought to head (a failed migration; a database
            newer than this headwater; not at head with auto-migration off).
        ImportError: a PostgreSQL URL without asyncpg.
    """
    from ..core.settings import reload_settings
    from ._store import answered, open_store

    if db is None and not os.environ.get("HEADWATER_DATABASE_URL"):
        return  # the default embedded file: created on first use, as before
    if db is not None:
        from ._store import check_url

        check_url(db)  # a malformed URL fails before it is put in the environment
        os.environ["HEADWATER_DATABASE_URL"] = db
        reload_settings()
    service, shown = open_store(None)

    async def probe() -> None:
        try:
            # The first answer within the probe's time (an unreachable store fails in
            # words), then the migration, which takes the time it needs.
            await answered(service.schema_revision(), shown)
            await answered(service.ping(), shown, within=None)
        finally:
            await service.close()

    asyncio.run(probe())


def use_redis(url: str | None) -> None:
    """``--redis-url`` (else ``HEADWATER_REDIS_URL``, when set): check the Redis there answers
    a ``PING``, and make it the served app's (``HEADWATER_REDIS_URL``, the ``redis_url``
    setting, which workers inherit).

    Raises:
        CommandError: not a ``redis://``, ``rediss://`` or ``unix://`` URL, or its server
            does not answer (refused, a wrong password, too slow). The URL is shown
            without its password.
        ImportError: redis-py is not installed (the message names the extra).
    """
    from ..core.settings import get_settings, reload_settings
    from ..gateway.runs.redis_backend import connect, disconnect
    from ..gateway.serve import without_password
    from ._store import PROBE_TIMEOUT

    if url is None:
        url = os.environ.get("HEADWATER_REDIS_URL") or None
        if url is None:
            return
    shown = without_password(url)
    if urlsplit(url).scheme not in REDIS_SCHEMES:
        raise CommandError(f"{shown} is not a Redis URL; expected redis://host:6379/0 "
                           "(or rediss://, unix://)")

    async def ping() -> None:
        client = connect(url, get_settings())
        try:
            await asyncio.wait_for(client.ping(), PROBE_TIMEOUT)
        finally:
            await disconnect(client)

    try:
        asyncio.run(ping())
    except TimeoutError:
        raise CommandError(f"Redis at {shown} did not answer within {PROBE_TIMEOUT:g} s"
                           ) from None
    except ImportError:
        raise
    except Exception as exc:  # redis-py's errors (refused, auth, a bad URL), ValueError
        lines = str(exc).strip().splitlines() or [type(exc).__name__]
        password = urlsplit(url).password
        why = lines[0].replace(password, "***") if password else lines[0]
        raise CommandError(f"cannot use Redis at {shown} ({why})") from None
    os.environ["HEADWATER_REDIS_URL"] = url
    reload_settings()
