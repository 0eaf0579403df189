"""``ToolContext``: what a tool sees of the run it was called from."""

from __future__ import annotations

from typing import Any

from ..clock import SYSTEM_CLOCK, Clock
from ..context import CallbackContext
from ..events import EventActions
from ..live_request_queue import LiveRequestQueue


class ToolContext(CallbackContext):
    """Injected into a tool that declares a parameter annotated ``ToolContext``.

    The parameter is hidden from the model's declaration. Writes to ``state``
    and changes to ``actions`` are persisted with the tool's function-response
    event.

    Attributes:
        function_call_id: the id of the call being executed.
        tool_name: the tool being executed.
        clock: the run's clock (virtual under ``headwater.testing.VirtualClock``).
        input_stream: in a live run, this call's own queue of the user's live
            requests (for tools that consume the input stream), else ``None``.
    """

    __slots__ = ("clock", "function_call_id", "input_stream", "tool_name")

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
        clock: Clock = SYSTEM_CLOCK,
        input_stream: LiveRequestQueue | None = None,
    ) -> None:
        super().__init__(invocation_id=invocation_id, agent_name=agent_name, app_name=app_name,
                         user_id=user_id, session_id=session_id, session_state=session_state,
                         actions=actions)
        self.function_call_id = function_call_id
        self.tool_name = tool_name
        self.clock = clock
        self.input_stream = input_stream
