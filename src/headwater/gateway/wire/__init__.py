"""What a client sees on the wire: the typed frames and the formats that carry them.

It owns the one mapping of events to frames (``frames``: what a browser may see of
a run, and the provenance of each frame), the frames' SSE encoding and the run
log's record of them (``sse``), and the two other encodings of the same frames:
AG-UI events (``agui``) and the Vercel AI SDK UI message stream (``vercel``). It
is sans-I/O: it may import the bottom layer (types, events, errors, the SSE
codec), the tools' and sessions' public data (approvals, the call ledger) and
itself — nothing of the gateway's ``runs``, ``http`` or its surfaces, and no web
framework.
"""
