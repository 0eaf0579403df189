"""Credentials kept out of text a person may read: logs, error details, the run inspector.

One rule for every place that shows text which may carry a key or a token
(models' error bodies, the inspector's recorded payloads, docs/inspector.md):
the secrets a caller names are replaced, and so is anything shaped like a
credential (an ``Authorization`` value, an ``sk-…`` key, ``api_key=…``).
"""

from __future__ import annotations

import re
from typing import Any, Final

__all__ = ("REDACTED", "is_secret_key", "redact", "redact_value")

REDACTED: Final = "[redacted]"
"""What a secret is replaced with."""

_SECRETS: Final = re.compile(
    r"(?i)(?:bearer\s+|basic\s+)[A-Za-z0-9._~+/=-]+"  # authorization values
    r"|\b(?:sk|pk|rk)-[A-Za-z0-9_-]{6,}"  # sk-…, sk-ant-…, sk-proj-…
    r"|\b(?:api[_-]?key|x-api-key|authorization|token|secret|password)"  # key=value, "key": …
    r"[\"']?\s*[:=]\s*[\"']?(?:(?:bearer|basic)\s+)?[^\"'\s,}]+"
)
_SECRET_KEY: Final = re.compile(
    r"(?i)^(?:x-)?(?:api[_-]?key|authorization|(?:access|bearer|auth|refresh|id)?[_-]?token"
    r"|secret|client[_-]?secret|password|passwd)$")


def redact(text: str, *secrets: str | None) -> str:
    """``text`` with the given secrets and anything shaped like a credential replaced."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    return _SECRETS.sub(REDACTED, text)


def is_secret_key(key: str) -> bool:
    """Whether a mapping's key names a credential (``api_key``, ``Authorization``,
    ``token``, ``password``, …): its value is never shown."""
    return _SECRET_KEY.match(key) is not None


def redact_value(value: Any) -> Any:
    """A JSON-like value with every string :func:`redact`-ed and the value of every key that
    names a credential (:func:`is_secret_key`) replaced; a new value, the given one is
    left as it is."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {key: REDACTED if isinstance(key, str) and is_secret_key(key)
                else redact_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_value(item) for item in value]
    return value
