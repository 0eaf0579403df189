"""Content types shared by every layer: content, parts, function calls, usage.

Re-exported from :mod:`headwater.core.types`, where the code lives.
"""

from .core.types import (
    Blob,
    Content,
    FunctionCall,
    FunctionResponse,
    ModelContent,
    Part,
    PartLike,
    Role,
    ToolDeclaration,
    Usage,
    UserContent,
    as_content,
)

__all__ = (
    "Blob",
    "Content",
    "FunctionCall",
    "FunctionResponse",
    "ModelContent",
    "Part",
    "PartLike",
    "Role",
    "ToolDeclaration",
    "Usage",
    "UserContent",
    "as_content",
)
