"""The agents ``headwater demo`` serves: support, docs search, deploy and a price watcher.

Each tool is offline and deterministic; its pauses scale with
``Settings.demo_word_delay`` (ten words' time per step), so tests that set the
delay to 0 run them at once.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from typing import Any

from ..agents.agent import Agent
from ..events import ToolStreamEvent
from ..models.base import BaseLlm
from ..settings import get_settings
from ..tools.context import ToolContext
from ..tools.function_tool import tool

ORDERS = {
    "1042": {"status": "shipped", "shipped_on": "30 September", "due": "Monday"},
    "2001": {"status": "packing", "due": "Thursday"},
}
DOCS = (
    ("Streaming events", "docs/event-contract.md"),
    ("Streaming over HTTP: the frame protocol", "docs/frame-protocol.md"),
    ("Live streaming tools", "docs/architecture.md"),
    ("Approval gates", "docs/architecture.md"),
    ("Session stores", "docs/architecture.md"),
)
WATCH_POLLS = 30
"""A demo price watch ends on its own after this many polls."""


def _pause() -> float:
    return get_settings().demo_word_delay * 10


def lookup_order(order_id: str) -> dict[str, str]:
    """Look up an order in the shop's records.

    Args:
        order_id: the order number, digits only.
    """
    order = ORDERS.get(order_id)
    if order is None:
        raise LookupError(f"no order {order_id}")
    return {"order_id": order_id, **order}


@tool(streaming=True)
async def search_docs(query: str,
                      tool_context: ToolContext) -> AsyncIterator[ToolStreamEvent]:
    """Search the documentation; reports its progress as it goes.

    Args:
        query: words to look for.
    """
    words = query.lower().split()
    hits: list[dict[str, str]] = []
    for index, (title, path) in enumerate(DOCS, start=1):
        await tool_context.clock.sleep(_pause())
        if any(word in title.lower() for word in words):
            hits.append({"title": title, "path": path})
        yield ToolStreamEvent(type="part_delta", index=0,
                              delta=f"{index}/{len(DOCS)} searched {path}")
    yield ToolStreamEvent(type="done", response={"query": query, "results": hits})


@tool(streaming=True, requires_approval=True)
async def deploy(version: str, environment: str,
                 tool_context: ToolContext) -> AsyncIterator[ToolStreamEvent]:
    """Deploy a version of the app; a human approves first, then progress is reported.

    Args:
        version: the version to deploy.
        environment: staging or production.
    """
    steps = ("build", "upload", "migrate", "switch traffic", "verify")
    for index, step in enumerate(steps, start=1):
        await tool_context.clock.sleep(_pause())
        yield ToolStreamEvent(type="part_delta", index=0,
                              delta=f"{index}/{len(steps)} {step}")
    yield ToolStreamEvent(type="done", response={"version": version, "environment": environment,
                                                 "status": "live"})


@tool(max_lifetime=600)
async def watch_price(symbol: str, min_move_pct: float,
                      tool_context: ToolContext) -> AsyncIterator[dict[str, Any]]:
    """Watch a stock and report price moves of at least ``min_move_pct`` percent.

    Args:
        symbol: ticker, e.g. GOOG.
        min_move_pct: report moves at least this large, in percent.
    """
    rng = random.Random(symbol)
    price = 100 + rng.random() * 100
    last: float | None = None
    for _ in range(WATCH_POLLS):
        if last is None or abs(price - last) / last * 100 >= min_move_pct:
            last = price
            yield {"symbol": symbol, "price": round(price, 2)}
        await tool_context.clock.sleep(max(_pause(), 0.01) * 3)
        price *= 1 + rng.gauss(0, 0.01)


def demo_agents(model: str | BaseLlm) -> list[Agent]:
    """The four demo agents on ``model`` (support first: the default one)."""
    return [
        Agent(name="support", model=model, tools=[lookup_order],
              instruction="You are a shop's support agent. Look orders up with lookup_order."),
        Agent(name="docs", model=model, tools=[search_docs],
              instruction="Answer questions about headwater; search the docs first."),
        Agent(name="deploy", model=model, tools=[deploy],
              instruction="Deploy versions when asked; deploy needs a human's approval."),
        Agent(name="market", model=model, tools=[watch_price],
              instruction="When asked to watch a stock, call watch_price; mention moves "
                          "in one short sentence."),
    ]
