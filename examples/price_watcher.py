"""A live streaming tool that watches a stock price (seed 000, part one).

``watch_price`` is a plain ``async def`` generator: in ``Runner.run_live`` the
model's call is answered at once with a pending status, and every value the
generator yields reaches the model as the user text
``Function watch_price returned: {...}``. The tool polls a quote source every
5 seconds, speaks only when the price moved at least ``min_move_pct`` percent
from the last price it reported, stops on its own after an hour
(``max_lifetime=3600``), and turns a failing feed into one last emitted map
``{"symbol": ..., "error": "quote feed failed: ..."}`` (the seed's
``onErrorReturn``) so the model learns the stream is dead.

Run it::

    python examples/price_watcher.py

The model is a *scripted* offline model (``headwater.testing.ScriptedModel``)
and time is virtual (``headwater.testing.VirtualClock``): the session covers
about 15 minutes of market time and finishes in about a second.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from transcript import describe  # examples/transcript.py, beside this file

from headwater import Agent, Content, FunctionTool, LiveRequestQueue, Runner, ToolContext
from headwater import tool as make_tool
from headwater.models import LlmRequest
from headwater.testing import ScriptedCall, ScriptedModel, ScriptedTurn, VirtualClock

POLL_SECONDS = 5.0
"""How often ``watch_price`` asks the quote source for a price."""

MAX_LIFETIME = 3600.0
"""A forgotten watch ends on its own after this many seconds."""

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
    """

    def __init__(self, prices: Mapping[str, float], *, seed: int = 0,
                 volatility_pct: float = 0.25, fail_after: int | None = None) -> None:
        self.prices = dict(prices)
        self.volatility_pct = volatility_pct
        self.fail_after = fail_after
        self.polls: list[str] = []
        """The symbol of every poll, in order (failed polls included)."""
        self._rng = random.Random(seed)

    async def last_price(self, symbol: str) -> float:
        """The latest price of ``symbol``.

        A real client would await the network here; this one answers at once.

        Raises:
            QuoteFeedError: the injected failure is due, or the symbol is unknown.
        """
        self.polls.append(symbol)
        if self.fail_after is not None and len(self.polls) > self.fail_after:
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


def make_watch_price(source: QuoteSource) -> FunctionTool:
    """The ``watch_price`` live streaming tool, polling ``source``."""

    @make_tool(max_lifetime=MAX_LIFETIME)
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
            await tool_context.clock.sleep(POLL_SECONDS)

    return watch_price


# -- the scripted model ---------------------------------------------------------------------------

_WATCH = re.compile(r"\bwatch\s+([A-Z]{1,5})\b.*?(\d+(?:\.\d+)?)\s*(?:%|percent)", re.I)
_RETURNED = "Function watch_price returned: "


def scripted_market_model(request: LlmRequest) -> ScriptedTurn:
    """Plays the market_watch agent: reacts to the last thing it was told.

    Deterministic and offline; a real live model would follow ``INSTRUCTION``.
    """
    last = request.contents[-1]
    for response in last.function_responses:
        if response.name == "stop_streaming":
            return ScriptedTurn(text=["Stopped watching."])
        if response.name == "watch_price":
            return ScriptedTurn(text=["Watching. I'll mention significant moves."])
    text = last.text
    if match := _WATCH.search(text):
        args = {"symbol": match.group(1).upper(), "min_move_pct": float(match.group(2))}
        return ScriptedTurn(calls=[ScriptedCall("watch_price", args)])
    if text.lower().startswith("stop"):
        return ScriptedTurn(calls=[ScriptedCall("stop_streaming",
                                                {"function_name": "watch_price"})])
    if text.startswith(_RETURNED):
        return ScriptedTurn(text=[_one_sentence(json.loads(text[len(_RETURNED):]), request)])
    if text.startswith("Function watch_price"):
        return ScriptedTurn(text=["The price watch has ended."])
    return ScriptedTurn(text=["I can watch a stock for you: say which one and how big a move."])


def _one_sentence(emitted: dict[str, Any], request: LlmRequest) -> str:
    symbol = emitted["symbol"]
    if "error" in emitted:
        return f"I can no longer watch {symbol}: {emitted['error']}."
    before = [json.loads(c.text[len(_RETURNED):]) for c in request.contents[:-1]
              if c.text.startswith(_RETURNED)]
    before = [e for e in before if e.get("symbol") == symbol and "price" in e]
    price = emitted["price"]
    if not before:
        return f"{symbol} is at {price:.2f}."
    change = (price - before[-1]["price"]) / before[-1]["price"] * 100
    return f"{symbol} {'rose' if change > 0 else 'fell'} {abs(change):.1f}% to {price:.2f}."


def build_runner(source: QuoteSource, clock: VirtualClock) -> Runner:
    """A runner for the ``market_watch`` agent on the scripted model, in virtual time."""
    agent = Agent(name="market_watch", model=ScriptedModel(responder=scripted_market_model),
                  instruction=INSTRUCTION, tools=[make_watch_price(source)])
    return Runner(agent=agent, app_name="price_watcher", clock=clock, auto_create_session=True)


# -- the demo -------------------------------------------------------------------------------------

def stamp(elapsed: float) -> str:
    """The time label of a printed line."""
    return f"[{int(elapsed) // 3600:02d}:{int(elapsed) % 3600 // 60:02d}:{int(elapsed) % 60:02d}]"


async def demo(print_line: Callable[[str], None] = print) -> None:
    """Watch GOOG for ten minutes, stop, then watch MSFT until the feed fails."""
    clock = VirtualClock()
    source = QuoteSource({"GOOG": 171.20, "MSFT": 410.00}, seed=7, fail_after=150)
    runner = build_runner(source, clock)
    queue = LiveRequestQueue()
    start = clock.monotonic()

    async def consume() -> None:
        async for event in runner.run_live(user_id="demo", session_id="market",
                                           live_request_queue=queue):
            for line in describe(event, stamp(clock.monotonic() - start)):
                print_line(line)

    async def say(text: str) -> None:
        queue.send_content(Content.from_text(text))
        await clock.settle()

    print_line("price watcher: scripted model, virtual clock (15 minutes of market time)")
    consumer = asyncio.create_task(consume())
    await clock.settle()
    await say("Watch GOOG and tell me about 1% moves.")
    await clock.advance(10 * 60)
    await say("Stop watching.")
    await clock.advance(60)
    await say("Now watch MSFT and tell me about 0.5% moves.")
    await clock.advance(4 * 60)  # the feed fails after its 150th poll
    queue.close()
    await asyncio.wait_for(consumer, 5)
    print_line(f"quote polls: {len(source.polls)}")


def main() -> None:
    """Run the demo and print the conversation."""
    asyncio.run(demo())


if __name__ == "__main__":
    main()
