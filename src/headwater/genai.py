"""Generation settings under the names of ``google.genai.types`` (ADK's types), without genai.

Re-exported from :mod:`headwater.core.genai`, where the code lives.
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

__all__ = (
    "GenerateContentConfig",
    "HarmBlockMethod",
    "HarmBlockThreshold",
    "HarmCategory",
    "SafetySetting",
    "ThinkingConfig",
    "ThinkingLevel",
)
