# Mirrors google/adk-python contributing/samples/session_state_agent/agent.py
# (Apache-2.0): the same ADK names and calling conventions (state written from every
# callback kind, the session read off ``callback_context._invocation_context`` and its
# ``session_service``), written for these tests. Only the import block is
# headwater's (ADK: `from google.adk.agents.callback_context import CallbackContext`,
# `from google.adk.agents.llm_agent import Agent`, `from google.adk.models.llm_request
# import LlmRequest`, `from google.adk.models.llm_response import LlmResponse`,
# `from google.genai import types`).
from typing import Optional

from headwater import types
from headwater.agents.agent import Agent
from headwater.context import CallbackContext
from headwater.models.llm_request import LlmRequest
from headwater.models.llm_response import LlmResponse

checked: list[str] = []
"""The callbacks whose checks passed, in order."""


async def check_session(ctx: CallbackContext, where: str, *, cached: list[str],
                        stored: list[str], not_stored: list[str]) -> None:
    """The keys the context's session has, and those the store has (and has not) yet."""
    session = ctx._invocation_context.session
    in_store = await ctx._invocation_context.session_service.get_session(
        app_name=session.app_name, user_id=session.user_id, session_id=session.id)
    assert in_store is not None
    for key in cached:
        assert key in session.state, (where, key)
    for key in stored:
        assert key in in_store.state, (where, key)
    for key in not_stored:
        assert key not in in_store.state, (where, key)
    checked.append(where)


async def before_agent_callback(callback_context: CallbackContext) -> Optional[types.Content]:
    if "before_agent" in callback_context.state:
        return types.ModelContent("Sorry, I can only reply once.")
    callback_context.state["before_agent"] = 1
    await check_session(callback_context, "before_agent", cached=["before_agent"], stored=[],
                        not_stored=["before_agent"])
    return None


async def before_model_callback(callback_context: CallbackContext, llm_request: LlmRequest):
    callback_context.state["before_model"] = 1
    await check_session(callback_context, "before_model",
                        cached=["before_agent", "before_model"], stored=["before_agent"],
                        not_stored=["before_model"])


async def after_model_callback(callback_context: CallbackContext, llm_response: LlmResponse):
    callback_context.state["after_model"] = 1
    await check_session(callback_context, "after_model",
                        cached=["before_agent", "before_model", "after_model"],
                        stored=["before_agent"], not_stored=["before_model", "after_model"])


async def after_agent_callback(callback_context: CallbackContext):
    callback_context.state["after_agent"] = 1
    await check_session(callback_context, "after_agent",
                        cached=["before_agent", "before_model", "after_model", "after_agent"],
                        stored=["before_agent", "before_model", "after_model"],
                        not_stored=["after_agent"])


root_agent = Agent(
    name="root_agent",
    description="a verification agent.",
    instruction="Remind the user you answer once only.",
    model="gemini-2.0-flash-001",
    before_agent_callback=before_agent_callback,
    before_model_callback=before_model_callback,
    after_model_callback=after_model_callback,
    after_agent_callback=after_agent_callback,
)
