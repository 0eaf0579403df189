"""How ``headwater serve`` prints the gateway's logs: one line per request and per run end.

The gateway logs with ``extra=`` fields (user, session, run, status, duration,
frames, request id); :class:`FieldsFormatter` appends them to each line as
``key=value``, so the line can be read by a person and split by a machine.
Message text and tool payloads are never among them.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

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


def log_config(level: str) -> dict[str, Any]:
    """uvicorn's logging config plus the ``headwater`` loggers at ``level``, with fields.

    uvicorn's own access lines are left out: the gateway's request line says the
    same and more (user, request id, duration).
    """
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["formatters"]["fields"] = {"()": FieldsFormatter}
    config["handlers"]["fields"] = {"formatter": "fields", "class": "logging.StreamHandler",
                                    "stream": "ext://sys.stderr"}
    config["loggers"]["headwater"] = {"handlers": ["fields"], "level": level.upper(),
                                      "propagate": False}
    return config
