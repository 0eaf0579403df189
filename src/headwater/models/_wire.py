"""Checks for provider JSON: valid JSON of the wrong shape fails the call, never the process.

Each adapter reads a provider's stream events through these helpers, so a
``data: 123``, a list where an object belongs or a string ``index`` raises
:class:`~headwater.errors.MalformedChunk` (``provider_bad_response``) naming
the place, never a ``TypeError`` from deep inside the aggregator. Messages say
where and what was expected, never the value (it is the provider's text).
Types are exact: ``True`` is not an integer here, and ``1.0`` is not either.
"""

from __future__ import annotations

import re
from typing import Any

from ..core.errors import MalformedChunk

Json = Any  # raw wire JSON
_ENUM = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")


def shown_enum(value: str) -> str:
    """A provider enum value (``SAFETY``, ``max_output_tokens``) as an error message may
    show it; anything else is the provider's text and is not shown."""
    return value if _ENUM.fullmatch(value) else "unrecognised"


def bad(where: str, expected: str) -> MalformedChunk:
    """The error for a value at ``where`` that is not ``expected``."""
    return MalformedChunk(f"{where} is not {expected}")


def obj(value: Json, where: str) -> dict[str, Json]:
    """``value`` as an object."""
    if type(value) is not dict:
        raise bad(where, "an object")
    return value


def opt_obj(container: dict[str, Json], key: str, where: str) -> dict[str, Json] | None:
    """``container[key]`` when it is an object; ``None`` when missing or null."""
    value = container.get(key)
    if value is None:
        return None
    if type(value) is not dict:
        raise bad(f"{where}.{key}", "an object")
    return value


def opt_list(container: dict[str, Json], key: str, where: str) -> list[Json] | None:
    """``container[key]`` when it is a list; ``None`` when missing or null."""
    value = container.get(key)
    if value is None:
        return None
    if type(value) is not list:
        raise bad(f"{where}.{key}", "a list")
    return value


def opt_str(container: dict[str, Json], key: str, where: str) -> str | None:
    """``container[key]`` when it is a string; ``None`` when missing or null."""
    value = container.get(key)
    if value is None or type(value) is str:
        return value
    raise bad(f"{where}.{key}", "a string")


def opt_int(container: dict[str, Json], key: str, where: str) -> int | None:
    """``container[key]`` when it is an integer; ``None`` when missing or null."""
    value = container.get(key)
    if value is None or type(value) is int:
        return value
    raise bad(f"{where}.{key}", "an integer")


def req_str(container: dict[str, Json], key: str, where: str) -> str:
    """``container[key]``, which must be a string."""
    value = container.get(key)
    if type(value) is not str:
        raise bad(f"{where}.{key}", "a string")
    return value


def req_int(container: dict[str, Json], key: str, where: str) -> int:
    """``container[key]``, which must be an integer."""
    value = container.get(key)
    if type(value) is not int:
        raise bad(f"{where}.{key}", "an integer")
    return value
