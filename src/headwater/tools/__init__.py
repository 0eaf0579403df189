"""Tools a model can call (DESIGN.md §4)."""

from .context import ToolContext as ToolContext
from .function_tool import BaseTool as BaseTool
from .function_tool import FunctionTool as FunctionTool
from .function_tool import ToolArgumentsError as ToolArgumentsError
from .function_tool import tool as tool

__all__ = ("BaseTool", "FunctionTool", "ToolArgumentsError", "ToolContext", "tool")
