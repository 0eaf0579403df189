"""Filling ``{key}`` in an agent's instruction from session state (ADK's templating).

``{key}`` is replaced by ``str(state[key])``; ``{key?}`` by the same, or by
nothing when the state has no such key. A key is an identifier, optionally
prefixed ``app:``, ``user:`` or ``temp:``; braces around anything else (JSON,
``{artifact.name}``) are left as they are. Only string instructions are
filled: a callable instruction builds its own text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..core.context import CallbackContext
from ..core.errors import UserError
from ._execution import maybe_await
from .callbacks import InstructionProvider

_PLACEHOLDER = re.compile(r"\{+[^{}]*\}+")
_PREFIXES = ("app:", "user:", "temp:")


def is_state_key(name: str) -> bool:
    """Whether ``name`` can name a state value in a template."""
    for prefix in _PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix):]
            break
    return name.isidentifier()


def inject_session_state(template: str, state: Mapping[str, Any], *, agent_name: str = ""
                         ) -> str:
    """``template`` with each ``{key}`` / ``{key?}`` filled from ``state``.

    Raises:
        UserError: a required ``{key}`` the state does not hold (the message
            names the key and how to make it optional).
    """
    if "{" not in template:
        return template

    def fill(match: re.Match[str]) -> str:
        key = match.group().lstrip("{").rstrip("}").strip()
        optional = key.endswith("?")
        if optional:
            key = key[:-1]
        if not is_state_key(key):
            return match.group()
        if key in state:
            return str(state[key])
        if optional:
            return ""
        who = f"agent {agent_name!r}" if agent_name else "an agent"
        raise UserError(
            f"the instruction of {who} needs state key {key!r}, which the session does not "
            f"hold; set it first (an earlier agent's output_key, a tool, or create_session("
            f"state=)), or write {{{key}?}} to leave it empty when missing")

    return _PLACEHOLDER.sub(fill, template)


async def instruction_text(instruction: str | InstructionProvider,
                           callback_context: CallbackContext | None,
                           state: Mapping[str, Any], agent_name: str) -> str:
    """An instruction's text: a provider's as it returns it, a string with ``{key}``
    filled from ``state``.

    Raises:
        UserError: as :func:`inject_session_state`.
    """
    if callable(instruction):
        assert callback_context is not None  # made whenever the flow calls back
        return str(await maybe_await(instruction(callback_context)))
    return inject_session_state(instruction, state, agent_name=agent_name)


async def system_instruction(instruction: str | InstructionProvider,
                             global_instruction: str | InstructionProvider,
                             callback_context: CallbackContext | None,
                             state: Mapping[str, Any], agent_name: str) -> str:
    """The agent's system instruction: the tree's global instruction (its root's) first,
    then the agent's own, a blank line between (ADK's order).

    Raises:
        UserError: as :func:`inject_session_state`.
    """
    own = await instruction_text(instruction, callback_context, state, agent_name)
    if not global_instruction:
        return own
    before = await instruction_text(global_instruction, callback_context, state, agent_name)
    return f"{before}\n\n{own}" if before and own else (before or own)
