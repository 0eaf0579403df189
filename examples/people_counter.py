"""The people counter (seed 002), from the repository.

    python examples/people_counter.py ["Count the people"] [--speed 1]   # live, in real time
    python examples/people_counter.py --virtual                          # on a virtual clock

The agent, its ``count_people`` input-stream tool, the pure-Python detector and
the bundled frame sequence have one home, ``headwater.examples.people_counter``;
the first form is that module's ``main``. ``--virtual`` plays the sequence (ten
seconds of a 4-fps camera, plus audio the tool ignores) on a virtual clock
(``headwater.testing.VirtualClock``) with the offline demo model, then stops the
tool, and prints which frames the tool looked at.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Sequence

from headwater import FunctionTool, LiveRequestQueue, Runner
from headwater.examples.people_counter import (
    FPS,
    SCENE,
    build_agent,
    detect_people,
    frame_blob,
    make_count_people,
    scene_frames,
    spread,
)
from headwater.examples.people_counter import main as live_main
from headwater.examples.transcript import live_lines
from headwater.models import DemoModel
from headwater.testing import VirtualClock
from headwater.types import Blob, Content


def build_runner(clock: VirtualClock, counter: FunctionTool | None = None) -> Runner:
    """The ``people`` agent on the demo model, in virtual time."""
    agent = build_agent(DemoModel(word_delay=0), counter=counter)
    return Runner(agent=agent, app_name="people_counter", clock=clock, auto_create_session=True)


def stamp(elapsed: float) -> str:
    """The time label of a printed line."""
    return f"[t={elapsed:5.2f}s]"


async def virtual_session(print_line: Callable[[str], None] = print) -> None:
    """Stream the bundled sequence at ``FPS`` frames a second; count people; stop."""
    clock = VirtualClock()
    analysed: list[int] = []

    def detect(image: bytes) -> int:
        analysed.append(detect_people(image))
        return analysed[-1]

    runner = build_runner(clock, make_count_people(detect))
    queue = LiveRequestQueue()
    start = clock.monotonic()

    async def consume() -> None:
        async with runner.run_live(user_id="demo", session_id="camera",
                                   live_request_queue=queue) as events:
            async for event in events:
                for line in live_lines(event, stamp(clock.monotonic() - start)):
                    print_line(line)

    print_line(f"people counter: demo model (scripted), virtual clock "
               f"({len(SCENE)} s at {FPS} fps)")
    consumer = asyncio.create_task(consume())
    await clock.settle()
    queue.send_realtime(frame_blob(spread(4)))  # before the call: the tool never sees it
    queue.send_content(Content.from_text("How many people can you see?"))
    await clock.settle()
    sent = 1
    for frame in scene_frames():
        queue.send_realtime(frame)
        queue.send_realtime(Blob("audio/pcm;rate=16000", bytes(320)))  # ignored by the tool
        sent += 1
        await clock.advance(1 / FPS)
    queue.send_content(Content.from_text("Stop counting."))
    await clock.settle()
    queue.close()
    await asyncio.wait_for(consumer, 5)
    await runner.aclose()
    print_line(f"frames sent: {sent}; frames analysed: {len(analysed)} (counts {analysed})")


def main(argv: Sequence[str] | None = None) -> int:
    """``--virtual``: the virtual-clock session; otherwise the package module's ``main``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--virtual"]:
        asyncio.run(virtual_session())
        return 0
    return live_main(args)


if __name__ == "__main__":
    sys.exit(main())
