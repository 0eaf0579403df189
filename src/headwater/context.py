"""What callbacks and instruction providers see of a run."""

from __future__ import annotations

from typing import Any

from .events import EventActions
from .state import State


class CallbackContext:
    """The run as seen by callbacks, instruction providers and tools.

    Attributes:
        invocation_id: the run's id.
        agent_name: the agent being run.
        app_name, user_id, session_id: whose session this is.
        state: session state; writes are recorded in ``actions.state_delta``
            and persisted with the next event of this context.
        actions: side effects to attach to that event.
    """

    __slots__ = ("actions", "agent_name", "app_name", "invocation_id", "session_id", "state",
                 "user_id")

    def __init__(
        self,
        *,
        invocation_id: str,
        agent_name: str,
        app_name: str,
        user_id: str,
        session_id: str,
        session_state: dict[str, Any],
        actions: EventActions | None = None,
    ) -> None:
        self.invocation_id = invocation_id
        self.agent_name = agent_name
        self.app_name = app_name
        self.user_id = user_id
        self.session_id = session_id
        self.actions = actions if actions is not None else EventActions()
        self.state = State(session_state, self.actions.state_delta)
