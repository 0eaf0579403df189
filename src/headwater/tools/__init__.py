"""Tools a model can call (docs/tools.md)."""

from ..core.errors import ToolArgumentsError as ToolArgumentsError
from .approval import APPROVAL_RESPONSE_NAME as APPROVAL_RESPONSE_NAME
from .approval import approval_response as approval_response
from .approval import args_sha256 as args_sha256
from .context import ToolContext as ToolContext
from .example_tool import Example as Example
from .example_tool import ExampleTool as ExampleTool
from .function_tool import BaseTool as BaseTool
from .function_tool import FunctionTool as FunctionTool
from .function_tool import LongRunningFunctionTool as LongRunningFunctionTool
from .function_tool import tool as tool
from .memory import LoadMemoryTool as LoadMemoryTool
from .memory import PreloadMemoryTool as PreloadMemoryTool
from .memory import load_memory as load_memory
from .memory import preload_memory as preload_memory
from .middleware import ToolInvocation as ToolInvocation
from .middleware import ToolMiddleware as ToolMiddleware
from .options import ToolKind as ToolKind
from .options import ToolOptions as ToolOptions
from .toolset import BaseToolset as BaseToolset

__all__ = (
    "APPROVAL_RESPONSE_NAME",
    "BaseTool",
    "BaseToolset",
    "Example",
    "ExampleTool",
    "FunctionTool",
    "LoadMemoryTool",
    "LongRunningFunctionTool",
    "PreloadMemoryTool",
    "ToolArgumentsError",
    "ToolContext",
    "ToolInvocation",
    "ToolKind",
    "ToolMiddleware",
    "ToolOptions",
    "approval_response",
    "args_sha256",
    "load_memory",
    "preload_memory",
    "tool",
)
