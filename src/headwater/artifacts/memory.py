"""``InMemoryArtifactService``: artifacts in a dict, for tests and one-process demos."""

from __future__ import annotations

from .base import DEFAULT_MAX_ARTIFACT_BYTES, ArtifactKey, ArtifactPayload, BaseArtifactService

# (app_name, user_id, session_id or None for the user's scope)
_Scope = tuple[str, str, str | None]


class InMemoryArtifactService(BaseArtifactService):
    """Keeps artifacts in process memory; everything is lost when the process ends.

    Payloads are immutable and every load builds a fresh part, so neither the
    saved part nor a loaded one can change what is stored. Memory grows with
    every version until it is deleted.

    Args:
        max_bytes: the largest artifact accepted (default 64 MiB).
    """

    def __init__(self, *, max_bytes: int = DEFAULT_MAX_ARTIFACT_BYTES) -> None:
        super().__init__(max_bytes=max_bytes)
        self._scopes: dict[_Scope, dict[str, list[ArtifactPayload]]] = {}

    async def _save(self, key: ArtifactKey, payload: ArtifactPayload) -> int:
        # No await between reading the length and appending: saves cannot interleave.
        versions = self._scopes.setdefault(_scope(key), {}).setdefault(key.filename, [])
        versions.append(payload)
        return len(versions) - 1

    async def _load(self, key: ArtifactKey, version: int | None) -> ArtifactPayload | None:
        versions = self._scopes.get(_scope(key), {}).get(key.filename, [])
        if version is None:
            return versions[-1] if versions else None
        return versions[version] if version < len(versions) else None

    async def _keys(self, app_name: str, user_id: str, session_id: str) -> list[str]:
        own = self._scopes.get((app_name, user_id, session_id), {})
        shared = self._scopes.get((app_name, user_id, None), {})
        return [*own, *shared]

    async def _versions(self, key: ArtifactKey) -> range:
        return range(len(self._scopes.get(_scope(key), {}).get(key.filename, [])))

    async def _delete(self, key: ArtifactKey) -> None:
        scope = _scope(key)
        files = self._scopes.get(scope)
        if files is not None:
            files.pop(key.filename, None)
            if not files:
                del self._scopes[scope]


def _scope(key: ArtifactKey) -> _Scope:
    return (key.app_name, key.user_id, None if key.user_scoped else key.session_id)
