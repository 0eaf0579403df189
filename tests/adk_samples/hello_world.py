# Mirrors google/adk-python contributing/samples/hello_world/agent.py (Apache-2.0):
# the same ADK names and calling conventions, written for these tests. Only the
# import block is headwater's (ADK: `from google.adk import Agent`,
# `from google.adk.planners import BuiltInPlanner, PlanReActPlanner`,
# `from google.adk.tools.tool_context import ToolContext`, `from google.genai import types`).
import random

from headwater import Agent
from headwater import types
from headwater.planners import BuiltInPlanner  # noqa: F401 - imported as the sample does
from headwater.planners import PlanReActPlanner  # noqa: F401
from headwater.tools.context import ToolContext


def roll_die(sides: int, tool_context: ToolContext) -> int:
    """Roll a die and return the result.

    Args:
        sides: how many sides the die has.
    """
    result = random.randint(1, sides)
    if "rolls" not in tool_context.state:
        tool_context.state["rolls"] = []
    tool_context.state["rolls"] = tool_context.state["rolls"] + [result]
    return result


async def check_prime(nums: list[int]) -> str:
    """Say which of the numbers are prime.

    Args:
        nums: the numbers to check.
    """
    primes = {n for n in map(int, nums)
              if n > 1 and all(n % d for d in range(2, int(n**0.5) + 1))}
    if not primes:
        return "No prime numbers found."
    return f"{', '.join(str(n) for n in sorted(primes))} are prime numbers."


root_agent = Agent(
    model="gemini-2.0-flash",
    name="hello_world_agent",
    description="Rolls dice and checks prime numbers.",
    instruction="Roll dice with roll_die and check primes with check_prime.",
    tools=[roll_die, check_prime],
    generate_content_config=types.GenerateContentConfig(
        safety_settings=[
            types.SafetySetting(
                category=types.HarmCategory.HARM_CATEGORY_DANGEROUS_CONTENT,
                threshold=types.HarmBlockThreshold.OFF,
            ),
        ]
    ),
)
