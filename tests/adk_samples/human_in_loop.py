# Mirrors google/adk-python contributing/samples/human_in_loop/agent.py (Apache-2.0):
# the same ADK names and calling conventions (a LongRunningFunctionTool whose first
# result is "pending", answered later by the user's FunctionResponse), written for
# these tests. Only the import block is headwater's (ADK: `from google.adk import
# Agent`, `from google.adk.tools import ToolContext`, `from google.adk.tools.long_running_tool
# import LongRunningFunctionTool`, `from google.genai import types`).
from typing import Any

from headwater import Agent
from headwater import types
from headwater.tools import LongRunningFunctionTool, ToolContext


def reimburse(purpose: str, amount: float) -> dict[str, Any]:
    """Reimburse the amount of money to the employee."""
    return {"status": "ok"}


def ask_for_approval(purpose: str, amount: float, tool_context: ToolContext) -> dict[str, Any]:
    """Ask the manager to approve the reimbursement."""
    return {"status": "pending", "amount": amount, "ticketId": "reimbursement-ticket-001"}


root_agent = Agent(
    model="gemini-1.5-flash",
    name="reimbursement_agent",
    instruction="Reimburse under $100 at once; ask for approval above.",
    tools=[reimburse, LongRunningFunctionTool(func=ask_for_approval)],
    generate_content_config=types.GenerateContentConfig(temperature=0.1),
)
