"""Content types shared by every layer: content, parts, function calls, usage.

Re-exported from :mod:`headwater.core.types`, where the code lives, with the generation
settings of :mod:`headwater.core.genai` (``from headwater import types`` replaces
``from google.genai import types``).
"""

from .core.genai import (
    GenerateContentConfig,
    HarmBlockMethod,
    HarmBlockThreshold,
    HarmCategory,
    SafetySetting,
    ThinkingConfig,
    ThinkingLevel,
)
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
    "GenerateContentConfig",
    "HarmBlockMethod",
    "HarmBlockThreshold",
    "HarmCategory",
    "ModelContent",
    "Part",
    "PartLike",
    "Role",
    "SafetySetting",
    "ThinkingConfig",
    "ThinkingLevel",
    "ToolDeclaration",
    "Usage",
    "UserContent",
    "as_content",
)
