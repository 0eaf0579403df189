"""The agents ``headwater demo`` serves, and what its page offers for them.

Each agent has one home in :mod:`headwater.examples` (support, docs search,
deploy, price watcher, people counter); this module only lists them, pairs the
demo model's prompts with the agent that answers each, and hands the page the
people counter's bundled frames.
"""

from __future__ import annotations

from typing import Any

from ..agents.agent import Agent
from ..examples import deploy, docs_search, people_counter, price_watcher, support
from ..models.base import BaseLlm
from ..models.demo import PROMPTS

PROMPT_AGENTS = {"Where is order 1042?": "support", "Search the docs for streaming": "docs",
                 "Deploy version 2 to staging": "deploy", "Watch GOOG": "market",
                 "Count the people": "people", "Tell me a long story": "support"}
"""The agent that answers each of the demo model's prompts."""

LIVE_PROMPTS = frozenset({"Watch GOOG", "Count the people"})
"""Prompts the page sends over the live WebSocket (their tools are live streams)."""


def demo_agents(model: str | BaseLlm) -> list[Agent]:
    """The five demo agents on ``model`` (support first: the default one)."""
    return [support.build_agent(model), docs_search.build_agent(model),
            deploy.build_agent(model), price_watcher.build_agent(model),
            people_counter.build_agent(model)]


def page_suggestions() -> list[dict[str, Any]]:  # the page's suggestion JSON
    """The demo model's prompts as page suggestions, each to its agent."""
    return [{"text": prompt, "agent": PROMPT_AGENTS.get(prompt), "live": prompt in LIVE_PROMPTS}
            for prompt in PROMPTS]


def page_frames() -> dict[str, Any]:  # the page's sample-frames hook
    """The people counter's bundled sequence, for the page's "Play sample frames"."""
    return {"fps": people_counter.FPS,
            "frames": [(blob.mime_type, blob.data) for blob in people_counter.scene_frames()]}
