"""headwater: a streaming-first agent development kit.

One event stream per run; partial events for the screen, one aggregate per
model call as the record. The contracts are in the repository's docs/.

The library logs under ``"headwater"`` and leaves output to the application:
the logger has a ``NullHandler``, so nothing reaches stderr (not even through
Python's last-resort handler) until the application configures logging.
"""

import importlib as _importlib
import logging as _logging
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

if _TYPE_CHECKING:
    from .agents.agent import Agent as Agent
    from .agents.agent import LlmAgent as LlmAgent
    from .agents.agent_tool import AgentTool as AgentTool
    from .agents.workflow import LoopAgent as LoopAgent
    from .agents.workflow import ParallelAgent as ParallelAgent
    from .agents.workflow import SequentialAgent as SequentialAgent
    from .core.events import Event as Event
    from .core.events import EventActions as EventActions
    from .core.events import ToolStreamEvent as ToolStreamEvent
    from .core.live_request_queue import LiveRequestQueue as LiveRequestQueue
    from .core.run_config import RunConfig as RunConfig
    from .core.run_config import StreamingMode as StreamingMode
    from .core.types import Content as Content
    from .core.types import FunctionCall as FunctionCall
    from .core.types import FunctionResponse as FunctionResponse
    from .core.types import Part as Part
    from .core.types import Usage as Usage
    from .runner import Runner as Runner
    from .tools.context import ToolContext as ToolContext
    from .tools.example_tool import Example as Example
    from .tools.example_tool import ExampleTool as ExampleTool
    from .tools.function_tool import FunctionTool as FunctionTool
    from .tools.function_tool import LongRunningFunctionTool as LongRunningFunctionTool
    from .tools.function_tool import tool as tool

__all__ = (
    "Agent",
    "AgentTool",
    "Content",
    "Event",
    "EventActions",
    "Example",
    "ExampleTool",
    "FunctionCall",
    "FunctionResponse",
    "FunctionTool",
    "LiveRequestQueue",
    "LlmAgent",
    "LongRunningFunctionTool",
    "LoopAgent",
    "ParallelAgent",
    "Part",
    "RunConfig",
    "Runner",
    "SequentialAgent",
    "StreamingMode",
    "ToolContext",
    "ToolStreamEvent",
    "Usage",
    "tool",
)

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "Agent": ".agents.agent",
    "LlmAgent": ".agents.agent",
    "AgentTool": ".agents.agent_tool",
    "LoopAgent": ".agents.workflow",
    "ParallelAgent": ".agents.workflow",
    "SequentialAgent": ".agents.workflow",
    "Event": ".core.events",
    "EventActions": ".core.events",
    "ToolStreamEvent": ".core.events",
    "LiveRequestQueue": ".core.live_request_queue",
    "RunConfig": ".core.run_config",
    "StreamingMode": ".core.run_config",
    "Runner": ".runner",
    "ToolContext": ".tools.context",
    "Example": ".tools.example_tool",
    "ExampleTool": ".tools.example_tool",
    "FunctionTool": ".tools.function_tool",
    "LongRunningFunctionTool": ".tools.function_tool",
    "tool": ".tools.function_tool",
    "Content": ".core.types",
    "FunctionCall": ".core.types",
    "FunctionResponse": ".core.types",
    "Part": ".core.types",
    "Usage": ".core.types",
}


def __getattr__(name: str) -> _Any:
    # The public names load on first use, so `headwater --help` and
    # `import headwater.settings` do not pay for the whole kit.
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


_logging.getLogger(__name__).addHandler(_logging.NullHandler())
