"""The machinery both HTTP adapters share: one streamed POST, retries, timeouts, cancel.

Retries happen only before the first content chunk (connection errors, 408,
409, 429, 5xx, 529, an in-band error before content), honouring
``Retry-After`` and ``x-should-retry``, with exponential backoff (each delay
drawn from ``[0.75 c, c]`` of its ceiling ``c``), the same request bytes and a
fresh parser each attempt. A ``Retry-After`` longer than
``model_retry_after_cap`` is not clamped: the call ends at once with a
retryable ``ModelHTTPError`` whose ``retry_after`` carries the delay. After
the first content chunk a failure is final: a transport failure or a stream
that ends without its terminal marker raises ``ProviderTruncated``.

Every stream is consumed under ``aclosing``; closing it early (cancel, error)
closes the HTTP response and its connection, so the provider sees the close at
once. After a normal end the body is read to its terminator, so the connection
goes back to the pool and the next call reuses it.

The provider's own words (an error body, an in-band error message) never go
into an exception message or an event: they are logged at DEBUG on
``headwater.models``, with API keys, bearer tokens and ``sk-…`` strings
redacted.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import random
import re
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import aclosing
from types import TracebackType
from typing import Any

import httpx

from ..core.errors import (
    InBandError,
    MalformedChunk,
    ModelError,
    ModelHTTPError,
    ProviderTimeout,
    ProviderTruncated,
    ProviderUnavailable,
)
from ..core.redaction import redact
from ..core.settings import Settings, settings_or_default
from ..core.sse import ServerSentEvent, SSEDecoder
from .aggregator import StreamAggregator
from .base import BaseLlm
from .llm_request import LlmRequest
from .llm_response import LlmResponse

_MAX_ERROR_BODY = 64 * 1024
_MAX_LOGGED = 2000

logger = logging.getLogger("headwater.models")


class _Retry(Exception):
    """An attempt failed before any content; ``final`` is raised if no attempt is left.

    ``cause`` is the transport's own exception, for the log.
    """

    def __init__(self, final: ModelError, retry_after: float | None = None,
                 cause: BaseException | None = None) -> None:
        super().__init__(str(final))
        self.final = final
        self.retry_after = retry_after
        self.cause = cause


class StreamParser(ABC):
    """Turns one provider's SSE events into partials and one aggregate (one per attempt).

    Attributes:
        agg: the aggregator of this attempt.
        complete: a terminal marker arrived; the stream may end now.
        ended: nothing more is expected; stop reading.
    """

    provider = "http"

    def __init__(self) -> None:
        self.agg = StreamAggregator()
        self.complete = False
        self.ended = False

    @abstractmethod
    def feed(self, event: ServerSentEvent) -> None:
        """Handle one event, recording its deltas with ``agg.add_text``/``add_thought``.

        Raises:
            InBandError: a provider error before any content (the attempt is retried
                when it is retryable).
        """

    def in_band_error(self, detail: str, *, retryable: bool) -> None:
        """Record an in-band provider error: before content it fails the attempt.

        ``detail`` is the provider's own text: it goes to a DEBUG log line,
        redacted, and nowhere else.
        """
        logger.debug("%s: in-band error: %s", self.provider, redact(detail[:_MAX_LOGGED]))
        message = f"{self.provider}: the provider reported an error in the stream"
        if not self.agg.has_content:
            raise InBandError(message, retryable=retryable)
        self.agg.error("provider_error", message)
        self.complete = self.ended = True

    def finish(self) -> LlmResponse:
        """The aggregate of the attempt (raises ``ToolCallAssemblyError`` on broken calls)."""
        return self.agg.finish()


def backoff_delay(attempt: int, settings: Settings) -> float:
    """Seconds to wait before attempt ``attempt + 1``: drawn from ``[0.75 c, c]``.

    ``c = min(model_backoff_max, model_backoff_initial * 2 ** (attempt - 1))``.
    The jitter spreads clients apart without letting any of them retry much
    sooner than the ceiling (full jitter down to 0 makes retry storms cheaper
    for nobody).
    """
    ceiling = min(settings.model_backoff_max,
                  settings.model_backoff_initial * 2 ** (attempt - 1))
    return random.uniform(0.75 * ceiling, ceiling)


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """The delay a server asked for (``retry-after-ms``, ``Retry-After`` seconds or date)."""
    value = headers.get("retry-after-ms")
    if value:
        try:
            return float(value) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value) if value else None
        return max(0.0, parsed.timestamp() - time.time()) if parsed is not None else None


def is_retryable_status(status: int, headers: Mapping[str, str]) -> bool:
    """408, 409, 429 and 5xx are retried, unless ``x-should-retry`` says otherwise."""
    should = headers.get("x-should-retry")
    if should == "true":
        return True
    if should == "false":
        return False
    return status in (408, 409, 429) or status >= 500


class PooledTransport(httpx.AsyncBaseTransport):
    """Several small httpx connection pools: a model's default transport.

    httpx's pool walks all of its connections for every queued request on each
    request and release, which at hundreds of concurrent streams costs more
    than the streams themselves; several small pools keep each walk short. A
    request goes to the first pool with room (fewer than ``FILL`` requests in
    flight), else to the least busy one, so sequential calls reuse one
    connection and concurrent ones spread. Together the pools hold at most
    ``max_connections`` connections (each pool its share).

    Args:
        pools: how many pools.
        max_connections: open connections in all (``None``: no bound).
    """

    FILL = 16

    def __init__(self, pools: int, max_connections: int | None) -> None:
        count = max(1, pools)
        per_pool = None if max_connections is None else max(1, -(-max_connections // count))
        limits = httpx.Limits(max_connections=per_pool,
                              max_keepalive_connections=min(per_pool or self.FILL, self.FILL))
        tls = httpx.create_ssl_context()  # one for all pools: each costs ~1 MiB to build
        self._pools = [httpx.AsyncHTTPTransport(limits=limits, verify=tls)
                       for _ in range(count)]
        self._busy = [0] * count

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` through a pool with room; it counts until the body is closed."""
        busy = self._busy
        index = next((i for i, n in enumerate(busy) if n < self.FILL), None)
        if index is None:
            index = busy.index(min(busy))
        busy[index] += 1
        try:
            response = await self._pools[index].handle_async_request(request)
        except BaseException:
            busy[index] -= 1
            raise
        response.stream = _Counted(response.stream, busy, index)
        return response

    async def aclose(self) -> None:
        """Close every pool's connections."""
        for pool in self._pools:
            await pool.aclose()


class _Counted(httpx.AsyncByteStream):
    """A response body that gives its pool's slot back when it is closed."""

    def __init__(self, stream: Any, busy: list[int], index: int) -> None:
        self._stream = stream
        self._busy = busy
        self._index: int | None = index

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._stream.__aiter__()  # type: ignore[no-any-return]  # no layer per chunk

    async def aclose(self) -> None:
        index, self._index = self._index, None
        if index is not None:
            self._busy[index] -= 1
        await self._stream.aclose()


class HttpStreamingModel(BaseLlm):
    """A model behind an HTTP endpoint that streams Server-Sent Events.

    Args:
        model: the provider's model name.
        base_url: the API root.
        api_key: the credential (``None`` for servers that need none).
        http_client: an ``httpx.AsyncClient`` to use (the caller keeps owning
            it); by default the model makes one and closes it in :meth:`aclose`.
        settings: retry, timeout and decoder bounds (default: from the env).
        headers: extra headers sent with every request.
    """

    provider = "http"
    live_emulation = True

    def __init__(
        self,
        model: str,
        *,
        base_url: str,
        api_key: str | None = None,
        http_client: httpx.AsyncClient | None = None,
        settings: Settings | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(model)
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self._client = http_client
        self._owns_client = http_client is None
        self.settings = settings_or_default(settings)
        self.extra_headers = dict(headers or {})

    # -- what an adapter provides -----------------------------------------------------------

    @property
    @abstractmethod
    def url(self) -> str:
        """The endpoint to POST to."""

    @abstractmethod
    def auth_headers(self) -> dict[str, str]:
        """The credential headers."""

    @abstractmethod
    def build_body(self, request: LlmRequest) -> dict[str, Any]:  # raw wire JSON
        """The streaming request body for ``request``."""

    def retry_after_in_body(self, body: bytes) -> float | None:
        """The delay a retryable error's body asks for, when its headers name none.

        A header (``retry-after-ms``, ``Retry-After``) wins. Providers that put the
        delay in the JSON error (Google's ``RetryInfo``) override this.
        """
        return None

    @abstractmethod
    def new_parser(self) -> StreamParser:
        """A fresh parser for one attempt."""

    # -- lifetime ---------------------------------------------------------------------------

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            settings = self.settings
            self._client = httpx.AsyncClient(transport=PooledTransport(
                settings.model_http_pools, settings.model_max_connections))
        return self._client

    async def aclose(self) -> None:
        """Close the HTTP client if this model made it."""
        client, self._client = self._client, None
        if client is not None and self._owns_client:
            await client.aclose()

    async def __aenter__(self) -> HttpStreamingModel:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    def __repr__(self) -> str:  # never shows the key
        return f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r})"

    # -- one model call ---------------------------------------------------------------------

    async def generate_content(
        self, request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        """Stream one model call (the wire always streams; ``stream=False`` yields the final only).

        Raises:
            ModelHTTPError: a non-retryable status, or retryable ones on every attempt.
            ProviderUnavailable: connection failures or in-band errors on every attempt.
            ProviderTruncated: the stream broke after content had arrived.
            ProviderTimeout: the idle or total deadline passed.
            ToolCallAssemblyError: tool-call fragments that do not form a call.
        """
        payload = json.dumps(self.build_body(request), ensure_ascii=False).encode()
        s = self.settings
        loop = asyncio.get_running_loop()
        deadline = loop.time() + s.model_total_timeout
        attempt = 0
        while True:
            attempt += 1
            parser = self.new_parser()
            try:
                async with aclosing(self._attempt(payload, parser, deadline)) as partials:
                    async for partial in partials:
                        if stream:
                            yield partial
            except _Retry as retry:
                if retry.retry_after is not None and retry.retry_after > s.model_retry_after_cap:
                    if isinstance(retry.final, ModelHTTPError):
                        retry.final.retry_after = retry.retry_after
                    self._log_failure(retry.final, attempt, retry.cause)
                    raise retry.final from None
                delay = self._delay(attempt, retry.retry_after)
                if attempt >= s.model_max_attempts or loop.time() + delay >= deadline:
                    self._log_failure(retry.final, attempt, retry.cause)
                    raise retry.final from None
                await asyncio.sleep(delay)
                continue
            except ModelError as exc:
                self._log_failure(exc, attempt)
                raise
            yield parser.finish()
            return

    def _log_failure(self, error: ModelError, attempts: int,
                     cause: BaseException | None = None) -> None:
        """One WARNING line for a failed call: the provider's host, the error (its HTTP
        status, when it has one) and the transport's cause; never a key, never a body
        (bodies go to DEBUG only, redacted)."""
        url = httpx.URL(self.url)
        host = url.host + (f":{url.port}" if url.port is not None else "")
        tried = f" after {attempts} attempts" if attempts > 1 else ""
        why = ""
        if cause is not None:
            text = redact(str(cause)[:_MAX_LOGGED], self._api_key).strip()
            why = f"; cause: {type(cause).__name__}" + (f": {text}" if text else "")
        logger.warning("%s: the call to %s failed (%s)%s: %s%s", self.provider, host,
                       error.code, tried, error, why)

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return retry_after
        return backoff_delay(attempt, self.settings)

    async def _attempt(
        self, payload: bytes, parser: StreamParser, deadline: float
    ) -> AsyncGenerator[LlmResponse, None]:
        """One request: its partials, one per network read (the parser keeps the rest).

        Raises:
            _Retry: a failure before any content that another attempt may fix.
        """
        response = await self._open(payload, deadline)
        try:
            if response.status_code != 200:
                await self._fail_status(response)
            self._check_media_type(response)
            s = self.settings
            decoder = SSEDecoder(s.sse_max_line_chars, s.sse_max_event_chars)
            agg = parser.agg
            reads: AsyncIterator[bytes] | None = response.aiter_bytes()
            loop = asyncio.get_running_loop()
            idle = s.model_idle_timeout
            try:
                while not parser.ended:
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        raise TimeoutError
                    try:
                        assert reads is not None
                        if remaining < idle:
                            async with asyncio.timeout(remaining):
                                chunk = await anext(reads)
                        else:
                            chunk = await anext(reads)
                    except StopAsyncIteration:
                        _feed_last(parser, decoder.flush(dispatch_incomplete=True))
                        reads = None
                        break
                    for event in decoder.feed(chunk):
                        parser.feed(event)
                        if parser.ended:
                            break
                    for partial in agg.take_partials():
                        yield partial
                for partial in agg.take_partials():
                    yield partial
                if reads is not None and parser.complete:
                    await self._read_to_end(reads)
            except (TimeoutError, httpx.TransportError, InBandError) as exc:
                failure = self._read_failure(exc, agg.has_content)
                if failure is exc:
                    raise
                raise failure from None
            if not parser.complete:
                raise self._incomplete(agg.has_content)
        finally:
            await response.aclose()

    def _read_failure(self, exc: BaseException, has_content: bool) -> BaseException:
        """What a failed read of the stream raises: a timeout, a truncated answer, a retry
        (nothing of the answer arrived yet, or the provider said so in-band), or ``exc``."""
        if isinstance(exc, TimeoutError):
            return ProviderTimeout(f"{self.provider}: the call passed its total deadline")
        if isinstance(exc, httpx.ReadTimeout):
            idle = self.settings.model_idle_timeout
            return ProviderTimeout(f"{self.provider}: no data for {idle:g} s (idle timeout)")
        if isinstance(exc, InBandError):
            return _Retry(exc) if exc.retryable else exc
        if isinstance(exc, httpx.TransportError) and has_content:
            return ProviderTruncated(
                f"{self.provider}: {type(exc).__name__} after the first chunk")
        if isinstance(exc, httpx.TransportError):
            return _Retry(ProviderUnavailable(
                f"{self.provider}: {type(exc).__name__} before any content"), cause=exc)
        return exc

    def _incomplete(self, has_content: bool) -> Exception:
        """What a stream that ended without its terminal marker raises."""
        if has_content:
            return ProviderTruncated(
                f"{self.provider}: the stream ended without its terminal marker")
        return _Retry(ProviderUnavailable(
            f"{self.provider}: the stream ended before any content"))

    async def _read_to_end(self, reads: AsyncIterator[bytes]) -> None:
        """After the terminal marker, read the rest of the body (the chunked terminator).

        A response read to its end goes back to the client's pool when closed, so
        the next call reuses the TCP (and TLS) connection; one closed early is
        torn down. Past ``model_drain_bytes`` or ``model_drain_timeout`` the
        connection is given up (closed), never waited on.
        """
        s = self.settings
        seen = 0
        try:
            async with asyncio.timeout(s.model_drain_timeout):
                async for chunk in reads:
                    seen += len(chunk)
                    if seen > s.model_drain_bytes:
                        return
        except (TimeoutError, httpx.HTTPError):
            return

    def _check_media_type(self, response: httpx.Response) -> None:
        """A 200 answer that says it is not an event stream (a proxy's HTML page) is bad at once.

        Raises:
            MalformedChunk: never retried; the same request gets the same page.
        """
        media = response.headers.get("content-type", "").partition(";")[0].strip().lower()
        if media and media != "text/event-stream":
            shown = media if _MEDIA.fullmatch(media) else "unexpected"
            raise MalformedChunk(f"{self.provider}: a 200 answer of type {shown}, "
                                 "not an event stream")

    async def _open(self, payload: bytes, deadline: float) -> httpx.Response:
        s = self.settings
        client = self._http()
        request = client.build_request(
            "POST", self.url, content=payload,
            headers={"content-type": "application/json", "accept": "text/event-stream",
                     **self.auth_headers(), **self.extra_headers},
            timeout=httpx.Timeout(s.model_idle_timeout, connect=s.model_connect_timeout),
        )
        try:
            async with asyncio.timeout_at(deadline):
                return await client.send(request, stream=True)
        except TimeoutError:
            raise ProviderTimeout(f"{self.provider}: no response before the deadline") from None
        except httpx.TimeoutException as exc:
            raise _Retry(ProviderUnavailable(
                f"{self.provider}: {type(exc).__name__} while connecting"), cause=exc) from None
        except httpx.TransportError as exc:
            raise _Retry(ProviderUnavailable(
                f"{self.provider}: {type(exc).__name__} before the response"),
                cause=exc) from None

    async def _fail_status(self, response: httpx.Response) -> None:
        body = b""
        try:
            async for chunk in response.aiter_raw():
                body += chunk
                if len(body) > _MAX_ERROR_BODY:
                    break
        except httpx.HTTPError:
            pass
        status = response.status_code
        retryable = is_retryable_status(status, response.headers)
        if logger.isEnabledFor(logging.DEBUG):
            text = body[:_MAX_LOGGED].decode("utf-8", errors="replace")
            logger.debug("%s: HTTP %s, body: %s", self.provider, status,
                         redact(text, self._api_key))
        error = ModelHTTPError(f"{self.provider}: HTTP {status}{_error_kind(body)}",
                               status_code=status, retryable=retryable)
        if retryable:
            delay = retry_after_seconds(response.headers)
            raise _Retry(error, self.retry_after_in_body(body) if delay is None else delay)
        raise error


def _feed_last(parser: StreamParser, events: list[ServerSentEvent]) -> None:
    """The events flushed at the end of the body; a malformed last one was cut short."""
    for event in events:
        try:
            parser.feed(event)
        except MalformedChunk:
            return  # the terminal-marker check decides between truncated and retry


_MEDIA = re.compile(r"[a-z0-9.+-]{1,40}/[a-z0-9.+-]{1,60}")
_KIND = re.compile(r"[a-z_]{1,64}")


def _error_kind(body: bytes) -> str:
    """The provider's error type when it is a plain identifier (``rate_limit_error``), else ""."""
    try:
        data = json.loads(body)
    except ValueError:
        return ""
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        kind = error.get("type") or error.get("code")
        if isinstance(kind, str) and _KIND.fullmatch(kind):
            return f" ({kind})"
    return ""
