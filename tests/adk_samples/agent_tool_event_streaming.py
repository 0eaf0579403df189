# Mirrors google/adk-python contributing/samples/agent_tool_event_streaming/agent.py
# (Apache-2.0): a coordinator calling a research agent through
# AgentTool(agent=..., skip_summarization=True), whose events reach the runner's
# stream as they happen, written for these tests. Only the import block is
# headwater's (ADK: `from google.adk import Agent`, `from google.adk.tools import AgentTool`).
from headwater import Agent
from headwater import AgentTool

research_agent = Agent(
    name="research_agent",
    model="gemini-2.5-flash-lite",
    description="A research agent that performs multi-step research tasks",
    instruction="Report each step of your research, then a summary.",
)

coordinator_agent = Agent(
    name="coordinator_agent",
    model="gemini-2.5-flash-lite",
    description="A coordinator that delegates research tasks",
    instruction="Delegate research questions to the research_agent tool.",
    tools=[AgentTool(agent=research_agent, skip_summarization=True)],
)

root_agent = coordinator_agent
