"""How ``headwater serve`` prints the gateway's logs: one line per request and per run end.

The gateway logs with ``extra=`` fields (user, session, run, status, duration,
frames, request id); :class:`FieldsFormatter` appends them to each line as
``key=value``, so the line can be read by a person and split by a machine.
Message text and tool payloads are never among them.

:class:`RedactSecrets` keeps bearer tokens out of uvicorn's lines: at debug the
WebSocket library logs every handshake header (the ``Sec-WebSocket-Protocol``
header carries ``bearer, <token>``, the page's way to send it), and the
WebSocket access line at INFO carries the query string (where a client may put
a token the gateway refuses).
"""

from __future__ import annotations

import copy
import logging
import re
from typing import Any, Final

FIELDS = ("request_id", "method", "path", "status", "duration_ms", "user", "session", "run",
          "agent", "stop_reason", "frames")
"""The ``extra`` fields a gateway line may carry, in the order they are printed."""


class FieldsFormatter(logging.Formatter):
    """``<level> <time> <logger>: <message> key=value ...`` for the fields a record carries."""

    def __init__(self) -> None:
        super().__init__("%(levelname)s %(asctime)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        """The record's line with its fields appended."""
        line = super().format(record)
        fields = [f"{name}={getattr(record, name)}" for name in FIELDS
                  if getattr(record, name, None) is not None]
        return f"{line} {' '.join(fields)}" if fields else line


_BEARER: Final = re.compile(r"(?i)\b(bearer)([\s,]+)[^\s,\"']+")
_QUERY_VALUE: Final = re.compile(r"([?&][^=&\s\"]*=)[^&\s\"]*")
REDACTED: Final = "[redacted]"


class RedactSecrets(logging.Filter):
    """Rewrite a record's message without bearer tokens and query values.

    ``Bearer <token>`` and the subprotocols ``bearer, <token>`` keep only the
    scheme; every ``?name=value`` / ``&name=value`` keeps only the name. The
    record is changed in place (its ``args`` are merged into ``msg``) and
    always passed on.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Redact ``record``; never drop it."""
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: logging reports it when it formats
            return True
        redacted = _QUERY_VALUE.sub(rf"\1{REDACTED}", _BEARER.sub(rf"\1\2{REDACTED}", message))
        if redacted != message:
            record.msg, record.args = redacted, None
        return True


REDACTED_LOGGERS: Final = ("uvicorn.error", "uvicorn.access")
"""uvicorn's loggers that may carry a token: the WebSocket library logs handshake headers
on ``uvicorn.error``; the access lines carry query strings."""


def redact_uvicorn_logs() -> None:
    """Put :class:`RedactSecrets` on uvicorn's loggers (once), however logging is configured.

    :func:`~headwater.gateway.app.create_app` calls it, so ``uvicorn app:app``
    redacts as ``headwater serve`` does.
    """
    for name in REDACTED_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactSecrets) for f in logger.filters):
            logger.addFilter(RedactSecrets())


def log_config(level: str) -> dict[str, Any]:
    """uvicorn's logging config plus the ``headwater`` loggers at ``level``, with fields.

    uvicorn's own access lines are left out: the gateway's request line says the
    same and more (user, request id, duration). uvicorn's loggers get
    :class:`RedactSecrets`.
    """
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["formatters"]["fields"] = {"()": FieldsFormatter}
    config["handlers"]["fields"] = {"formatter": "fields", "class": "logging.StreamHandler",
                                    "stream": "ext://sys.stderr"}
    config.setdefault("filters", {})["redact"] = {"()": RedactSecrets}
    for name in REDACTED_LOGGERS:
        config["loggers"].setdefault(name, {})["filters"] = ["redact"]
    config["loggers"]["headwater"] = {"handlers": ["fields"], "level": level.upper(),
                                      "propagate": False}
    return config
