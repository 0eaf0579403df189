"""What callbacks, instruction providers and tools see of a run.

The names and shapes follow Google ADK's (``google.adk.agents.readonly_context``,
``callback_context``): ``ReadonlyContext`` for instruction providers,
``CallbackContext`` for callbacks (state writes recorded as a state delta,
artifacts saved, loaded and listed on the runner's artifact service).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Protocol

from .errors import UserError
from .events import EventActions
from .state import State
from .types import Content, Part


class ArtifactStore(Protocol):
    """What a context needs of an artifact service (``headwater.artifacts.BaseArtifactService``)."""

    async def save_artifact(self, *, app_name: str, user_id: str, session_id: str,
                            filename: str, artifact: Part) -> int: ...

    async def load_artifact(self, *, app_name: str, user_id: str, session_id: str,
                            filename: str, version: int | None = None) -> Part | None: ...

    async def list_artifact_keys(self, *, app_name: str, user_id: str,
                                 session_id: str) -> list[str]: ...


class ReadonlyContext:
    """The run as an instruction provider sees it; nothing here can be changed.

    Attributes:
        invocation_id: the run's id.
        agent_name: the agent being run.
        app_name, user_id, session_id: whose session this is.
        user_content: the user's message that started the run (``None`` in a
            live run, or when a context is made outside a run).
        state: the session's state, read-only (``CallbackContext.state`` writes).
    """

    __slots__ = ("_invocation_context", "_value", "agent_name", "app_name", "invocation_id",
                 "session_id", "user_content", "user_id")

    def __init__(self, *, invocation_id: str, agent_name: str, app_name: str, user_id: str,
                 session_id: str, session_state: dict[str, Any],
                 user_content: Content | None = None, invocation_context: Any = None) -> None:
        self.invocation_id = invocation_id
        self.agent_name = agent_name
        self.app_name = app_name
        self.user_id = user_id
        self.session_id = session_id
        self.user_content = user_content
        self._value = session_state
        # ADK's samples read ``ctx._invocation_context.session`` (and its
        # ``session_service``); the run's InvocationContext, or None outside a run.
        self._invocation_context = invocation_context

    @property
    def state(self) -> Mapping[str, Any]:
        """The session's state as this run sees it (its own writes included), read-only."""
        return MappingProxyType(self._value)


class CallbackContext(ReadonlyContext):
    """The run as seen by callbacks and tools.

    Attributes:
        state: session state; writes go to the run's view at once and are
            recorded in ``actions.state_delta``, persisted with the next event
            of this context.
        actions: side effects to attach to that event.
        artifact_service: the runner's artifact store (``Runner(artifact_service=…)``),
            or ``None``; :meth:`save_artifact`, :meth:`load_artifact` and
            :meth:`list_artifacts` use it, scoped to this app, user and session.
    """

    __slots__ = ("_state", "actions", "artifact_service")

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
        artifact_service: ArtifactStore | None = None,
        user_content: Content | None = None,
        invocation_context: Any = None,
    ) -> None:
        super().__init__(invocation_id=invocation_id, agent_name=agent_name, app_name=app_name,
                         user_id=user_id, session_id=session_id, session_state=session_state,
                         user_content=user_content, invocation_context=invocation_context)
        self.actions = actions if actions is not None else EventActions()
        self.artifact_service = artifact_service
        self._state = State(session_state, self.actions.state_delta)

    @property
    def state(self) -> State:
        """The session's state, writable: a write is recorded in ``actions.state_delta``."""
        return self._state

    def _artifacts(self) -> ArtifactStore:
        if self.artifact_service is None:
            raise UserError("no artifact service: pass artifact_service= to the Runner "
                            "(InMemoryRunner has one)")
        return self.artifact_service

    async def save_artifact(self, filename: str, artifact: Part) -> int:
        """Save ``artifact`` under ``filename`` next to the session; its version (0, 1, …).

        The version is recorded in ``actions.artifact_delta``, so the event this
        context's changes go with says what it saved. A ``"user:"`` filename is
        shared by the user's sessions of the app.

        Raises:
            UserError: the runner has no artifact service, or the store refuses the
                artifact (a bad filename, too large, not a blob or a text).
        """
        version = await self._artifacts().save_artifact(
            app_name=self.app_name, user_id=self.user_id, session_id=self.session_id,
            filename=filename, artifact=artifact)
        self.actions.artifact_delta[filename] = version
        return version

    async def load_artifact(self, filename: str, version: int | None = None) -> Part | None:
        """The given version of ``filename`` (the latest when ``None``), or ``None`` if missing.

        Raises:
            UserError: the runner has no artifact service, a bad filename or version.
        """
        return await self._artifacts().load_artifact(
            app_name=self.app_name, user_id=self.user_id, session_id=self.session_id,
            filename=filename, version=version)

    async def list_artifacts(self) -> list[str]:
        """The filenames this session sees (its own and the user's ``"user:…"``), sorted.

        Raises:
            UserError: the runner has no artifact service.
        """
        return await self._artifacts().list_artifact_keys(
            app_name=self.app_name, user_id=self.user_id, session_id=self.session_id)
