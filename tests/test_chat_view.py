"""How ``headwater chat`` writes a multi-agent run's frames (the pty tests drive whole runs):
one draft per author, each message labelled with its agent, an inner agent's activity
indented under the call it runs in."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from headwater.cli._chat_view import RunView, error_words
from headwater.cli._gateway_client import WireFrame


def shown(*frames: tuple[str, dict[str, Any]]) -> str:
    out = io.StringIO()
    view = RunView(Console(file=out, width=200, color_system=None, highlight=False))
    for n, (kind, data) in enumerate(frames, 1):
        view.show(WireFrame(str(n), kind, data))
    view.close()
    return out.getvalue()


def test_interleaved_authors_each_keep_their_draft_and_no_record_is_repeated() -> None:
    web, papers = {"author": "web", "branch": "p.web"}, {"author": "papers", "branch": "p.papers"}
    text = shown(("delta", {**web, "text": "Web "}), ("delta", {**papers, "text": "Papers "}),
                 ("delta", {**papers, "text": "say no."}), ("delta", {**web, "text": "says yes."}),
                 ("message", {**papers, "id": "p1", "text": "Papers say no.", "final": True}),
                 ("message", {**web, "id": "w1", "text": "Web says yes.", "final": True}),
                 ("done", {"usage": {"input_tokens": 1, "output_tokens": 2}}))
    assert text.splitlines() == ["web> Web ", "papers> Papers say no.", "web> says yes.",
                                 "tokens: 1 in, 2 out"]


def test_a_record_that_differs_from_its_draft_is_shown_below_it() -> None:
    text = shown(("delta", {"author": "a", "text": "Hel"}),
                 ("message", {"author": "a", "id": "m", "text": "Hello.", "final": True}))
    assert text.splitlines() == ["a> Hel", "record: a> Hello."]


def test_an_inner_agents_activity_is_indented_under_the_outer_call() -> None:
    inner = {"author": "researcher", "branch": "writer:c1"}
    text = shown(
        ("tool_call", {"author": "writer", "names": ["research"],
                       "calls": [{"id": "c1", "name": "research"}]}),
        ("delta", {**inner, "text": "Looking "}),
        ("tool_call", {**inner, "names": ["search"], "calls": [{"id": "c2", "name": "search"}]}),
        ("tool_result", {**inner, "count": 1, "results": [
            {"id": "c2", "name": "search", "status": "ok", "size": 3}]}),
        ("message", {**inner, "id": "r1", "text": "Found it.", "final": True}),
        ("tool_result", {"author": "writer", "count": 1, "results": [
            {"id": "c1", "name": "research", "status": "ok", "size": 9}]}),
        ("agent_error", {"author": "papers", "branch": "p.papers", "code": "internal",
                         "retryable": False}))
    assert text.splitlines() == [
        "→ calls research · writer",
        "  researcher> Looking ",
        "  → calls search · researcher",
        "  ✓ search answered",
        "  record: researcher> Found it.",
        "✓ research answered",
        f"✗ papers failed: {error_words('internal')} (internal)"]


def test_a_resumed_sessions_history_puts_an_inner_agents_items_under_their_call() -> None:
    import asyncio

    from headwater.cli._chat import Chat
    from headwater.cli._gateway_client import GatewayClient

    out = io.StringIO()
    loop = asyncio.new_event_loop()
    client = GatewayClient("http://127.0.0.1:9", None)
    try:
        chat = Chat(Console(file=out, width=200, color_system=None), client, loop)
        chat.session_id = "s1"
        chat._show_history([
            {"author": "user", "role": "user", "text": "Find papers"},
            {"author": "coordinator", "role": "model", "text": ""},
            {"author": "user", "role": "user", "text": "papers on tides",
             "branch": "coordinator:c1"},
            {"author": "researcher", "role": "model", "text": "Found 3.",
             "branch": "coordinator:c1"},
            {"author": "coordinator", "role": "model", "text": "It found 3."}])
    finally:
        loop.run_until_complete(client.aclose())
        loop.close()
    assert out.getvalue().splitlines()[1:] == [
        "  you: Find papers", "    request: papers on tides", "    researcher: Found 3.",
        "  coordinator: It found 3."]


def test_a_hand_off_is_one_line_and_a_live_streams_pending_answer_says_it_started() -> None:
    text = shown(
        ("tool_call", {"author": "coordinator", "names": ["transfer_to_agent"],
                       "calls": [{"id": "t1", "name": "transfer_to_agent"}]}),
        ("tool_result", {"author": "coordinator", "count": 1, "results": [
            {"id": "t1", "name": "transfer_to_agent", "status": "ok", "size": 14,
             "response": {"result": None}}]}),
        ("agent_transfer", {"author": "coordinator", "to": "billing", "call_id": "t1"}),
        ("tool_result", {"author": "billing", "count": 1, "results": [
            {"id": "w1", "name": "watch_price", "status": "pending", "size": 80}]}))
    assert text.splitlines() == [
        "→ calls transfer_to_agent · coordinator",
        "⇢ coordinator handed the conversation to billing",
        "✓ watch_price started (its values follow)"]


def test_a_measured_progress_fills_the_bar_with_the_message_beside_it() -> None:
    def step(n: int) -> tuple[str, dict[str, Any]]:
        return ("tool_progress", {"author": "indexer", "call_id": "i1", "name": "index_docs",
                                  "type": "progress", "index": None, "delta": None,
                                  "progress": n, "total": 8, "message": f"indexing page {n}"})

    text = shown(("tool_call", {"author": "indexer", "names": ["index_docs"],
                                "calls": [{"id": "i1", "name": "index_docs"}]}),
                 step(2), step(4))
    [bar] = [line for line in text.splitlines() if "index_docs" in line and "%" in line]
    assert "50%" in bar and bar.rstrip().endswith("indexing page 4")
