"""The agents ``headwater demo`` serves, and what its page offers for them.

Each agent has one home in :mod:`headwater.examples` (support, docs search,
deploy, release — which calls a deployer agent as a tool —, price watcher, people
counter, and the indexer, whose tools come from an MCP server). The demo's
default agent is a coordinator with all of them as sub-agents: it transfers each
request to the one that can answer it. The live
agents (price watcher, people counter) are also served as entries of their own:
their tools are live streams, so the page opens
a live session with such an agent when the coordinator transfers to it (docs/
frame-protocol.md, the page). This module lists them, pairs the demo model's
prompts with the agent that answers each, and hands the page the people
counter's bundled frames.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from ..agents.agent import Agent
from ..examples import deploy, docs_search, people_counter, price_watcher, support
from ..models.base import BaseLlm
from ..models.demo import PROMPTS

COORDINATOR = "coordinator"
INSTRUCTION = ("You are the front desk of the demo. Transfer each request to the agent whose "
               "description fits it, with transfer_to_agent; answer anything else yourself.")

PROMPT_AGENTS = {"Where is order 1042?": "support", "Search the docs for streaming": "docs",
                 "Deploy version 2 to staging": "deploy",
                 "Release version 3 to staging": "release", "Watch GOOG": "market",
                 "Count the people": "people", "Index the docs": "indexer",
                 "Tell me a long story": COORDINATOR}
"""The agent that answers each of the demo model's prompts (through the coordinator)."""

LIVE_PROMPTS = frozenset({"Watch GOOG", "Count the people"})
"""Prompts the page sends over the live WebSocket (their tools are live streams)."""


def build_coordinator(model: str | BaseLlm) -> Agent:
    """The demo's default agent: a coordinator over the example agents (the indexer, whose
    tools come from an MCP server, when the MCP SDK is installed: ``headwater[mcp]``)."""
    subs = [support.build_agent(model), docs_search.build_agent(model),
            deploy.build_agent(model), deploy.build_release_agent(model),
            price_watcher.build_agent(model), people_counter.build_agent(model)]
    if has_mcp():
        from ..examples import indexer

        subs.append(indexer.build_agent(model))
    return Agent(name=COORDINATOR, model=model, instruction=INSTRUCTION,
                 description="The demo's front desk: routes each request.", sub_agents=subs)


def demo_agents(model: str | BaseLlm) -> list[Agent]:
    """The demo's served agents on ``model``: the coordinator (the default), then the two
    live agents as entries of their own (a live session with one of them)."""
    return [build_coordinator(model), price_watcher.build_agent(model),
            people_counter.build_agent(model)]


def page_suggestions() -> list[dict[str, Any]]:  # the page's suggestion JSON
    """The demo model's prompts as page suggestions: a live prompt to its live agent, the
    others to the coordinator, which transfers them."""
    return [{"text": prompt,
             "agent": PROMPT_AGENTS[prompt] if prompt in LIVE_PROMPTS else COORDINATOR,
             "live": prompt in LIVE_PROMPTS} for prompt in PROMPTS
            if PROMPT_AGENTS[prompt] != "indexer" or has_mcp()]


def has_mcp() -> bool:
    """Whether the MCP SDK is installed (``headwater[mcp]``): the indexer needs it."""
    return importlib.util.find_spec("mcp") is not None


def page_frames() -> dict[str, Any]:  # the page's sample-frames hook
    """The people counter's bundled sequence, for the page's "Play sample frames"."""
    return {"fps": people_counter.FPS,
            "frames": [(blob.mime_type, blob.data) for blob in people_counter.scene_frames()]}
