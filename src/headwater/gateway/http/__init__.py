"""HTTP around the gateway's surfaces: who calls, how much, and what an error looks like.

It owns authentication (``auth``: bearer tokens, JWTs, the loopback dev user),
the ``Host``/``Origin`` guard (``origins``), the request bounds (``limits``) and
per-user rate (``ratelimit``), the one error envelope (``problems``), the
caller's ``traceparent`` (``tracing``), the uvicorn protocols with their bounds
(``connections``), the log redaction (``logs``) and the SSE response that writes
a run's frames, with its heartbeat and stall watch (``responses``). It may import
the bottom layer, web frameworks, ``gateway.wire`` and itself — nothing of
``gateway.runs`` or the surfaces at the gateway's root.
"""
