"""The AG-UI encoder and request mapping, without a server (the wire test is test_agui.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from headwater.errors import ERROR_MESSAGES
from headwater.gateway.agui import AguiEncoder, RunAgentInput, encode_event, message_of
from headwater.gateway.problems import GatewayHTTPError
from headwater.gateway.sse import Frame, encode_frame
from headwater.tools.approval import APPROVAL_RESPONSE_NAME


def events(encoder: AguiEncoder, *frames: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Render frames (numbered from 1) and parse the SSE messages back."""
    out: list[dict[str, Any]] = []
    for n, (kind, data) in enumerate(frames, 1):
        raw = encoder.render(encode_frame(n, kind, data)).decode()
        assert raw == "" or raw.endswith("\n\n")
        out += [json.loads(chunk.removeprefix("data: ")) for chunk in raw.split("\n\n") if chunk]
    return out


def encoder() -> AguiEncoder:
    return AguiEncoder("thread", "run", "inv")


def test_the_prologue_is_run_started() -> None:
    assert encoder().started() == (
        b'data: {"type":"RUN_STARTED","threadId":"thread","runId":"run"}\n\n')


def test_authors_keep_their_own_open_messages() -> None:
    got = events(encoder(), ("delta", {"author": "a", "text": "x"}),
                 ("delta", {"author": "b", "text": "y"}),
                 ("message", {"author": "a", "id": "e1", "text": "x", "final": False}),
                 ("message", {"author": "b", "id": "e2", "text": "y", "final": True}))
    a_id, b_id = got[0]["messageId"], got[2]["messageId"]
    assert a_id != b_id
    assert [(e["type"], e["messageId"]) for e in got] == [
        ("TEXT_MESSAGE_START", a_id), ("TEXT_MESSAGE_CONTENT", a_id),
        ("TEXT_MESSAGE_START", b_id), ("TEXT_MESSAGE_CONTENT", b_id),
        ("TEXT_MESSAGE_END", a_id), ("TEXT_MESSAGE_END", b_id)]


def test_a_message_without_deltas_uses_the_stored_event_id_and_parents_its_calls() -> None:
    got = events(encoder(), ("message", {"author": "a", "id": "e7", "text": "On it.",
                                         "final": False}),
                 ("tool_call", {"names": ["t"], "calls": [{"id": "c1", "name": "t"}]}),
                 ("tool_call", {"names": ["t"], "calls": [{"id": "c2", "name": "t",
                                                           "args": {"k": 1}}]}))
    assert got[1] == {"type": "TEXT_MESSAGE_CONTENT", "messageId": "e7", "delta": "On it."}
    assert got[3] == {"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "t",
                      "parentMessageId": "e7"}
    assert got[4]["delta"] == "{}"
    assert "parentMessageId" not in got[6]  # only the calls of the message's own event
    assert got[7]["delta"] == '{"k":1}'


def test_cancelled_is_a_cancelled_outcome_that_closes_what_is_open() -> None:
    got = events(encoder(), ("reasoning", {"author": "a", "text": "hm"}),
                 ("delta", {"author": "a", "text": "par"}),
                 ("error", {"code": "cancelled", "retryable": False, "request_id": "r"}))
    assert [e["type"] for e in got] == [
        "REASONING_START", "REASONING_MESSAGE_START", "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_END", "REASONING_END", "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "RUN_FINISHED"]
    assert got[-1]["outcome"] == {"type": "cancelled"}


@pytest.mark.parametrize("code", ["server_shutdown", "budget_exceeded", "provider_timeout"])
def test_other_errors_are_run_error_with_the_fixed_message(code: str) -> None:
    [event] = events(encoder(), ("error", {"code": code, "retryable": True, "request_id": "r"}))
    assert event == {"type": "RUN_ERROR", "message": ERROR_MESSAGES[code], "code": code}


def test_approvals_become_the_interrupt_outcome() -> None:
    got = events(encoder(),
                 ("approval_required", {"call_id": "c1", "name": "deploy", "args_sha256": "h1",
                                        "display": "deploy 2 to staging"}),
                 ("approval_required", {"call_id": "c2", "name": "pay", "args_sha256": "h2",
                                        "display": "pay(amount=3)", "args": {"amount": 3}}),
                 ("done", {"usage": {"input_tokens": 5, "output_tokens": 7}}))
    [finished] = got
    assert finished["usage"] == [{"inputTokens": 5, "outputTokens": 7, "totalTokens": 12}]
    first, second = finished["outcome"]["interrupts"]
    assert finished["outcome"]["type"] == "interrupt"
    assert (first["id"], first["toolCallId"], first["reason"]) == ("c1", "c1", "tool_call")
    assert first["metadata"] == {"toolName": "deploy", "args_sha256": "h1",
                                 "display": "deploy 2 to staging"}
    assert first["message"] == "Approve deploy 2 to staging?"  # what the approver reads
    assert second["metadata"]["args"] == {"amount": 3}  # only where the frame carried them
    assert second["message"] == "Approve pay(amount=3)?"


def test_a_frame_type_this_format_does_not_carry_sends_nothing() -> None:
    assert encoder().render(Frame(1, "turn_complete", {}, b"")) == b""


def test_a_lone_surrogate_still_encodes() -> None:
    raw = encode_event({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "\ud800"})
    assert raw == b'data: {"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"\\ud800"}\n\n'


# -- the request ---------------------------------------------------------------------------------


def body(**fields: Any) -> RunAgentInput:
    return RunAgentInput.model_validate({"threadId": "t", "runId": "r", "messages": [],
                                         **fields})


def test_the_last_user_message_with_its_parts() -> None:
    content = message_of(body(messages=[
        {"id": "1", "role": "user", "content": "old"},
        {"id": "2", "role": "assistant", "content": "reply"},
        {"id": "3", "role": "user", "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image", "source": {"type": "data", "value": "aGk=",
                                         "mimeType": "image/png"}}]}]))
    assert content.role == "user"
    assert content.parts[0].text == "what is this?"
    blob = content.parts[1].inline_data
    assert blob is not None and (blob.mime_type, blob.data) == ("image/png", b"hi")


@pytest.mark.parametrize("messages", [
    [],
    [{"id": "1", "role": "user", "content": "  "}],
    [{"id": "1", "role": "user", "content": "x"}, {"id": "2", "role": "assistant"}],
    [{"id": "1", "role": "user", "content": [{"type": "image", "source": {
        "type": "url", "value": "https://example.com/a.png"}}]}],
    [{"id": "1", "role": "user", "content": [{"type": "image", "source": {
        "type": "data", "value": "not base64!", "mimeType": "image/png"}}]}],
])
def test_inputs_without_a_usable_new_message_are_400(messages: list[Any]) -> None:
    with pytest.raises(GatewayHTTPError) as caught:
        message_of(body(messages=messages))
    assert (caught.value.code, caught.value.status) == ("invalid_request", 400)


def test_resume_answers_are_approval_responses() -> None:
    content = message_of(body(
        messages=[{"id": "1", "role": "user", "content": "ignored"}],
        resume=[{"interruptId": "c1", "status": "resolved",
                 "payload": {"approved": True, "args_sha256": "h"}},
                {"interruptId": "c2", "status": "resolved",
                 "payload": {"approved": False, "reason": "not today"}},
                {"interruptId": "c3", "status": "cancelled"}]))
    answers = [(r.id, r.name, r.response) for r in content.function_responses]
    assert answers == [
        ("c1", APPROVAL_RESPONSE_NAME, {"approved": True, "reason": None, "args_sha256": "h"}),
        ("c2", APPROVAL_RESPONSE_NAME, {"approved": False, "reason": "not today",
                                        "args_sha256": None}),
        ("c3", APPROVAL_RESPONSE_NAME, {"approved": False, "reason": "cancelled",
                                        "args_sha256": None})]


@pytest.mark.parametrize("payload", [None, {}, {"approved": "yes"}])
def test_a_resolved_answer_must_say_approved(payload: Any) -> None:
    with pytest.raises(GatewayHTTPError):
        message_of(body(resume=[{"interruptId": "c1", "status": "resolved",
                                 "payload": payload}]))
