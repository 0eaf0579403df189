"""``ToolContext``: what a tool sees of the run it was called from."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
from typing import Any

from ..core.clock import SYSTEM_CLOCK, Clock
from ..core.context import ArtifactStore, CallbackContext
from ..core.errors import UserError
from ..core.events import EventActions
from ..core.live_request_queue import LiveRequestQueue
from ..core.types import Content
from ..memory.base import BaseMemoryService, SearchMemoryResponse

logger = logging.getLogger("headwater.tools")

_REAP_TIMEOUT = 5.0  # seconds to wait for a killed process to be reaped


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
        artifact_service: the runner's artifact store (``Runner(artifact_service=…)``),
            or ``None``; ``save_artifact``, ``load_artifact`` and ``list_artifacts``
            (:class:`~headwater.context.CallbackContext`'s) use it.
        memory_service: the runner's memory (``Runner(memory_service=…)``), or
            ``None``; :meth:`search_memory` reads it.

    Processes: :meth:`start_process` (async tools) and :meth:`popen` (sync
    tools) start a child process the framework owns. Each gets a process group
    of its own, and when the call ends — it returned, failed, timed out or was
    cancelled (the client left, the run was stopped, the server is stopping) —
    the whole group is killed (``SIGKILL``) and reaped, so neither the child
    nor anything it started outlives the call (docs/tools.md).
    """

    __slots__ = ("_processes", "clock", "function_call_id", "input_stream", "memory_service",
                 "tool_name")

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
        artifact_service: ArtifactStore | None = None,
        memory_service: BaseMemoryService | None = None,
        user_content: Content | None = None,
        invocation_context: Any = None,
    ) -> None:
        super().__init__(invocation_id=invocation_id, agent_name=agent_name, app_name=app_name,
                         user_id=user_id, session_id=session_id, session_state=session_state,
                         actions=actions, artifact_service=artifact_service,
                         user_content=user_content, invocation_context=invocation_context)
        self.function_call_id = function_call_id
        self.tool_name = tool_name
        self.clock = clock
        self.input_stream = input_stream
        self.memory_service = memory_service
        self._processes: list[asyncio.subprocess.Process | subprocess.Popen[Any]] = []

    async def search_memory(self, query: str) -> SearchMemoryResponse:
        """What the runner's memory holds of this user's past sessions of the app matching
        ``query`` (``BaseMemoryService.search_memory``).

        Raises:
            UserError: the runner has no memory service.
        """
        if self.memory_service is None:
            raise UserError("no memory service: pass memory_service= to the Runner "
                            "(InMemoryRunner has one)")
        return await self.memory_service.search_memory(
            app_name=self.app_name, user_id=self.user_id, query=query)

    async def start_process(self, program: str, *args: str,
                            **kwargs: Any) -> asyncio.subprocess.Process:
        """Start ``program`` with ``args`` (``asyncio.create_subprocess_exec``), owned by the call.

        Keyword arguments go to ``create_subprocess_exec`` (``stdout=``, ``env=``,
        ``cwd=``…); the process runs in a new session (its own process group),
        killed with everything in it when the call ends.
        """
        kwargs["start_new_session"] = True
        process = await asyncio.create_subprocess_exec(program, *args, **kwargs)
        self._processes.append(process)
        return process

    def popen(self, args: Any, **kwargs: Any) -> subprocess.Popen[Any]:
        """Start a process (``subprocess.Popen(args, **kwargs)``), owned by the call.

        For sync tools (it does not need the event loop). The process runs in a
        new session (its own process group), killed with everything in it when
        the call ends; a thread blocked in its ``wait()`` or ``communicate()``
        then returns.
        """
        kwargs["start_new_session"] = True
        process: subprocess.Popen[Any] = subprocess.Popen(args, **kwargs)
        self._processes.append(process)
        return process

    async def end_processes(self) -> int:
        """Kill (``SIGKILL``, the whole group) and reap every process this call started
        that is still running; the framework calls it when the call ends.

        Returns:
            How many were still running.
        """
        if not self._processes:
            return 0
        processes, self._processes = self._processes, []
        running = [p for p in processes if p.returncode is None
                   and not (isinstance(p, subprocess.Popen) and p.poll() is not None)]
        for process in running:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)  # its group: grandchildren too
        for process in running:
            try:
                if isinstance(process, subprocess.Popen):
                    await asyncio.to_thread(process.wait, _REAP_TIMEOUT)
                else:
                    await asyncio.wait_for(process.wait(), _REAP_TIMEOUT)
            except (TimeoutError, subprocess.TimeoutExpired):
                logger.warning("tool %s (call %s): process %d not reaped %g s after SIGKILL",
                               self.tool_name, self.function_call_id, process.pid,
                               _REAP_TIMEOUT)
        if running:
            logger.info("tool %s (call %s): killed %d process(es) it left running",
                        self.tool_name, self.function_call_id, len(running))
        return len(running)
