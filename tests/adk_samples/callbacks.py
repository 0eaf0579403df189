# Mirrors google/adk-python contributing/samples/callbacks/agent.py (Apache-2.0):
# the same ADK names and calling conventions (every callback kind, lists of
# callbacks, an after-agent callback that answers, an after-tool callback whose
# value replaces the result), written for these tests. Only the import block is
# headwater's (ADK: `from google.adk import Agent`, `from google.adk.tools.tool_context
# import ToolContext`, `from google.genai import types`).
import random

from headwater import Agent
from headwater import types
from headwater.tools.context import ToolContext

calls: list[str] = []
"""What ran, in order (the sample prints it)."""


def roll_die(sides: int, tool_context: ToolContext) -> int:
    """Roll a die and return the result.

    Args:
        sides: how many sides the die has.
    """
    result = random.randint(1, sides)
    tool_context.state["rolls"] = tool_context.state.get("rolls", []) + [result]
    return result


async def before_model_callback(callback_context, llm_request):
    calls.append("before_model")


async def after_model_callback(callback_context, llm_response):
    calls.append("after_model")


def before_agent_cb1(callback_context):
    calls.append("before_agent_cb1")


def before_agent_cb2(callback_context):
    calls.append("before_agent_cb2")


def after_agent_cb1(callback_context):
    calls.append("after_agent_cb1")


def after_agent_cb2(callback_context):
    calls.append("after_agent_cb2")
    # A ModelContent (role "model"): an event the next turns' requests keep.
    return types.ModelContent(parts=[types.Part(text="(stopped) after_agent_cb2")])


def after_agent_cb3(callback_context):
    calls.append("after_agent_cb3")


def before_tool_cb1(tool, args, tool_context):
    calls.append("before_tool_cb1")


def before_tool_cb2(tool, args, tool_context):
    calls.append("before_tool_cb2")


def after_tool_cb1(tool, args, tool_context, tool_response):
    calls.append("after_tool_cb1")


def after_tool_cb2(tool, args, tool_context, tool_response):
    calls.append("after_tool_cb2")
    return {"test": "after_tool_cb2", "response": tool_response}


def after_tool_cb3(tool, args, tool_context, tool_response):
    calls.append("after_tool_cb3")


root_agent = Agent(
    model="gemini-2.0-flash",
    name="data_processing_agent",
    description="Rolls dice.",
    instruction="Roll dice with roll_die.",
    tools=[roll_die],
    generate_content_config=types.GenerateContentConfig(temperature=0.1),
    before_agent_callback=[before_agent_cb1, before_agent_cb2],
    after_agent_callback=[after_agent_cb1, after_agent_cb2, after_agent_cb3],
    before_model_callback=before_model_callback,
    after_model_callback=after_model_callback,
    before_tool_callback=[before_tool_cb1, before_tool_cb2],
    after_tool_callback=[after_tool_cb1, after_tool_cb2, after_tool_cb3],
)
