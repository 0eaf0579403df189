"""The price watcher (seed 000), from the repository.

    python examples/price_watcher.py ["Watch GOOG"] [--seconds 5]   # live, in real time
    python examples/price_watcher.py --virtual                      # the seed's session

The agent, its ``watch_price`` tool and its quote feed have one home,
``headwater.examples.price_watcher``; the first form is that module's ``main``.
``--virtual`` plays the seed's session on a virtual clock
(``headwater.testing.VirtualClock``): watch GOOG for ten minutes (1 % moves),
stop, then watch MSFT (0.5 % moves) until the injected feed failure — fifteen
minutes of market time in about a second, on the offline demo model.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Sequence

from headwater import LiveRequestQueue, Runner
from headwater.examples.price_watcher import MAX_LIFETIME, POLL_SECONDS, QuoteSource, build_agent
from headwater.examples.price_watcher import main as live_main
from headwater.examples.transcript import live_lines
from headwater.models import DemoModel
from headwater.testing import VirtualClock
from headwater.types import Content


def build_runner(source: QuoteSource, clock: VirtualClock) -> Runner:
    """The seed's ``market`` agent: 5 s polls, an hour's lifetime, the demo model, virtual time."""
    agent = build_agent(DemoModel(word_delay=0), source=source, poll_seconds=POLL_SECONDS,
                        max_lifetime=MAX_LIFETIME)
    return Runner(agent=agent, app_name="price_watcher", clock=clock, auto_create_session=True)


def stamp(elapsed: float) -> str:
    """The time label of a printed line."""
    return f"[{int(elapsed) // 3600:02d}:{int(elapsed) % 3600 // 60:02d}:{int(elapsed) % 60:02d}]"


async def virtual_session(print_line: Callable[[str], None] = print) -> None:
    """Watch GOOG for ten minutes, stop, then watch MSFT until the feed fails."""
    clock = VirtualClock()
    source = QuoteSource({"GOOG": 171.20, "MSFT": 410.00}, seed=7, fail_after=150)
    runner = build_runner(source, clock)
    queue = LiveRequestQueue()
    start = clock.monotonic()

    async def consume() -> None:
        async with runner.run_live(user_id="demo", session_id="market",
                                   live_request_queue=queue) as events:
            async for event in events:
                for line in live_lines(event, stamp(clock.monotonic() - start)):
                    print_line(line)

    async def say(text: str) -> None:
        queue.send_content(Content.from_text(text))
        await clock.settle()

    print_line("price watcher: demo model (scripted), virtual clock (15 minutes of market time)")
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
    await runner.aclose()
    print_line(f"quote polls: {source.count}")


def main(argv: Sequence[str] | None = None) -> int:
    """``--virtual``: the seed's session; otherwise ``headwater.examples.price_watcher.main``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--virtual"]:
        asyncio.run(virtual_session())
        return 0
    return live_main(args)


if __name__ == "__main__":
    sys.exit(main())
