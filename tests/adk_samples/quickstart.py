# Mirrors google/adk-python contributing/samples/quickstart/agent.py (Apache-2.0):
# the same ADK names and calling conventions, written for these tests. Only the
# import block is headwater's (ADK: `from google.adk.agents import Agent`).
import datetime
from zoneinfo import ZoneInfo

from headwater.agents import Agent


def get_weather(city: str) -> dict:
    """Return the weather report of a city.

    Args:
        city: the city's name.
    """
    if city.lower() != "new york":
        return {"status": "error", "error_message": f"No weather for '{city}'."}
    return {"status": "success", "report": "Sunny, 25 degrees Celsius in New York."}


def get_current_time(city: str) -> dict:
    """Return the current time in a city.

    Args:
        city: the city's name.
    """
    if city.lower() != "new york":
        return {"status": "error", "error_message": f"No time zone for {city}."}
    now = datetime.datetime.now(ZoneInfo("America/New_York"))
    return {"status": "success", "report": f"It is {now:%H:%M} in {city}."}


root_agent = Agent(
    name="weather_time_agent",
    model="gemini-2.0-flash",
    description="Answers questions about the time and weather in a city.",
    instruction="Answer questions about the time and weather in a city.",
    tools=[get_weather, get_current_time],
)
