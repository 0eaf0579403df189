"""``headwater serve`` prints the gateway's lines with their fields, never a payload."""

from __future__ import annotations

import logging

import pytest

from headwater import Agent
from headwater.gateway import create_app
from headwater.gateway.logs import FieldsFormatter, RedactSecrets, log_config
from headwater.sessions import InMemorySessionService
from headwater.testing import ScriptedModel


def test_a_line_carries_its_fields_in_order() -> None:
    record = logging.LogRecord("headwater.gateway", logging.INFO, __file__, 1, "run %s %s",
                               ("r1", "done"), None)
    record.user, record.run, record.frames, record.status = "u1", "r1", 7, "done"
    line = FieldsFormatter().format(record)
    assert line.endswith("headwater.gateway: run r1 done status=done user=u1 run=r1 frames=7")


def test_the_config_routes_headwater_lines_to_the_fields_formatter() -> None:
    config = log_config("info")
    assert config["loggers"]["headwater"] == {"handlers": ["fields"], "level": "INFO",
                                              "propagate": False}
    handler = config["handlers"]["fields"]
    assert config["formatters"][handler["formatter"]]["()"] is FieldsFormatter
    assert "uvicorn.access" in config["loggers"]  # uvicorn's own config is kept


def test_an_app_redacts_tokens_in_uvicorn_s_lines(caplog: pytest.LogCaptureFixture) -> None:
    create_app(Agent(name="bot", model=ScriptedModel()),  # as under `uvicorn app:app`
               session_service=InMemorySessionService())
    error = logging.getLogger("uvicorn.error")
    error.addHandler(caplog.handler)  # uvicorn's config may stop it short of the root logger
    try:
        with caplog.at_level(logging.DEBUG, logger="uvicorn.error"):
            error.info('%s - "WebSocket %s" [accepted]', "127.0.0.1:5", "/live/s?token=abc&x=1")
            error.debug("< %s: %s", "Sec-WebSocket-Protocol", "bearer, tok-123, other")
            error.debug("< %s: %s", "Authorization", "Bearer tok-456")
            error.info("no secret here")
    finally:
        error.removeHandler(caplog.handler)
    lines = list(dict.fromkeys(r.getMessage() for r in caplog.records))  # once if propagated
    assert lines == ['127.0.0.1:5 - "WebSocket /live/s?token=[redacted]&x=[redacted]" '
                     "[accepted]",
                     "< Sec-WebSocket-Protocol: bearer, [redacted], other",
                     "< Authorization: Bearer [redacted]",
                     "no secret here"]
    create_app(Agent(name="bot", model=ScriptedModel()), session_service=InMemorySessionService())
    assert sum(isinstance(f, RedactSecrets) for f in error.filters) == 1  # once
