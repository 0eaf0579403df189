"""The exception tree of headwater, drawn once.

::

    HeadwaterError
    ├── UserError                  a programming mistake; the message says what to do
    │   ├── ApprovalError          an answer that matches no pending approval
    │   ├── QueueFull              a LiveRequestQueue refused a request (full)
    │   ├── SessionNotFoundError   (also a SessionError)
    │   ├── RunNotFound            no run log for that run id (also a KeyError)
    │   └── RunLogClosed           an append after the run's terminal frame
    ├── ModelError                 anything a model or its provider did wrong
    │   ├── ModelHTTPError         status_code, retryable
    │   ├── ProviderUnavailable    no usable answer after every attempt (no status)
    │   ├── ProviderTruncated      the stream broke after the first chunk
    │   ├── ProviderTimeout        connect, idle or total deadline passed
    │   ├── ToolCallAssemblyError  tool-call fragments that do not form a call
    │   ├── ModelProtocolViolation a model broke the partial/aggregate contract
    │   ├── InBandError            the provider reported an error inside a 200 stream
    │   ├── MalformedChunk         a stream event that is not the provider's promised JSON
    │   ├── OutputTooLong          one model call streamed past Settings.max_output_chars
    │   └── SSEDecodeError         an event stream broke a bound (line or event too long)
    ├── ToolError                  a tool failed (becomes an error result, never a crash)
    │   ├── ToolArgumentsError     the model's arguments do not match the tool's schema
    │   └── McpUnavailableError    an MCP server cannot be started or reached
    ├── SessionError               the session store refused or failed
    │   ├── SessionNotFoundError
    │   ├── SessionBusyError       another run holds the session
    │   │   └── LeaseLostError     a lease this run held was taken over or released
    │   ├── CallAlreadyAnsweredError  a call already has its one final result (call_ids)
    │   └── PartialEventError      a partial event was offered to the store
    ├── BudgetExceeded             a run hit one of its budgets
    │   └── RunLogFull             a run wrote ``run_log_max_frames`` frames
    └── RunStoreUnavailable        the gateway's shared run store (Redis) cannot be reached

On the wire an error is one of the codes of :data:`ERRORS`, the one registry of
each code's message, HTTP status, WebSocket close code and retryability (a run
ends with one of :data:`ERROR_CODES`); :func:`code_of` maps an exception to its
code. Raw provider text and tracebacks never leave the process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, Literal, cast

ErrorCode = Literal[
    "provider_unavailable",
    "provider_rejected",
    "provider_truncated",
    "provider_timeout",
    "provider_error",
    "provider_bad_response",
    "model_protocol_violation",
    "tool_call_incomplete",
    "output_invalid",
    "budget_exceeded",
    "too_many_streams",
    "rate_limited",
    "session_busy",
    "cancelled",
    "server_shutdown",
    "store_unavailable",
    "run_store_unavailable",
    "mcp_unavailable",
    "internal",
]

GatewayCode = Literal[
    "unauthorized",
    "forbidden",
    "not_found",
    "invalid_request",
    "payload_too_large",
    "request_timeout",
    "method_not_allowed",
]
"""The codes only the gateway answers with (a request refused before any run)."""

WireCode = ErrorCode | GatewayCode
"""Every code that may leave the process: a run's codes and the gateway's own."""


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """Everything the wire says about one error code.

    Attributes:
        message: the fixed sentence an error event, an error frame's history
            item or an HTTP error envelope carries (never the provider's text).
        status: the HTTP status of an HTTP answer with this code.
        close_code: the WebSocket close code of a live socket ended by this code
            (before its run starts, or by the run's terminal ``error`` frame).
        retryable: whether the same request may succeed later (the ``retryable``
            of ``error`` frames and notices; HTTP answers carry ``Retry-After``).
    """

    message: str
    status: int
    close_code: int
    retryable: bool


ERRORS: Final[Mapping[str, ErrorInfo]] = MappingProxyType({
    # code: ErrorInfo(message, HTTP status, WebSocket close code, retryable)
    "provider_unavailable": ErrorInfo(
        "The model provider could not be reached or kept failing.", 503, 1011, True),
    "provider_rejected": ErrorInfo("The model provider refused the request.", 502, 1011, False),
    "provider_truncated": ErrorInfo(
        "The model's answer broke off mid-stream; none of it was kept.", 502, 1011, False),
    "provider_timeout": ErrorInfo(
        "The model provider did not answer in time.", 504, 1011, True),
    "provider_error": ErrorInfo("The model provider reported an error.", 502, 1011, False),
    "provider_bad_response": ErrorInfo(
        "The model provider sent a response that is not its wire format.", 502, 1011, False),
    "model_protocol_violation": ErrorInfo(
        "The model broke the event contract; none of its answer was kept.", 502, 1011, False),
    "tool_call_incomplete": ErrorInfo(
        "The model sent a tool call that does not form a call.", 502, 1011, False),
    "output_invalid": ErrorInfo(
        "The model's answer does not match the agent's output schema.", 502, 1011, False),
    "budget_exceeded": ErrorInfo("The run spent one of its budgets.", 422, 1011, False),
    "too_many_streams": ErrorInfo("Too many concurrent streams.", 429, 1013, True),
    "rate_limited": ErrorInfo("Too many requests.", 429, 1013, True),
    "session_busy": ErrorInfo("Another run holds the session.", 409, 4409, True),
    "cancelled": ErrorInfo("The run was cancelled.", 499, 1000, False),
    "server_shutdown": ErrorInfo("The server is stopping.", 503, 1001, True),
    "store_unavailable": ErrorInfo("The session store failed.", 503, 1011, True),
    "run_store_unavailable": ErrorInfo(
        "The store of live runs could not be reached.", 503, 1013, True),
    "mcp_unavailable": ErrorInfo(
        "An MCP server the agent uses could not be started or reached.", 503, 1011, True),
    "internal": ErrorInfo("An internal error occurred.", 500, 1011, False),
    # the gateway's own
    "unauthorized": ErrorInfo("Missing or refused credentials.", 401, 1008, False),
    "forbidden": ErrorInfo("Forbidden.", 403, 1008, False),
    "not_found": ErrorInfo("Not found.", 404, 4404, False),
    "invalid_request": ErrorInfo("Invalid request.", 422, 1008, False),
    "payload_too_large": ErrorInfo("The request is too large.", 413, 1009, False),
    "request_timeout": ErrorInfo("The request body did not arrive in time.", 408, 1008, False),
    "method_not_allowed": ErrorInfo("Method not allowed.", 405, 1008, False),
})
"""The one registry of error codes: each code's message, HTTP status, WebSocket close
code and whether it is retryable. Every other table (the gateway's statuses, the
frames' ``retryable``, the live socket's close codes, the command line's words) is
read from it."""

ERROR_CODES: Final[frozenset[str]] = frozenset(ErrorCode.__args__)  # type: ignore[attr-defined]
"""The codes a run can end with (an error event's ``error_code``)."""

ToolErrorCode = Literal[
    "tool_error",
    "invalid_arguments",
    "unknown_tool",
    "timeout",
    "budget_exceeded",
    "cancelled",
    "interrupted",
    "denied",
    "superseded",
    "stream_incomplete",
    "expired",
    "unknown_agent",
    "transfer_not_allowed",
    "live_unsupported",
    "mcp_unavailable",
    "mcp_disconnected",
]
"""The codes of the error results a model sees for a call (``{"error", "code"}``; the
table of docs/event-contract.md, "Tool error results"). A call's result is not the
run's error: the run goes on."""

TOOL_ERROR_CODES: Final[frozenset[str]] = frozenset(ToolErrorCode.__args__)  # type: ignore[attr-defined]
"""The codes of :data:`ToolErrorCode`: an error result's ``code`` that the gateway may
show (a fixed word, never the tool's payload)."""

ERROR_MESSAGES: Final[Mapping[WireCode, str]] = cast(
    "Mapping[WireCode, str]",
    MappingProxyType({code: info.message for code, info in ERRORS.items()}))
"""The fixed message of each code (from :data:`ERRORS`): what an error event says."""


def error_info(code: str) -> ErrorInfo:
    """What :data:`ERRORS` says about ``code``; an unknown code is ``internal``'s."""
    return ERRORS.get(code, ERRORS["internal"])


def code_of(error: BaseException, *, phase: Literal["run", "request"] = "run") -> WireCode:
    """The one mapping of an exception to its wire code.

    Args:
        error: what was raised.
        phase: ``"run"`` for an exception that ends a run (the code of its
            terminal ``error`` frame: always one of :data:`ERROR_CODES`);
            ``"request"`` for one that refuses a request before any run frame,
            where a programming mistake of the caller (:class:`UserError`) is
            ``invalid_request`` and a missing session or run ``not_found``.

    Returns:
        The error's own ``code`` for a :class:`HeadwaterError`, ``cancelled`` for
        a cancellation, ``internal`` for anything else (a bug of ours: log it
        with its traceback).
    """
    if isinstance(error, asyncio.CancelledError):
        return "cancelled"
    if not isinstance(error, HeadwaterError):
        return "internal"
    if phase == "request":
        if isinstance(error, (SessionNotFoundError, RunNotFound)):
            return "not_found"
        if isinstance(error, UserError):
            return "invalid_request"
    return error.code


def public_message(error: HeadwaterError) -> str:
    """The message an error event may carry for ``error``: fixed per code.

    The provider's own text (an error body, an in-band message) never goes
    into it; adapters log that at DEBUG, redacted. A retryable HTTP error that
    asked for a delay beyond the cap says how long.
    """
    message = ERROR_MESSAGES[error.code]
    retry_after = getattr(error, "retry_after", None)
    if isinstance(retry_after, (int, float)):
        message += f" Retry after {retry_after:g} s."
    return message


class HeadwaterError(Exception):
    """Base of every error headwater raises on purpose."""

    code: ErrorCode = "internal"


class UserError(HeadwaterError):
    """A programming mistake in how headwater is used; the message says what to do."""


class ApprovalError(UserError):
    """An approval answer for no pending call, a replay, or for other arguments.

    Nothing of the message that carried it is stored.
    """


class ModelError(HeadwaterError):
    """A model or its provider failed; ``code`` is the wire error code."""

    code: ErrorCode = "provider_error"


class ModelHTTPError(ModelError):
    """The provider answered with an HTTP error status.

    Attributes:
        status_code: the HTTP status.
        retryable: whether a new attempt may succeed (429, 5xx, …).
        retry_after: seconds the provider asked the caller to wait, when it asked
            for longer than ``Settings.model_retry_after_cap`` (the call then
            ends at once instead of sleeping), else ``None``.
    """

    def __init__(self, message: str, *, status_code: int, retryable: bool,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.retryable = retryable
        self.retry_after = retry_after
        # A server-side status is "unavailable" even when the server says not to retry.
        unavailable = retryable or status_code >= 500 or status_code in (408, 429)
        self.code = "provider_unavailable" if unavailable else "provider_rejected"


class ProviderUnavailable(ModelError):
    """The provider could not be reached or kept failing before any content, on every attempt."""

    code: ErrorCode = "provider_unavailable"


class ProviderTruncated(ModelError):
    """The provider stream broke after content had been received.

    Nothing of that model call is persisted; the turn ends with an error event.
    """

    code: ErrorCode = "provider_truncated"


class ProviderTimeout(ModelError):
    """A connect, idle or total deadline passed while talking to the provider."""

    code: ErrorCode = "provider_timeout"


class ToolCallAssemblyError(ModelError):
    """Tool-call fragments did not assemble into a well-formed call; no tool runs."""

    code: ErrorCode = "tool_call_incomplete"


class ModelProtocolViolation(ModelError):
    """A model broke the partial/aggregate contract (docs/event-contract.md).

    Attributes:
        invariant: a short name of the broken invariant, e.g. ``"no_final"``.
    """

    code: ErrorCode = "model_protocol_violation"

    def __init__(self, invariant: str, message: str) -> None:
        super().__init__(f"{invariant}: {message}")
        self.invariant = invariant


class InBandError(ModelError):
    """The provider reported an error inside a 200 stream.

    Attributes:
        retryable: whether a new attempt may succeed (overload, server error).
    """

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.code = "provider_unavailable" if retryable else "provider_rejected"


class MalformedChunk(ModelError):
    """A stream event whose data is not the JSON the provider's format promises.

    Also a 200 answer that is not an event stream at all (an HTML page from a
    proxy). Never retried: the same request would get the same answer.
    """

    code: ErrorCode = "provider_bad_response"


class OutputTooLong(ModelError):
    """One model call streamed more text than ``Settings.max_output_chars``.

    The call is closed at once; nothing of it is stored (docs/event-contract.md).
    Its wire code is ``budget_exceeded``: the bound is a budget of the call.

    Attributes:
        max_chars: the bound that was passed.
    """

    code: ErrorCode = "budget_exceeded"

    def __init__(self, max_chars: int) -> None:
        super().__init__(f"the model call streamed more than max_output_chars={max_chars} "
                         "characters")
        self.max_chars = max_chars


class SSEDecodeError(ModelError):
    """The event stream broke a bound (a line or an event too long)."""

    code: ErrorCode = "provider_bad_response"


class QueueFull(UserError):
    """A request found a ``LiveRequestQueue`` full (policy ``"error"``, or not a droppable blob)."""


class ToolError(HeadwaterError):
    """A tool failed. The runner turns it into an error result the model sees."""


class ToolArgumentsError(ToolError):
    """The model's arguments do not match the tool's schema (nothing ran)."""


class McpUnavailableError(ToolError):
    """An MCP server (``headwater.tools.mcp.McpToolset``) could not be started or reached.

    The message names the command or the URL (never its headers). A run whose
    agent needs the server's tools ends with this code; a call to one of them
    gets an error result with it (docs/mcp.md).
    """

    code: ErrorCode = "mcp_unavailable"


class SessionError(HeadwaterError):
    """The session store refused an operation or failed.

    Raised as such (not a subclass), it means the store could not do the work
    (database locked past its timeout, disk or connection failure, a full write
    queue): wire code ``store_unavailable``.
    """

    code: ErrorCode = "store_unavailable"


class SessionNotFoundError(SessionError, UserError):
    """No session with that app, user and id exists (or it belongs to someone else).

    The gateway answers 404 for it, by type; its code is not a store failure.
    """

    code: ErrorCode = "internal"


class SessionBusyError(SessionError):
    """Another run holds this session; try again when it ends."""

    code: ErrorCode = "session_busy"


class LeaseLostError(SessionBusyError):
    """A lease this run held no longer holds the session (taken over, or released).

    A write fenced by that lease stored nothing.
    """


class CallAlreadyAnsweredError(SessionError):
    """An event carried a final result for a call that already has one; nothing was stored.

    Each call has exactly one stored final result: the first write wins
    (docs/architecture.md). A long-running tool's ticket is not a final result.

    Attributes:
        call_ids: the call ids that already had a final result, sorted.
    """

    code: ErrorCode = "internal"

    def __init__(self, call_ids: list[str] | tuple[str, ...]) -> None:
        self.call_ids: tuple[str, ...] = tuple(sorted(call_ids))
        super().__init__("already answered: " + ", ".join(repr(c) for c in self.call_ids))


class PartialEventError(SessionError, UserError):
    """A partial event was offered to a session store; partials are never persisted."""

    code: ErrorCode = "internal"


class BudgetExceeded(HeadwaterError):
    """A run hit one of its budgets (model calls, tool calls, …)."""

    code: ErrorCode = "budget_exceeded"


class RunLogFull(BudgetExceeded):
    """A run wrote as many frames as its run log holds (``Settings.run_log_max_frames``).

    Nothing was appended. The log still accepts the run's terminal frame, so the
    run can end with ``error`` ``budget_exceeded``.
    """


class RunStoreUnavailable(HeadwaterError):
    """The store the gateway's replicas share runs through (Redis: frames, run records,
    stream counts) did not answer: down, refused or past ``Settings.redis_timeout``.

    Nothing of the run's history is lost: that lives in the session store. A
    request answers 503 ``run_store_unavailable`` with ``Retry-After``; a stream
    that was following a run ends with a terminal ``error`` frame of that code.
    """

    code: ErrorCode = "run_store_unavailable"


class RunLogClosed(UserError):
    """An append to a run log that already holds its terminal frame; nothing was appended."""


class RunNotFound(UserError, KeyError):
    """No run log has that run id (never opened, forgotten, or the log was closed).

    Also a ``KeyError``. The gateway answers 404 for it, by type; its code is not
    a store failure.
    """

    code: ErrorCode = "internal"

    def __str__(self) -> str:
        return Exception.__str__(self)  # not KeyError's repr() of the message
