# Mirrors google/adk-python contributing/samples/hello_world_ma/agent.py (Apache-2.0):
# the same ADK names and calling conventions (sub-agents without a model of their
# own, global_instruction, an ExampleTool of Examples), written for these tests.
# Only the import block is headwater's (ADK: `from google.adk.agents import Agent`,
# `from google.adk.examples.example import Example`, `from google.adk.tools.example_tool
# import ExampleTool`, `from google.genai import types`).
import random

from headwater import types
from headwater.agents import Agent
from headwater.tools.example_tool import Example, ExampleTool


def roll_die(sides: int) -> int:
    """Roll a die and return the result."""
    return random.randint(1, sides)


def check_prime(nums: list[int]) -> str:
    """Say which of the numbers are prime."""
    primes = [n for n in nums if n > 1 and all(n % d for d in range(2, int(n**0.5) + 1))]
    return f"{', '.join(map(str, primes))} are prime numbers." if primes else "No primes."


roll_agent = Agent(
    name="roll_agent",
    description="Handles rolling dice of different sizes.",
    instruction="Roll dice with roll_die.",
    tools=[roll_die],
)

example_tool = ExampleTool(
    examples=[
        Example(
            input=types.UserContent(parts=[types.Part(text="Roll a 6-sided die.")]),
            output=[types.ModelContent(parts=[types.Part(text="I rolled a 4 for you.")])],
        ),
        Example(
            input=types.UserContent(parts=[types.Part(text="Is 7 a prime number?")]),
            output=[types.ModelContent(parts=[types.Part(text="Yes, 7 is a prime number.")])],
        ),
    ]
)

prime_agent = Agent(
    name="prime_agent",
    description="Handles checking if numbers are prime.",
    instruction="Check primes with check_prime.",
    tools=[check_prime],
)

root_agent = Agent(
    model="gemini-1.5-flash",
    name="root_agent",
    instruction="Delegate rolls to roll_agent and prime checks to prime_agent.",
    global_instruction="You are DicePrimeBot, ready to roll dice and check prime numbers.",
    sub_agents=[roll_agent, prime_agent],
    tools=[example_tool],
    generate_content_config=types.GenerateContentConfig(temperature=0.2),
)
