# Mirrors google/adk-python contributing/samples/non_llm_sequential/agent.py
# (Apache-2.0): two Agents in a SequentialAgent, written for these tests. Only the
# import block is headwater's (ADK: `from google.adk.agents import Agent`,
# `from google.adk.agents import SequentialAgent`).
from headwater.agents import Agent
from headwater.agents import SequentialAgent

sub_agent_1 = Agent(name="sub_agent_1", description="No.1 sub agent.",
                    model="gemini-2.0-flash-001", instruction="JUST SAY 1.")
sub_agent_2 = Agent(name="sub_agent_2", description="No.2 sub agent.",
                    model="gemini-2.0-flash-001", instruction="JUST SAY 2.")
sequential_agent = SequentialAgent(name="sequential_agent",
                                   sub_agents=[sub_agent_1, sub_agent_2])

root_agent = sequential_agent
