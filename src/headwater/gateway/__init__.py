"""The HTTP gateway: typed SSE runs, history, auth and resumable streams over the runner.

See docs/frame-protocol.md.
"""
