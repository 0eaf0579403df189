"""Every bound in one place (CONVENTIONS §12); each is an env var ``HEADWATER_<NAME>``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Operator-tunable bounds with sane defaults.

    Attributes:
        database_url: the default session store.
        sqlite_synchronous: ``NORMAL`` survives a process crash and may lose the
            last commits on power loss; ``FULL`` does not.
        sqlite_busy_timeout_ms: how long a writer waits for SQLite's lock.
        max_parallel_tools: tool calls of one model turn running at once.
        tool_timeout: seconds a tool call may run before it gets a ``timeout``
            result (a tool's own ``timeout`` wins).
        session_lock_timeout: seconds a run waits for another run on the same
            session (in this process) before ``SessionBusyError``.
        max_result_bytes: largest JSON tool result sent to a model; longer ones
            are truncated with a marker.
    """

    model_config = SettingsConfigDict(env_prefix="HEADWATER_", extra="ignore")

    database_url: str = "sqlite+aiosqlite:///.headwater/sessions.db"
    sqlite_synchronous: Literal["OFF", "NORMAL", "FULL", "EXTRA"] = "NORMAL"
    sqlite_busy_timeout_ms: int = Field(default=5000, ge=0)
    max_parallel_tools: int = Field(default=8, ge=1)
    tool_timeout: float = Field(default=300.0, gt=0)
    session_lock_timeout: float = Field(default=10.0, ge=0)
    max_result_bytes: int = Field(default=100_000, ge=256)


_settings: Settings | None = None


def get_settings() -> Settings:
    """The process-wide settings, read from the environment once."""
    global _settings
    if _settings is None:
        _settings = Settings()
    return _settings
