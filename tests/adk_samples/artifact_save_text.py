# Mirrors google/adk-python contributing/samples/artifact_save_text/agent.py
# (Apache-2.0): a tool that saves the user's query as a text/plain artifact with
# `await tool_context.save_artifact(...)` and returns nothing, written for these tests.
# Only the import block is headwater's (ADK: `from google.adk import Agent`,
# `from google.adk.tools.tool_context import ToolContext`, `from google.genai import types`).
from headwater import Agent
from headwater import types
from headwater.tools.context import ToolContext


async def log_query(tool_context: ToolContext, query: str):
    """Save the query as a 'text/plain' artifact named 'query'."""
    part = types.Part(inline_data=types.Blob(mime_type="text/plain",
                                             data=query.encode("utf-8")))
    await tool_context.save_artifact("query", part)


root_agent = Agent(
    model="gemini-2.0-flash",
    name="log_agent",
    description="Log user query.",
    instruction='Always log the user query and reply "kk, I\'ve logged."',
    tools=[log_query],
)
