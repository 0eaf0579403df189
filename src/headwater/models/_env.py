"""Credentials and API roots of model strings, read from the environment."""

from __future__ import annotations

import os

from ..core.errors import UserError


def env_key(model: str, *variables: str) -> str:
    """The API key for model string ``model`` from the first of ``variables`` that is set.

    Raises:
        UserError: none is set (the message names them, never a value).
    """
    for variable in variables:
        key = os.environ.get(variable)
        if key:
            return key
    others = f" (or {', '.join(variables[1:])})" if variables[1:] else ""
    raise UserError(f"model {model!r} needs an API key: set {variables[0]}{others}")


def env_base_url(default: str, *variables: str) -> str:
    """The API root from the first of ``variables`` that is set, else ``default``."""
    return next((url for url in map(os.environ.get, variables) if url), default)
