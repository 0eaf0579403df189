# Mirrors google/adk-python contributing/samples/simple_sequential_agent/agent.py
# (Apache-2.0): the same ADK names (LlmAgent in a SequentialAgent), written for these
# tests. Only the import block is headwater's (ADK: `from google.adk.agents.llm_agent
# import LlmAgent`, `from google.adk.agents.sequential_agent import SequentialAgent`,
# `from google.genai import types`).
import random

from headwater import types
from headwater.agents.agent import LlmAgent
from headwater.agents.workflow import SequentialAgent


def roll_die(sides: int) -> int:
    """Roll a die and return the result."""
    return random.randint(1, sides)


def check_prime(nums: list[int]) -> str:
    """Say which of the numbers are prime."""
    primes = [n for n in nums if n > 1 and all(n % d for d in range(2, int(n**0.5) + 1))]
    return f"{', '.join(map(str, primes))} are prime numbers." if primes else "No primes."


roll_agent = LlmAgent(
    name="roll_agent",
    description="Handles rolling dice of different sizes.",
    model="gemini-2.0-flash",
    instruction="Roll dice with roll_die.",
    tools=[roll_die],
    generate_content_config=types.GenerateContentConfig(temperature=0.0),
)

prime_agent = LlmAgent(
    name="prime_agent",
    description="Handles checking if numbers are prime.",
    model="gemini-2.0-flash",
    instruction="Check primes with check_prime.",
    tools=[check_prime],
)

root_agent = SequentialAgent(name="simple_sequential_agent", sub_agents=[roll_agent, prime_agent])
