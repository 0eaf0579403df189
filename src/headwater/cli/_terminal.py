"""``headwater demo --terminal``: one streamed turn of the demo's support agent, narrated
in the terminal.

The agent is the one ``headwater demo`` serves (``headwater.examples.support``),
on ``--model``, else ``HEADWATER_MODEL``, else the offline demo model (no
network, no key); sessions go to the SQLite store unless ``--db`` names another.
:func:`narrate` writes its events, and ``headwater run``'s.
"""

from __future__ import annotations

import json
from typing import TextIO

from ..core.run_config import RunConfig, StreamingMode
from ..examples import support
from ..runner import Runner, RunStream
from ._common import DEMO_APP, DEMO_USER
from ._drafts import Drafts, nesting
from ._models import describe_model, resolve_model
from ._store import open_store, probe


async def demo(prompt: str, db: str | None, model_name: str | None, mode: StreamingMode,
               out: TextIO) -> int:
    """Run one turn of the demo's support agent and narrate the event stream; returns the
    exit code (1 when the run ends in an error event).

    Args:
        model_name: ``--model`` (else ``HEADWATER_MODEL``, else the demo model).

    Raises:
        CommandError: the session store cannot be used.
        UserError: an unknown model string or a missing API key.
    """
    model = resolve_model(model_name)
    service, database_url = open_store(db)
    try:
        await probe(service, database_url)
    except BaseException:
        await service.close()
        raise
    runner = Runner(agent=support.build_agent(model), app_name=DEMO_APP,
                    session_service=service)
    try:
        session = await service.create_session(app_name=DEMO_APP, user_id=DEMO_USER)
        out.write(f"headwater demo: model {describe_model(model)}, "
                  f"sessions in {database_url}\n\nyou> {prompt}\n")
        async with runner.run_async(user_id=DEMO_USER, session_id=session.id,
                                    new_message=prompt,
                                    run_config=RunConfig(streaming_mode=mode)) as stream:
            failed = await narrate(stream, out)
        stored = await service.get_session(app_name=DEMO_APP, user_id=DEMO_USER,
                                           session_id=session.id)
        count = len(stored.events) if stored else 0
        u = stream.usage
        out.write(f"\n[done] {stream.stats.llm_calls} model calls, {u.input_tokens} tokens in / "
                  f"{u.output_tokens} out; session {session.id} holds {count} events "
                  "(no partials)\n")
        return 1 if failed else 0
    finally:
        await runner.aclose()  # closes the session store too


async def narrate(stream: RunStream, out: TextIO) -> bool:
    """Write a run's events as a terminal transcript (the caller closes the stream).

    Text goes by the rule ``headwater chat`` shows it by (:mod:`._drafts`): each
    agent's deltas as its draft, on a line labelled ``author>``; the record
    replaces the draft (not written again when the deltas said it). A lone
    agent's answer is one labelled line; when several agents speak, each one's
    text is on lines of its own, labelled with it, and an agent used as a tool
    writes under its call.

    Returns:
        Whether an error event came.
    """
    drafts = Drafts()
    failed = False

    def new_line(indent: str) -> str:
        """End the open line; ``indent``, for the line that follows."""
        if drafts.end_line():
            out.write("\n")
        return indent

    async for event in stream:
        key, indent = (event.author, event.branch), nesting(event.branch)
        if event.tool_progress is not None:
            progress = event.tool_progress
            out.write(f"{new_line(indent)}[progress] {progress.tool_name}: "
                      f"{progress.event.line}\n")
            continue
        if event.partial:
            if event.text:
                if drafts.starts(key):
                    out.write(f"{new_line(indent)}{event.author}> ")
                drafts.add(key, event.text)
                out.write(event.text)
                out.flush()
            continue
        if event.error_code:
            failed = True
            drafts.end_line()  # the error's line break ends it
            if not event.text:
                drafts.drop(key)
            out.write(f"\n{indent}[error] {event.error_code}: {event.error_message}\n")
        content = event.content
        if content is not None and content.role == "model" and event.text:
            # The aggregate replaces the draft: it is the record. When it says what the
            # deltas said, the streamed line stands; otherwise the record is shown.
            settled = drafts.settle(key, event.text)
            if settled == "ends":
                out.write("\n")
            elif settled == "record":
                out.write(f"{new_line(indent)}[record] {event.author}> {event.text}\n")
            elif settled == "new":
                out.write(f"{new_line(indent)}{event.author}> {event.text}\n")
        for approval in event.actions.requested_approvals:
            out.write(f"{new_line(indent)}[approval required] {approval.display}\n")
        for call in event.function_calls:
            out.write(f"{new_line(indent)}[tool call] {call.name}({json.dumps(call.args)})\n")
        for response in event.function_responses:
            out.write(f"{new_line(indent)}[tool result] {response.name} -> "
                      f"{json.dumps(response.response)}\n")
    new_line("")
    return failed

