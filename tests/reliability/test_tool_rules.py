"""Prompt injection through tool results: whatever a tool's result talks the model into,
nothing runs outside the rules. The ``effect`` tool's result tells the model to call
``gated`` and an unknown tool; the (fake) model obeys, and more: arguments outside the
schema, a gated call nobody approved, 100 calls in one turn. The side-effect sink
counts what ran."""

from __future__ import annotations

import json
from typing import Any

import pytest

from headwater.testing import FakeProvider

from .conftest import Served, history, new_session, start_run, text, tool_calls

pytestmark = [pytest.mark.reliability, pytest.mark.slow]


def results_sent(provider: FakeProvider, index: int) -> dict[str, dict[str, Any]]:
    """The tool results the model was sent in request ``index``, by call id."""
    messages = provider.requests[index].json()["messages"]
    return {m["tool_call_id"]: json.loads(m["content"]) for m in messages if m["role"] == "tool"}


async def test_what_a_tool_result_asks_for_runs_only_within_the_rules(
        server: Served, provider: FakeProvider) -> None:
    async with server.client() as client:
        sid = await new_session(client)
        provider.enqueue(
            tool_calls(("effect", {"key": "first"}, "c_first")),
            # the model "follows" the result's instructions
            tool_calls(("nope", {"cmd": "rm -rf /"}, "c_unknown"),
                       ("effect", {"key": 5, "extra": "x"}, "c_schema"),
                       ("effect", {}, "c_missing"),
                       ("effect", {"key": "k" * 300_000}, "c_huge")),
            text("ok"))
        raw = await start_run(server.port, sid, "do it")
        await raw.read_until(lambda r: False, within=20)
        assert raw.types[-1] == "done", raw.types
        ran = [c for c, _, _ in server.effects()]
        assert ran == ["c_first"], ran  # nothing but the one valid call ran
        results = results_sent(provider, 2)
        assert results["c_unknown"]["code"] == "unknown_tool", results
        for call in ("c_schema", "c_missing", "c_huge"):
            assert results[call]["code"] == "invalid_arguments", (call, results[call])

        # a gated call nobody approved: the run pauses, the tool does not run
        provider.enqueue(tool_calls(("gated", {"target": "prod"}, "c_gated")))
        raw = await start_run(server.port, sid, "now deploy")
        await raw.read_until(lambda r: False, within=20)
        assert "approval_required" in raw.types and raw.types[-1] == "done", raw.types
        assert [t for _, t, _ in server.effects()] == ["effect"]
        # a forged answer (a wrong call id) approves nothing; a denial runs nothing
        provider.enqueue(text("fine"))
        response = await client.post(f"/sessions/{sid}/runs", headers={
            "Authorization": "Bearer canary-tok-7f3a9c51e2"},
            json={"approvals": [{"call_id": "c_other", "approved": True}]})
        assert response.status_code in (400, 409, 422), response.text
        response = await client.post(f"/sessions/{sid}/runs", headers={
            "Authorization": "Bearer canary-tok-7f3a9c51e2"},
            json={"approvals": [{"call_id": "c_gated", "approved": False}]})
        assert response.status_code == 200 and "event: done" in response.text, response.text
        assert [t for _, t, _ in server.effects()] == ["effect"]
        assert provider.pending == 0

        # 100 calls in one turn: the first 64 (RunConfig.max_tool_calls_per_turn) run once
        # each, never more than max_parallel_tools at once; the rest do not run
        calls = [("effect", {"key": f"n{i}"}, f"c_{i:03}") for i in range(100)]
        provider.enqueue(tool_calls(*calls), text("all done"))
        raw = await start_run(server.port, sid, "a hundred")
        await raw.read_until(lambda r: False, within=60)
        assert raw.types[-1] == "done", raw.types[-3:]
        batch = [(c, n) for c, t, n in server.effects() if c.startswith("c_") and c[2:].isdigit()]
        assert sorted(c for c, _ in batch) == [f"c_{i:03}" for i in range(64)]
        assert max(n for _, n in batch) <= 8  # Settings.max_parallel_tools
        results = results_sent(provider, len(provider.requests) - 1)
        assert sum(c.startswith("c_") and c[2:].isdigit() for c in results) == 100
        assert {results[f"c_{i:03}"].get("code") for i in range(64, 100)} == {"budget_exceeded"}
        items = await history(client, sid)
        assert not any(i.get("partial") for i in items)
