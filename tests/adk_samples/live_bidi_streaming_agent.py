# Mirrors google/adk-python contributing/samples/live_bidi_streaming_agent/agent.py
# (Apache-2.0): the hello-world dice agent on a live model, written for these tests.
# Only the import block is headwater's (ADK: `from google.adk import Agent`,
# `from google.adk.tools.tool_context import ToolContext`, `from google.genai import types`).
import random

from headwater import Agent
from headwater import types
from headwater.tools.context import ToolContext


def roll_die(sides: int, tool_context: ToolContext) -> int:
    """Roll a die and return the result.

    Args:
        sides: how many sides the die has.
    """
    result = random.randint(1, sides)
    tool_context.state["rolls"] = tool_context.state.get("rolls", []) + [result]
    return result


async def check_prime(nums: list[int]) -> str:
    """Say which of the numbers are prime."""
    primes = [n for n in nums if n > 1 and all(n % d for d in range(2, int(n**0.5) + 1))]
    return f"{', '.join(map(str, primes))} are prime numbers." if primes else "No primes."


root_agent = Agent(
    model="gemini-2.0-flash-live-001",
    name="hello_world_agent",
    description="Rolls dice and checks prime numbers, live.",
    instruction="Roll dice with roll_die and check primes with check_prime.",
    tools=[roll_die, check_prime],
    generate_content_config=types.GenerateContentConfig(temperature=0.0),
)
