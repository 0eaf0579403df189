"""``headwater demo --terminal``: one streamed support turn, narrated in the terminal.

It runs on the embedded defaults: the offline scripted model (no network, no
key) and the SQLite session store.
"""

from __future__ import annotations

import json
import re
from typing import TextIO

from ..agents.agent import Agent
from ..examples.support import lookup_order
from ..models.base import LlmRequest
from ..models.scripted import ScriptedCall, ScriptedModel, ScriptedTurn
from ..run_config import RunConfig, StreamingMode
from ..runner import Runner, RunStream
from ..types import Usage
from ._common import DEMO_APP, DEMO_USER
from ._store import open_store, probe


def support_responder(request: LlmRequest) -> ScriptedTurn:
    """The demo's scripted 'model': calls lookup_order for an order number, then answers."""
    last = request.contents[-1]
    if last.function_responses:
        result = last.function_responses[0].response
        order_id = next((c.function_calls[0].args.get("order_id") for c in request.contents
                         if c.function_calls), "?")
        if "error" in result:
            words = ["I could not find ", f"order {order_id}. ", "Please check the number."]
        elif result.get("status") == "shipped":
            words = [f"Order {order_id} shipped ", f"on {result['shipped_on']} ",
                     f"and is due {result['due']}."]
        else:
            words = [f"Order {order_id} is ", f"{result.get('status', 'in progress')} ",
                     f"and is due {result.get('due', 'soon')}."]
        return ScriptedTurn(text=words, usage=Usage(48, 14, 62), delay=0.04)
    match = re.search(r"\b(\d{3,})\b", last.text)
    if match:
        return ScriptedTurn(calls=[ScriptedCall("lookup_order", {"order_id": match.group(1)},
                                                fragments=3)],
                            usage=Usage(31, 9, 40), finish_reason="tool_calls")
    return ScriptedTurn(text=["I can look up ", "an order for you: ", "tell me its number."],
                        usage=Usage(20, 10, 30), delay=0.04)


async def demo(prompt: str, db: str | None, mode: StreamingMode, out: TextIO) -> int:
    """Run one turn and narrate the event stream; returns the exit code.

    Raises:
        CommandError: the session store cannot be used.
    """
    service, database_url = open_store(db)
    try:
        await probe(service, database_url)
    except BaseException:
        await service.close()
        raise
    model = ScriptedModel(model="scripted-support", responder=support_responder)
    agent = Agent(name="support", model=model, tools=[lookup_order],
                  instruction="You are a shop's support agent.")
    runner = Runner(agent=agent, app_name=DEMO_APP, session_service=service)
    try:
        session = await service.create_session(app_name=DEMO_APP, user_id=DEMO_USER)
        out.write(f"headwater demo: model 'scripted-support' (SCRIPTED, offline), "
                  f"sessions in {database_url}\n\nyou> {prompt}\n")
        async with runner.run_async(user_id=DEMO_USER, session_id=session.id,
                                    new_message=prompt,
                                    run_config=RunConfig(streaming_mode=mode)) as stream:
            await narrate(stream, out)
        stored = await service.get_session(app_name=DEMO_APP, user_id=DEMO_USER,
                                           session_id=session.id)
        count = len(stored.events) if stored else 0
        u = stream.usage
        out.write(f"\n[done] {stream.stats.llm_calls} model calls, {u.input_tokens} tokens in / "
                  f"{u.output_tokens} out; session {session.id} holds {count} events "
                  "(no partials)\n")
        return 0
    finally:
        await runner.aclose()  # closes the session store too


async def narrate(stream: RunStream, out: TextIO) -> bool:
    """Write a run's events as a terminal transcript (the caller closes the stream).

    Returns:
        Whether an error event came.
    """
    draft: str | None = None
    failed = False
    async for event in stream:
        if event.tool_progress is not None:
            progress = event.tool_progress
            out.write(f"[progress] {progress.tool_name}: {progress.event.delta or ''}\n")
            continue
        if event.partial:
            if draft is None:
                out.write(f"{event.author}> ")
                draft = ""
            draft += event.text
            out.write(event.text)
            out.flush()
            continue
        if event.error_code:
            failed = True
            out.write(f"\n[error] {event.error_code}: {event.error_message}\n")
        for approval in event.actions.requested_approvals:
            out.write(f"[approval required] {approval.tool_name}"
                      f"({json.dumps(approval.args)})\n")
        for call in event.function_calls:
            out.write(f"[tool call] {call.name}({json.dumps(call.args)})\n")
        for response in event.function_responses:
            out.write(f"[tool result] {response.name} -> {json.dumps(response.response)}\n")
        if event.text and not event.function_calls:
            # The aggregate replaces the draft: it is the record. When it says what the
            # deltas said, the streamed line stands; otherwise the record is shown.
            if draft is None:
                out.write(f"{event.author}> {event.text}\n")
            elif draft == event.text:
                out.write("\n")
            else:
                out.write(f"\n[record] {event.author}> {event.text}\n")
            draft = None
    return failed
