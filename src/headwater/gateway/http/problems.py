"""The gateway's HTTP error envelope, in one place.

Every error the gateway answers has the same JSON body::

    {"error": {"code": "not_found", "message": "session not found", "request_id": "…"}}

``code`` is one of :data:`ERROR_STATUS`'s keys (every code of the registry,
:data:`headwater.errors.ERRORS`, whose status is the code's default);
``message`` is short and fixed by the gateway (the code's registry message
unless a route says more), never an exception's text or a request's values;
``request_id`` is the one :class:`~headwater.gateway.limits.RequestLimits` put
in the ``X-Request-Id`` response header. :func:`install_error_handlers` makes
every failure of a FastAPI app (validation, routing, an unexpected exception)
answer this way.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, MutableMapping
from types import MappingProxyType
from typing import Any, Final

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel
from starlette.exceptions import HTTPException
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, Response

from ...core.errors import ERRORS, RunStoreUnavailable, UserError

logger = logging.getLogger("headwater.gateway")

ERROR_STATUS: Final[Mapping[str, int]] = MappingProxyType(
    {code: info.status for code, info in ERRORS.items()})
"""Gateway error code -> its default HTTP status (from :data:`headwater.errors.ERRORS`;
``invalid_request`` is also answered with 400: pass ``status=400``)."""

_STATUS_CODES: Final[Mapping[int, str]] = MappingProxyType({
    400: "invalid_request",
    **{ERRORS[code].status: code for code in (
        "unauthorized", "forbidden", "not_found", "method_not_allowed", "request_timeout",
        "payload_too_large", "invalid_request", "rate_limited")},
})
"""The code a bare HTTP status (Starlette's routing 404, 405…) is answered with."""

ERROR_LOGGED: Final = "error_logged"
"""Key of ``scope["state"]`` set once an unexpected exception has been logged and answered."""

_MAX_FIELDS = 5  # a validation message names at most this many fields
_MAX_LOC = 64  # characters of one field path (a dict key may come from the request)


class ErrorDetail(BaseModel):
    """The ``error`` object of the envelope.

    Attributes:
        code: a key of :data:`ERROR_STATUS`.
        message: a short, fixed explanation; never raw exception text.
        request_id: the request's id, as in its ``X-Request-Id`` header.
    """

    code: str
    message: str
    request_id: str


class ErrorBody(BaseModel):
    """The whole error envelope; use it in a route's OpenAPI ``responses=``."""

    error: ErrorDetail


class GatewayHTTPError(Exception):
    """An error a route raises to answer with the envelope.

    ``raise GatewayHTTPError("not_found", "session not found")`` answers 404;
    :func:`install_error_handlers` must be installed on the app.

    Attributes:
        code: a key of :data:`ERROR_STATUS`.
        message: what the envelope says (the code's registry message when not
            given); keep user input and secrets out of it.
        status: the HTTP status (the code's default unless given).
        headers: extra response headers (``WWW-Authenticate``, ``Retry-After``…);
            a retryable code (:data:`headwater.errors.ERRORS`) carries
            ``Retry-After: 1`` unless they give one.

    Raises:
        UserError: at construction, for a code that is not in
            :data:`ERROR_STATUS` and no explicit ``status``.
    """

    def __init__(self, code: str, message: str | None = None, *, status: int | None = None,
                 headers: Mapping[str, str] | None = None) -> None:
        self.status = _status_of(code, status)
        self.code = code
        self.message = message if message is not None else _message_of(code)
        super().__init__(self.message)
        self.headers: dict[str, str] = dict(headers or {})
        info = ERRORS.get(code)
        if info is not None and info.retryable and not any(
                k.lower() == "retry-after" for k in self.headers):
            self.headers["Retry-After"] = "1"


def too_large(what: str, limit: int, unit: str) -> GatewayHTTPError:
    """413 ``payload_too_large`` naming the bound that was passed, the one wording of
    every such refusal: ``too_large("The message", 100_000, "characters")`` says
    "The message is over this server's limit of 100,000 characters."

    Args:
        what: what was too large, capitalised ("The request body").
        limit: the bound (a setting's value; never anything the request sent).
        unit: the bound's unit ("bytes", "characters").
    """
    return GatewayHTTPError("payload_too_large",
                            f"{what} is over this server's limit of {limit:,} {unit}.")


def _message_of(code: str) -> str:
    info = ERRORS.get(code)
    return info.message if info is not None else "Request failed."


def _status_of(code: str, status: int | None) -> int:
    if status is not None:
        return status
    try:
        return ERROR_STATUS[code]
    except KeyError:
        raise UserError(
            f"unknown gateway error code {code!r}: use one of {sorted(ERROR_STATUS)} "
            "or pass status=") from None


def error_response(code: str, message: str, request_id: str, *, status: int | None = None,
                   headers: Mapping[str, str] | None = None) -> Response:
    """The envelope as a JSON response that no cache keeps.

    Args:
        code: a key of :data:`ERROR_STATUS`.
        message: the short message the client sees.
        request_id: the request's id (see :func:`request_id_of`).
        status: the HTTP status; the code's default when omitted.
        headers: extra headers. A 401 always carries ``WWW-Authenticate``
            (``Bearer`` unless ``headers`` give one).

    Returns:
        A ready ``starlette.responses.Response``.

    Raises:
        UserError: for an unknown code without an explicit ``status``.
    """
    status = _status_of(code, status)
    merged = {"Cache-Control": "no-store", **(headers or {})}
    if status == 401 and not any(k.lower() == "www-authenticate" for k in merged):
        merged["WWW-Authenticate"] = "Bearer"
    body = ErrorBody(error=ErrorDetail(code=code, message=message, request_id=request_id))
    return JSONResponse(body.model_dump(), status_code=status, headers=merged)


def request_id_of(scope_or_request: HTTPConnection | MutableMapping[str, Any]) -> str:
    """The id of the request, as :class:`~headwater.gateway.limits.RequestLimits` set it.

    Without that middleware a new id is made and stored in the scope's state,
    so later calls for the same request agree.

    Args:
        scope_or_request: a Starlette ``Request``/``WebSocket`` or an ASGI scope.
    """
    scope = (scope_or_request.scope if isinstance(scope_or_request, HTTPConnection)
             else scope_or_request)
    state = scope.setdefault("state", {})
    request_id = state.get("request_id")
    if not isinstance(request_id, str):
        request_id = state["request_id"] = new_request_id()
    return request_id


def new_request_id() -> str:
    """A fresh request id: 32 lower-case hex characters."""
    return uuid.uuid4().hex


def install_error_handlers(app: FastAPI) -> None:
    """Make every error of ``app`` answer with the envelope.

    - :class:`GatewayHTTPError`: its code, message, status and headers.
    - :class:`~headwater.errors.RunStoreUnavailable` (the shared run store,
      Redis, is unreachable): its code, ``run_store_unavailable`` (503, with
      ``Retry-After``), unlogged (the store logs each outage once).
    - ``RequestValidationError``: 422 ``invalid_request`` naming the bad
      fields and why (``body.message (missing)``), never their values.
    - Starlette's ``HTTPException`` (routing's 404 and 405, or one a route
      raises): the code of its status with a fixed message; its ``detail``
      is not sent. Routes should raise :class:`GatewayHTTPError` instead.
    - any other exception: 500 ``internal``, logged with its traceback on the
      ``headwater.gateway`` logger; nothing of it reaches the client.
      Starlette re-raises it after the answer; ``RequestLimits`` then drops it
      so the server does not log it a second time.
    """
    app.add_exception_handler(GatewayHTTPError, _on_gateway_error)
    app.add_exception_handler(RunStoreUnavailable, _on_run_store_unavailable)
    app.add_exception_handler(RequestValidationError, _on_validation_error)
    app.add_exception_handler(HTTPException, _on_http_exception)
    app.add_exception_handler(Exception, _on_unexpected)


async def _on_gateway_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, GatewayHTTPError)
    return error_response(exc.code, exc.message, request_id_of(request), status=exc.status,
                          headers=exc.headers)


async def _on_run_store_unavailable(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RunStoreUnavailable)
    return await _on_gateway_error(request, GatewayHTTPError(exc.code))


async def _on_validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    return error_response("invalid_request", validation_message(exc.errors()),
                          request_id_of(request))


def validation_message(errors: Any) -> str:  # Any: pydantic's error dicts, raw
    """A short message naming the fields that failed and why, never their values.

    Args:
        errors: ``RequestValidationError.errors()`` (dicts with ``loc`` and ``type``).
    """
    parts = []
    for error in list(errors)[:_MAX_FIELDS]:
        loc = ".".join(str(item) for item in error.get("loc", ()))[:_MAX_LOC] or "request"
        parts.append(f"{loc} ({error.get('type', 'invalid')})")
    more = len(list(errors)) - _MAX_FIELDS
    suffix = f" and {more} more" if more > 0 else ""
    return f"Invalid request: {', '.join(parts)}{suffix}."


async def _on_http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    status = exc.status_code
    if status in (204, 304):  # no body allowed
        return Response(status_code=status, headers=exc.headers)
    code = _STATUS_CODES.get(status, "internal" if status >= 500 else "invalid_request")
    return error_response(code, _message_of(code), request_id_of(request), status=status,
                          headers=exc.headers)


async def _on_unexpected(request: Request, exc: Exception) -> Response:
    request_id = request_id_of(request)
    logger.error("unhandled error in %s %s (request %s)", request.method, request.url.path,
                 request_id, exc_info=exc, extra={"request_id": request_id})
    request.scope.setdefault("state", {})[ERROR_LOGGED] = True
    return error_response("internal", _message_of("internal"), request_id)
