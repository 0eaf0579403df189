"""StreamAggregator and the tool-call fragment assembler."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.errors import ToolCallAssemblyError
from headwater.models import LlmResponse, StreamAggregator
from headwater.models._toolcalls import ToolCallAssembler
from headwater.testing import check_stream_contract
from headwater.types import Content, Part, Usage


def test_aggregator_builds_partials_and_one_final() -> None:
    agg = StreamAggregator()
    out = [agg.thought("hmm "), agg.text("Hel"), agg.text(""), agg.text("lo")]
    agg.tool_call(index=0, call_id="c1", name="f", arguments='{"a":')
    agg.tool_call(index=0, arguments=" 1}")
    agg.finish_reason = "tool_calls"
    agg.usage = Usage(3, 4, 7)
    responses = [r for r in out if r is not None]
    final = agg.finish()
    check_stream_contract([*responses, final])
    assert final.content is not None
    assert final.content.text == "Hello" and final.content.thought_text == "hmm "
    assert [(c.id, c.name, c.args) for c in final.content.function_calls] == [("c1", "f", {"a": 1})]
    assert final.usage == Usage(3, 4, 7)


def test_in_band_error_keeps_text_and_drops_half_calls() -> None:
    agg = StreamAggregator()
    agg.text("partial answer")
    agg.tool_call(index=0, call_id="c", name="f", arguments='{"a": ')
    agg.error("provider_error", "overloaded")
    final = agg.finish()
    assert final.error_code == "provider_error"
    assert final.content is not None and final.content.text == "partial answer"
    assert final.content.function_calls == []


@pytest.mark.parametrize("fragments", [
    [dict(index=0, call_id="a", name="f", arguments='{"x": ')],
    [dict(index=0, call_id="a", arguments="{}")],
    [dict(index=0, call_id="a", name="f", arguments="[1, 2]")],
])
def test_malformed_calls_raise(fragments: list[dict[str, Any]]) -> None:
    assembler = ToolCallAssembler()
    for f in fragments:
        assembler.feed(**f)
    with pytest.raises(ToolCallAssemblyError):
        assembler.finish()


def test_repeated_index_zero_is_split_by_call_id() -> None:
    assembler = ToolCallAssembler()
    assembler.feed(index=0, call_id="a", name="f", arguments='{"n": 1}')
    assembler.feed(index=0, call_id="b", name="g", arguments='{"n": ')
    assembler.feed(index=0, arguments="2}")
    calls = assembler.finish()
    assert [(c.id, c.name, c.args) for c in calls] == [("a", "f", {"n": 1}), ("b", "g", {"n": 2})]


def test_fragment_that_names_no_call_is_refused() -> None:
    with pytest.raises(ToolCallAssemblyError):
        ToolCallAssembler().feed(arguments='{"a": 1}')


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(args=st.lists(st.dictionaries(st.text(max_size=8), json_values, max_size=4),
                     min_size=1, max_size=3),
       data=st.data())
def test_any_split_and_interleaving_reassembles_exactly(args: list[dict[str, Any]],
                                                        data: st.DataObject) -> None:
    texts = [json.dumps(a, ensure_ascii=data.draw(st.booleans())) for a in args]
    pieces: list[list[str]] = []
    for text in texts:
        cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(text) - 1)), max_size=8)))
        bounds = [0, *cuts, len(text)]
        pieces.append([text[a:b] for a, b in itertools.pairwise(bounds) if a < b])
    assembler = ToolCallAssembler()
    for index in range(len(texts)):
        assembler.feed(index=index, call_id=f"call-{index}", name=f"tool{index}")
    cursor = [0] * len(texts)
    while any(cursor[i] < len(pieces[i]) for i in range(len(texts))):
        live = [i for i in range(len(texts)) if cursor[i] < len(pieces[i])]
        i = data.draw(st.sampled_from(live))
        assembler.feed(index=i, arguments=pieces[i][cursor[i]])
        cursor[i] += 1
    assert [c.args for c in assembler.finish()] == args


@settings(max_examples=200, deadline=None)
@given(args=st.dictionaries(st.text(max_size=8), json_values, min_size=1, max_size=4),
       data=st.data())
def test_truncated_arguments_never_assemble(args: dict[str, Any], data: st.DataObject) -> None:
    text = json.dumps(args, ensure_ascii=data.draw(st.booleans()))
    cut = data.draw(st.integers(1, len(text) - 1))
    assembler = ToolCallAssembler()
    assembler.feed(index=0, call_id="c", name="f", arguments=text[:cut])
    with pytest.raises(ToolCallAssemblyError):
        assembler.finish()


@pytest.mark.parametrize("thought", [False, True])
def test_the_per_chunk_partial_equals_the_constructors(thought: bool) -> None:
    agg = StreamAggregator()
    made = agg.thought("abc") if thought else agg.text("abc")
    assert made == LlmResponse(content=Content("model", [Part(text="abc", thought=thought)]),
                               partial=True)
