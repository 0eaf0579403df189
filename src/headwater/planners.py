"""Planners, as ADK has them: ``Agent(planner=...)`` shapes each model call of the agent.

A planner may change the request before it leaves (a thinking setting, a planning
instruction) and the aggregate before it is recorded (which parts are thoughts).
:class:`BuiltInPlanner` turns on the model's own thinking; :class:`PlanReActPlanner`
asks any model to plan in tagged text and marks the planning as thoughts.

The flow calls :func:`plan_request` on every request of an agent with a planner,
then :func:`plan_response` on every aggregate, before the after-model callbacks.
Partial events of the call stream as the model writes (a PlanReAct agent's
partials carry the tags); the aggregate, the event recorded, has the planner's parts.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from dataclasses import replace

from .core.context import CallbackContext
from .core.genai import GenerateContentConfig, ThinkingConfig
from .core.types import Content, Part
from .models.llm_request import LlmRequest
from .models.llm_response import LlmResponse

logger = logging.getLogger(__name__)

PLANNING_TAG = "/*PLANNING*/"
REPLANNING_TAG = "/*REPLANNING*/"
REASONING_TAG = "/*REASONING*/"
ACTION_TAG = "/*ACTION*/"
FINAL_ANSWER_TAG = "/*FINAL_ANSWER*/"
_THOUGHT_TAGS = (PLANNING_TAG, REASONING_TAG, ACTION_TAG, REPLANNING_TAG)


class BasePlanner(ABC):
    """A planner (ADK's ``BasePlanner``): subclass it for a planner of your own."""

    @abstractmethod
    def build_planning_instruction(self, readonly_context: CallbackContext,
                                   llm_request: LlmRequest) -> str | None:
        """Text appended to the request's system instruction, or ``None`` for none.

        Args:
            readonly_context: the run as callbacks see it.
            llm_request: the request about to leave; read it, do not change it.
        """

    @abstractmethod
    def process_planning_response(self, callback_context: CallbackContext,
                                  response_parts: list[Part]) -> list[Part] | None:
        """The aggregate's parts as they are to be recorded, or ``None`` to keep them.

        Args:
            callback_context: the run as callbacks see it (state writes are kept
                with the model's event).
            response_parts: the aggregate's parts; do not change them in place.
        """


class BuiltInPlanner(BasePlanner):
    """Use the model's own thinking (ADK's ``BuiltInPlanner``).

    Args:
        thinking_config: set as the request's ``generate_content_config.thinking_config``
            (over the agent's own); each adapter maps it to its provider's reasoning
            setting (docs/models.md "Generation config").
    """

    def __init__(self, *, thinking_config: ThinkingConfig) -> None:
        self.thinking_config = thinking_config

    def apply_thinking_config(self, llm_request: LlmRequest) -> None:
        """Set :attr:`thinking_config` on ``llm_request`` (a copy of its config: the
        agent's stays as it is)."""
        config = llm_request.generate_content_config or GenerateContentConfig()
        llm_request.generate_content_config = config.model_copy(
            update={"thinking_config": self.thinking_config})

    def build_planning_instruction(self, readonly_context: CallbackContext,
                                   llm_request: LlmRequest) -> str | None:
        return None

    def process_planning_response(self, callback_context: CallbackContext,
                                  response_parts: list[Part]) -> list[Part] | None:
        return None


class PlanReActPlanner(BasePlanner):
    """Plan, act, reason, answer, in tagged text (ADK's ``PlanReActPlanner``).

    Any model will do: no thinking setting is needed. The instruction asks for a
    plan under ``/*PLANNING*/``, tool use and reasoning under ``/*ACTION*/`` and
    ``/*REASONING*/``, and the answer under ``/*FINAL_ANSWER*/``. In the
    aggregate, a text part opening with a planning, reasoning, action or
    replanning tag becomes a thought, and a text with the final-answer tag is
    split after its last one: the text before (tag included) a thought, the rest
    the answer. The parts after the first group of function calls are dropped, as
    in ADK (which keeps the group only when text comes before it; here always).
    """

    def build_planning_instruction(self, readonly_context: CallbackContext,
                                   llm_request: LlmRequest) -> str:
        return PLANNING_INSTRUCTION

    def process_planning_response(self, callback_context: CallbackContext,
                                  response_parts: list[Part]) -> list[Part] | None:
        if not response_parts:
            return None
        kept: list[Part] = []
        for n, part in enumerate(response_parts):
            call = part.function_call
            if call is None:
                kept.extend(_split(part))
            elif call.name:  # a call without a name is dropped, as in ADK
                following = response_parts[n:]
                stop = next((i for i, p in enumerate(following) if p.function_call is None),
                            len(following))
                return kept + following[:stop]
        return kept


def _split(part: Part) -> list[Part]:
    text = part.text
    if not text or part.thought:
        return [part]
    if FINAL_ANSWER_TAG in text:
        cut = text.rfind(FINAL_ANSWER_TAG) + len(FINAL_ANSWER_TAG)
        reasoning, answer = text[:cut], text[cut:]
        return ([Part(text=reasoning, thought=True)]
                + ([Part(text=answer)] if answer else []))
    if text.startswith(_THOUGHT_TAGS):
        return [replace(part, thought=True)]
    return [part]


def plan_request(planner: BasePlanner, context: CallbackContext, request: LlmRequest) -> None:
    """Let ``planner`` shape ``request`` (changed in place; the agent's config is copied).

    A :class:`BuiltInPlanner` sets its thinking; a planning instruction is appended
    to the system instruction (after a blank line). For an instruction-based
    planner, thoughts it marked in the history (thought text without a provider's
    signature) go back to the model as plain text, so it sees its own plan: ADK
    unmarks every thought; here a provider's signed thinking stays a thought, since
    Anthropic needs it back as it was.
    """
    if isinstance(planner, BuiltInPlanner):
        planner.apply_thinking_config(request)
    instruction = planner.build_planning_instruction(context, request)
    if not instruction:
        return
    base = request.system_instruction
    request.system_instruction = f"{base}\n\n{instruction}" if base else instruction
    request.contents = [_unmarked(content) for content in request.contents]


def _unmarked(content: Content) -> Content:
    if not any(p.thought and p.thought_signature is None for p in content.parts):
        return content
    return Content(content.role, [replace(p, thought=False)
                                  if p.thought and p.thought_signature is None else p
                                  for p in content.parts])


def plan_response(planner: BasePlanner, context: CallbackContext,
                  response: LlmResponse) -> LlmResponse:
    """``response`` with the parts ``planner`` makes of its content (a new response
    when they change; ``response`` is not changed)."""
    content = response.content
    if content is None or not content.parts:
        return response
    parts = planner.process_planning_response(context, list(content.parts))
    if not parts:
        return response
    return replace(response, content=Content(content.role, parts))


PLANNING_INSTRUCTION = f"""\
Answer with the help of the tools you are given rather than from memory, in this order:

1. Plan. Under {PLANNING_TAG}, write a numbered plan that answers the whole request using \
only the tools you have; each step names the tool or tools it uses.
2. Act and reason. Call the tools the plan names. Under {ACTION_TAG}, say what you are \
doing; under {REASONING_TAG}, between calls, sum up what the results show so far and \
what comes next. If the plan cannot be carried out, write a new one under \
{REPLANNING_TAG} and follow it.
3. Answer. Under {FINAL_ANSWER_TAG}, give one precise answer in the form asked for. If \
the request cannot be answered with the tools and what you know from the conversation, \
say why and ask for what you need.

Ask for clarification when you need more information, and prefer what the conversation \
already holds to calling a tool again.
"""
"""The instruction a :class:`PlanReActPlanner` appends: ADK's tag protocol (the tags are
ADK's), in headwater's words, for tools called by function calling."""
