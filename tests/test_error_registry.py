"""One registry of error codes (headwater.errors.ERRORS); every other table is read from it."""

from __future__ import annotations

import asyncio
import inspect
import typing

import pytest

import headwater.core.errors as errors_module
from headwater.cli._chat_view import CLIENT_ERRORS, NETWORK, error_words
from headwater.errors import (
    ERROR_CODES,
    ERROR_MESSAGES,
    ERRORS,
    ApprovalError,
    CallAlreadyAnsweredError,
    ErrorCode,
    GatewayCode,
    HeadwaterError,
    LeaseLostError,
    ModelHTTPError,
    PartialEventError,
    RunLogFull,
    RunNotFound,
    SessionBusyError,
    SessionError,
    SessionNotFoundError,
    UserError,
    code_of,
    error_info,
    public_message,
)
from headwater.gateway.frames import RETRYABLE, error_frame
from headwater.gateway.problems import ERROR_STATUS, GatewayHTTPError
from headwater.gateway.websocket import CLOSE_CODES

# RFC 6455 close codes a server may send, and the private-use range.
SENDABLE_CLOSE = {1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014}


def test_the_registry_holds_every_code_once_and_nothing_else() -> None:
    run_codes = set(typing.get_args(ErrorCode))
    gateway_codes = set(typing.get_args(GatewayCode))
    assert not run_codes & gateway_codes
    assert set(ERRORS) == run_codes | gateway_codes
    assert run_codes == ERROR_CODES


@pytest.mark.parametrize("code", sorted(ERRORS))
def test_every_code_has_a_message_a_status_a_close_code_and_retryable(code: str) -> None:
    info = ERRORS[code]
    assert isinstance(info.message, str) and info.message[:1].isupper()
    assert info.message.endswith(".") and len(info.message) <= 100
    assert isinstance(info.status, int) and 400 <= info.status <= 599
    assert info.close_code in SENDABLE_CLOSE or 4000 <= info.close_code <= 4999
    assert isinstance(info.retryable, bool)
    assert error_info(code) is info


def test_the_registry_cannot_be_changed_at_run_time() -> None:
    with pytest.raises(TypeError):
        ERRORS["internal"] = ERRORS["cancelled"]  # type: ignore[index]


def test_an_unknown_code_reads_as_internal() -> None:
    assert error_info("no_such_code") is ERRORS["internal"]


def test_the_messages_table_is_the_registry_s() -> None:
    assert dict(ERROR_MESSAGES) == {code: info.message for code, info in ERRORS.items()}


def test_the_frames_retryable_table_is_the_registry_s() -> None:
    assert {code for code, info in ERRORS.items() if info.retryable} == RETRYABLE
    for code in ERROR_CODES:
        kind, data = error_frame(code, "req")
        assert (kind, data) == ("error", {"code": code, "retryable": ERRORS[code].retryable,
                                          "request_id": "req"})


def test_the_gateway_s_status_table_is_the_registry_s() -> None:
    assert dict(ERROR_STATUS) == {code: info.status for code, info in ERRORS.items()}
    for code, info in ERRORS.items():
        error = GatewayHTTPError(code)
        assert (error.status, error.message) == (info.status, info.message)
        assert ("Retry-After" in error.headers) == info.retryable
    assert GatewayHTTPError("session_busy", headers={"retry-after": "5"}).headers == {
        "retry-after": "5"}
    with pytest.raises(UserError):
        GatewayHTTPError("no_such_code")


def test_the_live_socket_s_close_codes_are_the_registry_s() -> None:
    assert dict(CLOSE_CODES) == {code: info.close_code for code, info in ERRORS.items()}


def test_the_chat_s_words_are_the_registry_s() -> None:
    assert {code: words for code, words in CLIENT_ERRORS.items() if code != NETWORK} == {
        code: info.message for code, info in ERRORS.items()}
    assert NETWORK not in ERRORS  # the client's own: no server sends it
    for code, info in ERRORS.items():
        assert error_words(code) == info.message
    assert error_words("something_new") == "Something went wrong."


def _error_classes() -> list[type[HeadwaterError]]:
    return [cls for _, cls in inspect.getmembers(errors_module, inspect.isclass)
            if issubclass(cls, HeadwaterError)]


def _instance(cls: type[HeadwaterError]) -> HeadwaterError:
    if cls is ModelHTTPError:
        return cls("HTTP 400", status_code=400, retryable=False)
    if cls is errors_module.InBandError:
        return cls("overloaded", retryable=True)
    if cls is errors_module.ModelProtocolViolation:
        return cls("no_final", "x")
    if cls is CallAlreadyAnsweredError:
        return cls(["c1"])
    return cls("x")


@pytest.mark.parametrize("cls", _error_classes(), ids=lambda c: c.__name__)
def test_in_a_run_every_error_of_ours_ends_with_its_own_code(cls: type[HeadwaterError]) -> None:
    error = _instance(cls)
    assert code_of(error) == error.code
    assert code_of(error) in ERROR_CODES


@pytest.mark.parametrize(("error", "in_run", "in_request"), [
    (SessionNotFoundError("gone"), "internal", "not_found"),
    (RunNotFound("gone"), "internal", "not_found"),
    (ApprovalError("no such call"), "internal", "invalid_request"),
    (UserError("wrong use"), "internal", "invalid_request"),
    (PartialEventError("partial"), "internal", "invalid_request"),
    (SessionBusyError("busy"), "session_busy", "session_busy"),
    (LeaseLostError("taken"), "session_busy", "session_busy"),
    (SessionError("disk"), "store_unavailable", "store_unavailable"),
    (RunLogFull("full"), "budget_exceeded", "budget_exceeded"),
    (ModelHTTPError("HTTP 503", status_code=503, retryable=True), "provider_unavailable",
     "provider_unavailable"),
    (asyncio.CancelledError(), "cancelled", "cancelled"),
    (TypeError("a bug of ours"), "internal", "internal"),
    (KeyError("a bug of ours"), "internal", "internal"),
])
def test_one_function_maps_an_exception_to_its_code(error: BaseException, in_run: str,
                                                    in_request: str) -> None:
    assert code_of(error) == in_run
    assert code_of(error, phase="request") == in_request


def test_an_error_event_s_message_is_the_registry_s() -> None:
    error = ModelHTTPError("HTTP 429: secret body", status_code=429, retryable=True,
                           retry_after=90)
    assert public_message(error) == ERRORS["provider_unavailable"].message + " Retry after 90 s."
