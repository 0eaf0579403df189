"""The price watcher (seed 000, part one): a live streaming tool with a stream of its own.

``watch_price`` is a plain ``async def`` generator: in ``Runner.run_live`` the
model's call is answered at once with a pending status, and every value the
generator yields reaches the model as the user text
``Function watch_price returned: {...}``. The tool polls a quote source, speaks
only when the price moved at least ``min_move_pct`` percent from the last price
it reported, stops on its own after ``max_lifetime``, and turns a failing feed
into one last emitted map ``{"symbol": ..., "error": "quote feed failed: ..."}``
(the seed's ``onErrorReturn``) so the model learns the stream is dead.

Run it (a live session in real time: watch, then stop)::

    python -m headwater.examples.price_watcher ["Watch GOOG"] [--seconds 5]

``examples/price_watcher.py --virtual`` in the repository plays the seed's
fifteen minutes of market time on a virtual clock instead.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from ..agents.agent import Agent
from ..models.base import BaseLlm
from ..runner import Runner
from ..tools.context import ToolContext
from ..tools.function_tool import FunctionTool, tool
from ._console import LiveSession, example_model, parse_args, step_pause

PROMPT = "Watch GOOG"
POLL_SECONDS = 5.0
"""How often the seed's ``watch_price`` asks the quote source for a price."""

MAX_LIFETIME = 3600.0
"""A forgotten watch ends on its own after this many seconds (the seed's hour)."""

DEMO_LIFETIME = 600.0
"""The demo's watches end sooner: ten minutes."""

DEMO_PRICES = {"GOOG": 171.20, "MSFT": 410.00, "AAPL": 228.50, "NVDA": 121.40, "AMZN": 186.90}
"""The symbols the demo's quote feed knows, and their opening prices."""

DESCRIPTION = "Watches a stock live with watch_price and mentions its moves."

# The seed's instruction, with headwater's tool and argument names.
INSTRUCTION = (
    "When the user asks to watch a stock, call watch_price. Mention a move in one short "
    "sentence. Call stop_streaming with function_name watch_price when asked to stop."
)


class QuoteFeedError(Exception):
    """The upstream quote feed failed."""


class QuoteSource:
    """A deterministic quote feed: one seeded random walk per symbol.

    Each poll of a symbol returns its current price, then moves it by a
    normally distributed step of ``volatility_pct`` percent (rounded to cents).
    With ``volatility_pct=0`` the prices stay where a test puts them
    (``source.prices[symbol] = ...``).

    Args:
        prices: the starting price of every symbol the feed knows.
        seed: seeds the walk; the same seed gives the same prices.
        volatility_pct: standard deviation of one step, in percent.
        fail_after: when set, every poll after this many raises
            :class:`QuoteFeedError` (an injected upstream failure).
        history: how many polls ``polls`` remembers (a long-running server
            keeps a bounded record).
    """

    def __init__(self, prices: Mapping[str, float], *, seed: int = 0,
                 volatility_pct: float = 0.25, fail_after: int | None = None,
                 history: int = 10_000) -> None:
        self.prices = dict(prices)
        self.volatility_pct = volatility_pct
        self.fail_after = fail_after
        self.polls: deque[str] = deque(maxlen=history)
        """The symbol of the latest polls, in order (failed polls included)."""
        self.count = 0
        """Every poll so far."""
        self._rng = random.Random(seed)

    async def last_price(self, symbol: str) -> float:
        """The latest price of ``symbol``.

        A real client would await the network here; this one answers at once.

        Raises:
            QuoteFeedError: the injected failure is due, or the symbol is unknown.
        """
        self.polls.append(symbol)
        self.count += 1
        if self.fail_after is not None and self.count > self.fail_after:
            raise QuoteFeedError(f"connection reset after {self.fail_after} polls")
        if symbol not in self.prices:
            raise QuoteFeedError(f"unknown symbol {symbol!r}")
        price = self.prices[symbol]
        step = self._rng.gauss(0.0, self.volatility_pct / 100)
        self.prices[symbol] = round(price * (1 + step), 2)
        return price


def moved_enough(previous: float | None, price: float, min_move_pct: float) -> bool:
    """The seed's filter: the first price, or a move of at least ``min_move_pct`` percent."""
    return previous is None or abs(price - previous) / previous * 100 >= min_move_pct


def make_watch_price(source: QuoteSource, *, poll_seconds: float = POLL_SECONDS,
                     max_lifetime: float = MAX_LIFETIME) -> FunctionTool:
    """The ``watch_price`` live streaming tool, polling ``source`` every ``poll_seconds``."""

    @tool(max_lifetime=max_lifetime)
    async def watch_price(symbol: str, min_move_pct: float,
                          tool_context: ToolContext) -> AsyncIterator[dict[str, Any]]:
        """Watch a stock and report significant price moves until stopped.

        Args:
            symbol: Ticker, e.g. GOOG.
            min_move_pct: Report moves at least this large, in percent.
        """
        last: float | None = None
        while True:
            try:
                price = await source.last_price(symbol)
            except Exception as exc:  # the seed's onErrorReturn: tell the model, then end
                yield {"symbol": symbol, "error": f"quote feed failed: {exc}"}
                return
            if moved_enough(last, price, min_move_pct):
                last = price
                yield {"symbol": symbol, "price": price}
            await tool_context.clock.sleep(poll_seconds)

    return watch_price


def demo_source() -> QuoteSource:
    """The demo's feed: :data:`DEMO_PRICES`, a seeded walk of 0.5 % steps."""
    return QuoteSource(DEMO_PRICES, seed=7, volatility_pct=0.5)


def build_agent(model: str | BaseLlm, *, source: QuoteSource | None = None,
                poll_seconds: float | None = None, max_lifetime: float = DEMO_LIFETIME) -> Agent:
    """The ``market`` agent on ``model``.

    Args:
        model: the model.
        source: the quote feed (default: :func:`demo_source`).
        poll_seconds: seconds between polls (default: three demo steps, at
            least 10 ms: about a second at the default reading pace).
        max_lifetime: a watch ends on its own after this many seconds.
    """
    poll = poll_seconds if poll_seconds is not None else max(step_pause() * 3, 0.01)
    return Agent(name="market", model=model, instruction=INSTRUCTION, description=DESCRIPTION,
                 tools=[make_watch_price(source or demo_source(), poll_seconds=poll,
                                         max_lifetime=max_lifetime)])


async def watch(agent: Agent, message: str, seconds: float) -> int:
    """Say ``message``, let the watch run ``seconds``, stop it; print it all. Returns 0 or 1."""
    async with Runner(agent=agent, app_name=agent.name, auto_create_session=True) as runner:
        async with LiveSession(runner, sys.stdout) as live:
            live.say(message)
            if await live.answered("watch_price"):
                await asyncio.sleep(seconds)
                await live.stop("Stop watching.")
        return 1 if live.errors else 0


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float, default=5.0,
                        help="how long to watch before asking to stop (default 5)")


def main(argv: Sequence[str] | None = None) -> int:
    """Watch a stock live for a few seconds, then stop; print the conversation."""
    args = parse_args("price_watcher", "Watch a stock live, then stop.", PROMPT, argv, _options)
    return asyncio.run(watch(build_agent(example_model()), args.message, args.seconds))


if __name__ == "__main__":
    sys.exit(main())
