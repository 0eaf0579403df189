"""``ToolContext``: what a tool sees of the run it was called from."""

from __future__ import annotations

from typing import Any

from ..context import CallbackContext
from ..events import EventActions


class ToolContext(CallbackContext):
    """Injected into a tool that declares a parameter annotated ``ToolContext``.

    The parameter is hidden from the model's declaration. Writes to ``state``
    and changes to ``actions`` are persisted with the tool's function-response
    event.

    Attributes:
        function_call_id: the id of the call being executed.
        tool_name: the tool being executed.
    """

    __slots__ = ("function_call_id", "tool_name")

    def __init__(
        self,
        *,
        function_call_id: str,
        tool_name: str,
        invocation_id: str,
        agent_name: str,
        app_name: str,
        user_id: str,
        session_id: str,
        session_state: dict[str, Any],
        actions: EventActions | None = None,
    ) -> None:
        super().__init__(invocation_id=invocation_id, agent_name=agent_name, app_name=app_name,
                         user_id=user_id, session_id=session_id, session_state=session_state,
                         actions=actions)
        self.function_call_id = function_call_id
        self.tool_name = tool_name
