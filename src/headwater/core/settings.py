"""Every bound in one place; each is an env var ``HEADWATER_<NAME>``.

Settings are passed in, never fetched: docs/architecture.md, "Settings".
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Operator-tunable bounds with sane defaults.

    Attributes:
        database_url: the default session store.
        database_auto_migrate: a SQL session store brings its database to the
            schema's newest revision when it first connects (Alembic; an
            empty database gets its tables, one made by an earlier version is
            upgraded in place). Off: the store only checks the database is
            there and fails with ``SessionError`` otherwise (deployments that
            run ``headwater db upgrade`` as a step of their own).
        sqlite_synchronous: ``NORMAL`` survives a process crash and may lose the
            last commits on power loss; ``FULL`` does not.
        sqlite_busy_timeout_ms: how long a writer waits for SQLite's lock.
        sqlite_write_queue_size: writes waiting for a SQLite database's writer
            thread; past it, a writer waits up to ``sqlite_queue_timeout``.
        sqlite_queue_timeout: seconds a write waits for room in a full write
            queue before ``SessionError`` (``store_unavailable``).
        sqlite_write_batch_size: most writes committed in one SQLite
            transaction (group commit; each stays all-or-nothing for its caller).
        sqlite_inline_writes: run a write whole on the caller's thread when
            the writer thread is idle and the database's lock is free at once,
            saving two thread hand-overs (~0.1-0.2 ms on a VM); never with
            ``sqlite_synchronous`` ``FULL``/``EXTRA`` nor ``sqlite_checkpoint_every``
            0 (the commit, or SQLite's checkpoint in it, would wait for the disk
            on the event loop).
        sqlite_readers: reader connections (and threads) per SQLite database.
        sqlite_checkpoint_every: writes between WAL checkpoints, which a reader
            thread runs without the write lock; 0 leaves checkpoints to SQLite,
            inside an unlucky commit.
        session_cache_size: sessions whose parsed events a SQL store keeps, so
            ``get_session`` reads only what is new, and whose call ledger a
            runner keeps between runs (least recently used go first; 0 turns the
            store's cache off).
        session_lease_ttl: seconds a session lease lasts unless renewed (the
            runner renews it while a run goes on). A SQL store records the
            lease's holder (host name, pid, process start; three nullable
            ``hw_leases`` columns, migration 0002): a
            holder that is a process of this host and has provably ended
            (``kill -9``, a crash) is taken over at once; a holder on another
            host, or one this host cannot judge, keeps the lease until it
            expires.
        lease_poll_interval: seconds between attempts of ``acquire_lease(wait=…)``
            (doubling, at most 0.5 s, never past the wait).
        max_parallel_tools: tool calls of one model turn running at once.
        sync_tool_workers: threads that run sync tools, in a pool of their own
            (never the event loop's default executor, which resolves names for
            the HTTP client). A sync tool that outlives its timeout keeps its
            thread until it returns; past this many, sync tools wait (and time
            out) instead of starving the process.
        max_tool_args_bytes: largest JSON arguments a tool call may carry; a
            larger call gets an ``invalid_arguments`` result and does not run.
        long_running_ttl: seconds a long-running call's ticket waits for its
            result; after that the next run gives it an ``expired`` result.
        tool_timeout: seconds a tool call may run before it gets a ``timeout``
            result (a tool's own ``timeout`` wins).
        mcp_call_timeout: seconds an MCP server may take to answer one tool call
            (``McpToolset``); past it the call ends with a ``timeout`` result and
            the server is sent ``notifications/cancelled``.
        mcp_connect_timeout: seconds to start (stdio) or reach (HTTP) an MCP
            server, its handshake and the listing of its tools included; past it,
            ``mcp_unavailable``.
        mcp_progress_interval: served agents (``headwater mcp``, the gateway's
            ``/mcp``): the least seconds between two progress notifications
            carrying the answer so far (the latest wins; one always goes before
            the result).
        mcp_session_idle_timeout, mcp_max_sessions: the gateway's ``/mcp``: seconds
            an MCP session (2025 revisions) lives with no request in flight, and
            how many may be open at once (past it, 503 for a new one).
        session_lock_timeout: seconds a run waits for another run (of any runner
            or process) holding the same session before ``SessionBusyError``
            (default 1 s: time for a run that is closing to finish its cleanup;
            0 refuses at once).
        max_result_bytes: largest JSON tool result sent to a model; longer ones
            are truncated with a marker (large results are serialised and cut
            off the event loop).
        model_max_attempts: attempts of one model call, first included; retries
            happen only before the first content chunk.
        model_backoff_initial, model_backoff_max: exponential backoff between
            attempts, in seconds (each delay drawn from ``[0.75 c, c]``).
        model_retry_after_cap: the longest ``Retry-After`` waited for, in
            seconds; a longer one ends the call at once with a retryable error
            that carries the delay (``ModelHTTPError.retry_after``).
        model_max_connections, model_http_pools: a model's default HTTP client
            holds at most this many provider connections (concurrent model
            calls past it wait), spread over this many small pools (httpx's pool
            bookkeeping grows with its size).
        model_connect_timeout: seconds to open a provider connection.
        model_idle_timeout: seconds without a byte from the provider before the
            call fails with ``provider_timeout``.
        model_total_timeout: deadline of one model call, all attempts included.
        model_drain_timeout, model_drain_bytes: after a stream's terminal
            marker, how long and how much the adapter reads to the end of the
            body so the connection can be reused (past either, it is closed).
        sse_max_line_chars, sse_max_event_chars: bounds of the SSE decoder (provider
            streams, and the gateway's as ``headwater chat`` reads them).
        anthropic_max_tokens: ``max_tokens`` sent to Anthropic when the agent's
            ``generate_config`` sets none (the API requires one).
        max_output_chars: most characters (answer and thought text) one model
            call may stream; past it the call ends with an ``error``
            ``budget_exceeded`` event and nothing of it is stored (so what a
            stopped call keeps as ``interrupted`` text is bounded by it too).
        max_progress_events, max_progress_bytes: progress events (and their
            delta bytes) one streaming tool call may send the caller; past either
            bound, later ones are coalesced (the latest wins, sent when the call
            ends, with a count of those it replaced).
        live_stop_timeout: seconds a stopped live stream (or a torn-down live
            run) is given to run its cleanup.
        live_input_queue_size: requests waiting in one input-stream tool's queue.
        heartbeat_interval: seconds between SSE heartbeat comments on an idle stream.
        send_timeout: seconds the gateway waits for a client to take a frame;
            a client that stops reading longer is disconnected (and its run
            cancelled unless resumable).
        detached_ttl: seconds a resumable run goes on with nobody following it.
        run_retention: seconds an ended run's frames stay readable
            (``GET /runs/{id}/stream``).
        run_log_max_frames: frames one run may write to its run log; past it the
            run stops with ``budget_exceeded``.
        max_streams_per_user: SSE streams one user may hold open at once; past
            it, ``429 too_many_streams``.
        max_runs_per_user: runs one user may start per ``run_rate_window``
            (counted over every replica with ``redis_url``); past it, ``429
            rate_limited`` with ``Retry-After`` until the window ends; 0: no limit.
        run_rate_window: seconds of one window of ``max_runs_per_user`` (fixed
            windows, aligned to the clock).
        max_body_bytes: largest request body the gateway reads (413 past it).
        max_message_chars: most characters of text one user message may carry,
            on every surface that takes one (typed runs, AG-UI, Vercel, the live
            WebSocket); past it the gateway answers 413 ``payload_too_large``
            (an ``error`` notice on the WebSocket), stores nothing and calls no
            model.
        rate_limit_per_minute, rate_limit_burst: requests one user may make
            to the gateway (every authenticated HTTP route and WebSocket
            opening): a token bucket of ``rate_limit_burst`` requests, refilled
            at ``rate_limit_per_minute``; past it, 429 ``rate_limited`` with
            ``Retry-After``.
        body_read_timeout: seconds a client may take to send its request body (408).
        shutdown_grace: seconds open streams get to end when the server stops.
        ready_timeout: seconds ``GET /readyz`` waits for the session store (and
            Redis, with ``redis_url``) to answer; past it, 503.
        worker_healthcheck_timeout: seconds a ``headwater serve --workers`` worker
            has to answer its supervisor's health check (uvicorn's
            ``timeout_worker_healthcheck``), while it starts too; one that does
            not is killed and replaced, so it covers a worker's start on a busy host.
        header_timeout: seconds a connection has to send a whole request head
            (request line and headers), from when it opens or its previous
            response ended; past it the server closes it (slow-header clients).
        max_connections: connections ``headwater serve`` holds open at once
            (HTTP and WebSocket); one more is answered 503 and closed at once.
            Keep it under the process's file-descriptor limit (``ulimit -n``)
            less what the app itself opens (store, provider connections).
        cors_origins: origins (``scheme://host[:port]``) whose pages may call
            the gateway from a browser: their CORS preflights are answered and
            their WebSockets (and, in dev mode, their requests) taken. Empty:
            none. Env: a JSON list.
        redis_url: a Redis server (``redis://host:6379/0``) shared by the gateway's
            replicas; when set, ``create_app`` keeps resumable runs' frames in
            Redis Streams and knows runs, stream counts and cancels across
            replicas (needs ``headwater[redis]``); ``None``: all in this process.
        redis_key_prefix: the prefix of every Redis key and channel the gateway
            uses (several deployments can share one Redis).
        redis_run_ttl: seconds a running run's frames stay in Redis after its
            replica last wrote or renewed them (a safety net; renewed by every
            batch of its frames, and every third of it while the run is quiet).
        redis_ended_ttl: seconds an ended run's frames and record stay in Redis
            after its terminal frame unless the replica that ran it forgets it
            first (after ``run_retention``); keep it above ``run_retention``.
        redis_liveness_ttl: seconds a replica's runs (as other replicas see
            them) and its open streams (as the per-user count sees them) last
            unless it renews them, which it does every third of this; a dead
            replica's runs and streams age out after it.
        redis_max_connections: Redis connections one replica holds at most in
            each of its pools (commands; followers of a run waiting for frames,
            each of which holds one).
        redis_pool_timeout: seconds a Redis command waits for a free connection
            before failing.
        redis_timeout: seconds to connect to Redis and for it to answer a
            command (a follower's blocking read waits ``heartbeat_interval``
            more). Past it, or when Redis refuses, a request that needs Redis
            answers 503 ``run_store_unavailable`` and a stream following a run
            ends with that error; the next request tries Redis again.
        redis_batch_window_ms: milliseconds a replica gathers its runs' frames
            (and run logs opened) before sending them to Redis in one call; 0:
            one event-loop turn. While a call is on its way the next batch
            gathers too. Followers on the run's own replica read its frames in
            process and never wait for it; followers on other replicas see a
            frame up to this much later (docs/frame-protocol.md, "Resumable runs
            across replicas").
        gc_freeze: the gateway moves everything alive at startup out of the
            garbage collector's passes (``gc.freeze()``), so full collections
            scan only what runs allocate (shorter event-loop stalls).
        gc_thresholds: the collector's thresholds the gateway sets at startup
            (``gc.set_threshold``; ``None`` leaves them). The default makes young
            collections rarer and full ones about a hundred times rarer than
            Python's (700, 10, 10): with a thousand open streams a full pass
            scans hundreds of thousands of objects and stalls every stream.
        max_page_size: most items one page of ``GET /sessions`` or
            ``/sessions/{id}/events`` holds (the default page is 50 or fewer).
        session_title_chars: most characters of a session's ``title`` (its
            first message) in the gateway's session answers; a longer one is
            cut and ends with "…".
        ws_max_message_bytes: largest message a live WebSocket (``WS /live``)
            takes, in bytes; a larger one closes the socket with 1009.
        ws_messages_per_second: messages a live WebSocket may send per second
            (a bucket of as many, refilled continuously); past it a message is
            dropped with an ``error`` ``rate_limited`` notice and the socket stays open.
        ws_auth_timeout: seconds a live WebSocket without a token in its
            ``Sec-WebSocket-Protocol`` header has to send its ``auth`` message
            (closed with 1008 after that).
        model: the model string the command-line agents run on
            (``headwater demo``, ``headwater run --model``'s default), e.g.
            ``openai:gpt-4o-mini``; ``None``: the offline demo model.
        demo_word_delay: seconds the offline ``DemoModel`` waits before each
            word it streams (a human reading pace; tests set 0).
        ws_queue_size: requests of a live WebSocket waiting for the run
            (``LiveRequestQueue`` bound; past it realtime media drops the
            oldest, other messages get ``rate_limited``).
        live_connect_timeout: seconds to open a native live connection's
            WebSocket (Gemini Live, OpenAI Realtime), handshake included.
        live_setup_timeout: seconds a native live connection waits for the
            provider to accept its session setup (``setupComplete``,
            ``session.updated``).
        live_idle_timeout: seconds without a message from the provider while a
            model turn is in progress before the turn fails with
            ``provider_timeout`` (a quiet connection between turns never times out).
        live_max_message_bytes: largest message a native live connection takes
            from the provider (audio chunks included).
        live_close_timeout: seconds the WebSocket closing handshake may take.
        live_go_away_margin: seconds before a ``goAway`` deadline at which a
            native live connection moves to its resumed session even with a
            model turn in progress (that turn ends ``interrupted``).
        otel_capture_content: put prompts, completions and tool arguments and
            results in the OpenTelemetry spans (``gen_ai.input.messages``,
            ``gen_ai.output.messages``, ``gen_ai.tool.call.arguments``/``result``);
            off, no span holds payload text (docs/observability.md).
        inspect_runs: runs per session whose trace the gateway keeps for the run
            inspector (``GET /runs/{id}/trace``, the page's Inspect drawer,
            docs/inspector.md); the oldest goes when a newer run ends. 0: no
            trace is recorded at all.
        inspect_payloads: the inspector's traces also keep what each model call
            was sent and answered and each tool call's arguments and result
            (``?payloads=1``; credentials and arguments a tool marks secret are
            never kept). ``None``: on in dev mode (no authenticator: ``headwater
            demo``, ``serve`` without auth), off otherwise.
        inspect_max_spans: spans one run's trace keeps at most; past it they
            are counted (``dropped``) and not kept.
        inspect_sessions: sessions whose traces one gateway process keeps in
            memory (the least recently used goes first); with ``redis_url`` the
            traces are in Redis instead, for ``inspect_ttl``.
        inspect_ttl: seconds a trace stays in Redis after its run ended.
        inspect_live_interval: with ``redis_url``, seconds between the snapshots of
            a running run's trace written to Redis, so another replica shows it
            while it runs (0: only once it has ended).
        auth_tokens: the bearer tokens ``headwater serve`` gives an agent target
            (``StaticTokenAuth``): ``token=user`` pairs separated by commas or
            whitespace, or the path of a file of them (one a line, ``#``
            comments). ``None``: no static tokens.
        jwt_key, jwt_key_file: the key ``headwater serve`` checks JSON Web
            Tokens with (``JWTAuth``): an HMAC secret or a PEM public key, or
            the file holding it; needs ``jwt_algorithms``.
        jwt_algorithms: the JWT algorithms accepted, separated by commas
            (``HS256``, ``RS256,ES256``; never ``none``).
        jwt_audience, jwt_issuer: the ``aud`` and ``iss`` a JWT must carry
            (``None``: a token with an ``aud`` is refused; ``iss`` is not checked).
        jwt_user_claim: the JWT claim holding the user id.
        jwt_leeway: seconds of clock skew allowed on ``exp``, ``nbf`` and ``iat``.
    """

    model_config = SettingsConfigDict(env_prefix="HEADWATER_", extra="ignore",
                                      protected_namespaces=())

    database_url: str = "sqlite:///.headwater/sessions.db"
    database_auto_migrate: bool = True
    sqlite_synchronous: Literal["OFF", "NORMAL", "FULL", "EXTRA"] = "NORMAL"
    sqlite_busy_timeout_ms: int = Field(default=5000, ge=0)
    sqlite_write_queue_size: int = Field(default=10_000, ge=1)
    sqlite_queue_timeout: float = Field(default=10.0, ge=0)
    sqlite_write_batch_size: int = Field(default=32, ge=1)
    sqlite_inline_writes: bool = True
    sqlite_readers: int = Field(default=4, ge=1)
    sqlite_checkpoint_every: int = Field(default=500, ge=0)
    session_cache_size: int = Field(default=256, ge=0)
    session_lease_ttl: float = Field(default=30.0, gt=0)
    lease_poll_interval: float = Field(default=0.05, gt=0)
    max_parallel_tools: int = Field(default=8, ge=1)
    sync_tool_workers: int = Field(default=32, ge=1)
    max_tool_args_bytes: int = Field(default=256 * 1024, ge=2)
    long_running_ttl: float = Field(default=7 * 24 * 3600.0, gt=0)
    tool_timeout: float = Field(default=300.0, gt=0)
    mcp_call_timeout: float = Field(default=300.0, gt=0)
    mcp_connect_timeout: float = Field(default=30.0, gt=0)
    mcp_progress_interval: float = Field(default=0.1, ge=0)
    mcp_session_idle_timeout: float = Field(default=1800.0, gt=0)
    mcp_max_sessions: int = Field(default=1000, ge=1)
    session_lock_timeout: float = Field(default=1.0, ge=0)
    max_result_bytes: int = Field(default=100_000, ge=256)
    model_max_attempts: int = Field(default=3, ge=1)
    model_backoff_initial: float = Field(default=0.5, ge=0)
    model_backoff_max: float = Field(default=8.0, ge=0)
    model_retry_after_cap: float = Field(default=30.0, ge=0)
    model_max_connections: int = Field(default=1024, ge=1)
    model_http_pools: int = Field(default=64, ge=1)
    model_connect_timeout: float = Field(default=10.0, gt=0)
    model_idle_timeout: float = Field(default=60.0, gt=0)
    model_total_timeout: float = Field(default=600.0, gt=0)
    model_drain_timeout: float = Field(default=1.0, ge=0)
    model_drain_bytes: int = Field(default=64 * 1024, ge=0)
    sse_max_line_chars: int = Field(default=1 << 20, ge=1024)
    sse_max_event_chars: int = Field(default=8 << 20, ge=1024)
    anthropic_max_tokens: int = Field(default=4096, ge=1)
    max_output_chars: int = Field(default=1_000_000, ge=1)
    max_progress_events: int = Field(default=1000, ge=0)
    max_progress_bytes: int = Field(default=1 << 20, ge=0)
    live_stop_timeout: float = Field(default=1.0, gt=0)
    live_input_queue_size: int = Field(default=64, ge=1)
    heartbeat_interval: float = Field(default=15.0, gt=0)
    send_timeout: float = Field(default=10.0, gt=0)
    detached_ttl: float = Field(default=300.0, gt=0)
    run_retention: float = Field(default=60.0, ge=0)
    run_log_max_frames: int = Field(default=100_000, ge=1)
    max_streams_per_user: int = Field(default=8, ge=1)
    max_runs_per_user: int = Field(default=0, ge=0)
    run_rate_window: float = Field(default=60.0, gt=0)
    max_body_bytes: int = Field(default=1 << 20, ge=1024)
    max_message_chars: int = Field(default=100_000, ge=1)
    rate_limit_per_minute: float = Field(default=600.0, gt=0)
    rate_limit_burst: int = Field(default=120, ge=1)
    body_read_timeout: float = Field(default=10.0, gt=0)
    shutdown_grace: float = Field(default=10.0, ge=0)
    ready_timeout: float = Field(default=5.0, gt=0)
    worker_healthcheck_timeout: float = Field(default=30.0, gt=0)
    header_timeout: float = Field(default=10.0, gt=0)
    max_connections: int = Field(default=1000, ge=1)
    cors_origins: list[str] = Field(default_factory=list)
    redis_url: str | None = None
    redis_key_prefix: str = "headwater:"
    redis_run_ttl: float = Field(default=3600.0, gt=0)
    redis_ended_ttl: float = Field(default=300.0, gt=0)
    redis_liveness_ttl: float = Field(default=30.0, gt=0)
    redis_max_connections: int = Field(default=2048, ge=2)
    redis_pool_timeout: float = Field(default=10.0, gt=0)
    redis_timeout: float = Field(default=5.0, gt=0)
    redis_batch_window_ms: float = Field(default=2.0, ge=0, le=1000)
    max_page_size: int = Field(default=200, ge=1)
    session_title_chars: int = Field(default=80, ge=2)
    gc_freeze: bool = True
    gc_thresholds: tuple[int, int, int] | None = (10_000, 10, 1_000)
    ws_max_message_bytes: int = Field(default=1 << 20, ge=1024)
    ws_messages_per_second: float = Field(default=50.0, gt=0)
    ws_auth_timeout: float = Field(default=10.0, gt=0)
    ws_queue_size: int = Field(default=256, ge=1)
    model: str | None = None
    demo_word_delay: float = Field(default=0.03, ge=0)
    live_connect_timeout: float = Field(default=10.0, gt=0)
    live_setup_timeout: float = Field(default=10.0, gt=0)
    live_idle_timeout: float = Field(default=60.0, gt=0)
    live_max_message_bytes: int = Field(default=16 << 20, ge=1024)
    live_close_timeout: float = Field(default=2.0, gt=0)
    live_go_away_margin: float = Field(default=1.0, ge=0)
    otel_capture_content: bool = False
    inspect_runs: int = Field(default=20, ge=0)
    inspect_payloads: bool | None = None
    inspect_max_spans: int = Field(default=2000, ge=1)
    inspect_sessions: int = Field(default=1000, ge=1)
    inspect_ttl: float = Field(default=86400.0, gt=0)
    inspect_live_interval: float = Field(default=1.0, ge=0)
    auth_tokens: SecretStr | None = None
    jwt_key: SecretStr | None = None
    jwt_key_file: str | None = None
    jwt_algorithms: str | None = None
    jwt_audience: str | None = None
    jwt_issuer: str | None = None
    jwt_user_claim: str = "sub"
    jwt_leeway: float = Field(default=0.0, ge=0)


_settings: Settings | None = None


def get_settings() -> Settings:
    """The process-wide settings, read from the environment once.

    Only the entry points call it (the command line, ``headwater.gateway.serve``,
    the examples' console): everything below is given its settings, and a
    constructor given none takes these through :func:`settings_or_default`
    (docs/architecture.md, "Settings"; ``tests/test_layering.py`` checks it).
    """
    global _settings
    if _settings is None:
        _settings = Settings()
    return _settings


def settings_or_default(settings: Settings | None) -> Settings:
    """``settings``, or the process-wide ones (:func:`get_settings`) when the caller gave none.

    The one default path of library code: a constructor (``Runner``,
    ``create_app``, a store, a model adapter, a run log) calls it once with the
    ``settings`` it was passed and keeps the answer; nothing below fetches
    settings on its own.
    """
    return settings if settings is not None else get_settings()


def reload_settings() -> Settings:
    """Read the environment again (after ``HEADWATER_*`` variables changed): the new
    process-wide settings, which later ``get_settings()`` calls return."""
    global _settings
    _settings = Settings()
    return _settings
