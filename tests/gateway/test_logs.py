"""``headwater serve`` prints the gateway's lines with their fields, never a payload."""

from __future__ import annotations

import logging

from headwater.gateway.logs import FieldsFormatter, log_config


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
