"""The agent a deployment test serves as ``headwater serve deployed_agent:agent``.

Not a test module: test_deployment.py and test_serve_flags.py start real
``headwater serve`` processes on it (their working directory is this folder),
so the gateway, its store, its auth and its run log come from the command's
flags and ``HEADWATER_*`` environment, as in a deployment. The model speaks the
OpenAI wire format to the test's ``FakeProvider`` at ``HW_TEST_PROVIDER_URL``.
"""

from __future__ import annotations

import asyncio
import os

from headwater import Agent
from headwater.models.openai import OpenAIChatModel

PROVIDER = os.environ.get("HW_TEST_PROVIDER_URL", "http://127.0.0.1:9")


async def hold(seconds: float) -> str:
    """Wait a while (a tool call that is still going when its process dies).

    Args:
        seconds: how long.
    """
    await asyncio.sleep(seconds)
    return f"held {seconds} s"


def where() -> str:
    """The pid of the process that runs this call."""
    return str(os.getpid())


agent = Agent(name="bot", tools=[hold, where],
              model=OpenAIChatModel(model="gpt-4o-mini", base_url=f"{PROVIDER}/v1",
                                    api_key="x"))
