"""``LlmRequest``: what one model call is asked (docs/architecture.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..core.genai import GenerateContentConfig
from ..core.types import Content, ToolDeclaration


@dataclass(slots=True)
class LlmRequest:
    """Everything one model call needs, built from persisted history.

    Attributes:
        model: the model name the adapter should ask for.
        system_instruction: the agent's instruction, if any.
        contents: the conversation, oldest first; never holds a partial.
        tools: declarations of the tools the model may call.
        config: provider generation settings (temperature, max tokens, …), as the
            provider's request names them; sent as they are, over what
            ``generate_content_config`` maps to.
        generate_content_config: generation settings under genai's names
            (``Agent(generate_content_config=...)``, a planner's thinking); each
            adapter maps them onto its provider's fields
            (``headwater.models.generation``).
    """

    model: str = ""
    system_instruction: str | None = None
    contents: list[Content] = field(default_factory=list)
    tools: list[ToolDeclaration] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)  # raw provider options
    generate_content_config: GenerateContentConfig | None = None

    def append_instructions(self, instructions: list[str]) -> None:
        """Add ``instructions`` to the system instruction, each after a blank line (ADK's
        ``LlmRequest.append_instructions``)."""
        joined = "\n\n".join(instructions)
        if not joined:
            return
        self.system_instruction = (f"{self.system_instruction}\n\n{joined}"
                                   if self.system_instruction else joined)
