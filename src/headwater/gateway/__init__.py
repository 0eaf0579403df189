"""The HTTP gateway: typed SSE runs, history, auth and resumable streams over the runner.

See docs/frame-protocol.md. The gateway knows events and the runner, never a provider.
"""

from .app import RunRequest, create_app
from .core import Gateway
from .http.auth import Authenticator, JWTAuth, StaticTokenAuth
from .runs.runlog import InMemoryRunLog, RunLog
from .wire.sse import Frame

__all__ = (
    "Authenticator",
    "Frame",
    "Gateway",
    "InMemoryRunLog",
    "JWTAuth",
    "RunLog",
    "RunRequest",
    "StaticTokenAuth",
    "create_app",
)
