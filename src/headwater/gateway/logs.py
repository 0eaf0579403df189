"""How ``headwater serve`` prints the gateway's logs: one line per request and per run end.

Re-exported from :mod:`headwater.gateway.http.logs`, where the code lives.
"""

from .http.logs import (
    FIELDS,
    REDACTED,
    REDACTED_LOGGERS,
    FieldsFormatter,
    RedactSecrets,
    log_config,
    redact_uvicorn_logs,
)

__all__ = (
    "FIELDS",
    "REDACTED",
    "REDACTED_LOGGERS",
    "FieldsFormatter",
    "RedactSecrets",
    "log_config",
    "redact_uvicorn_logs",
)
