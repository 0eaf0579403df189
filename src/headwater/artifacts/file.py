"""``FileArtifactService``: artifacts as files under one root directory.

Layout::

    root/<app>/<user>/<session>/<filename>/<version>        the bytes
    root/<app>/<user>/<session>/<filename>/<version>.json   MIME type, text or not
    root/<app>/<user>/user/<"user:…" filename>/…            the user's artifacts

Each component is percent-quoted (``urllib.parse.quote(..., safe="")``), so
no id or filename can name a parent directory or a path separator. A quoted
component longer than 255 characters is replaced by ``+`` and its SHA-256
(``+`` is never left unquoted, so it collides with no quoted name). A session
whose id is ``user`` is stored as ``%75ser`` so it cannot meet the user's
scope. Entries starting with ``!`` are temporary files and deleted trees.

A version is committed by its sidecar: the bytes are written to a temporary
file, ``os.replace``-d over a placeholder claimed with ``O_EXCL`` (which makes
concurrent saves take distinct versions, across processes too), and the
sidecar is written the same way last. A version without a sidecar (a crash
mid-save) is never listed, loaded or reused. Saving, loading and deleting work
through a descriptor of the artifact's directory, so a delete running
alongside them never mixes the versions of the deleted artifact with those of
a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, unquote

from pydantic import BaseModel, ConfigDict

from ..core.errors import UserError
from .base import DEFAULT_MAX_ARTIFACT_BYTES, ArtifactKey, ArtifactPayload, BaseArtifactService

_USER_SCOPE_DIR = "user"
_SESSION_NAMED_USER = "%75ser"  # "user" quoted by hand: quote() never writes %75
_HASHED = "+"
_TEMPORARY = "!"
_MAX_COMPONENT = 255  # NAME_MAX of common file systems; quoted names are ASCII
_VERSION = re.compile(r"0|[1-9][0-9]*")
_SIDECAR = re.compile(r"(0|[1-9][0-9]*)\.json")
_SAVE_ATTEMPTS = 5  # a save retries only when a concurrent delete removed its directory
_REMOVE_ATTEMPTS = 3  # a save still writing into a deleted tree can make rmtree fail


class _Sidecar(BaseModel):
    """What a version's ``<version>.json`` holds."""

    model_config = ConfigDict(frozen=True)

    filename: str  # quoted, so the JSON stays ASCII whatever the name
    mime_type: str
    is_text: bool
    size: int


class FileArtifactService(BaseArtifactService):
    """Keeps artifacts as files under ``root``; they survive the process.

    Any number of instances, in any number of processes, may share a root:
    each sees what the others committed. File I/O runs in worker threads
    (``asyncio.to_thread``); a save cancelled while its thread runs may still
    store its version. Each file is ``fsync``-ed before it is renamed into
    place, so a crash leaves a version whole or invisible, never torn.

    Needs a POSIX system (it works through directory descriptors). On a
    case-insensitive file system, filenames differing only in case share
    their versions.

    Args:
        root: the directory to store under; created on the first save. A
            relative path is fixed against the current directory now.
        max_bytes: the largest artifact accepted (default 64 MiB).

    Raises:
        NotImplementedError: the platform has no ``dir_fd`` support.
    """

    def __init__(self, root: str | Path, *, max_bytes: int = DEFAULT_MAX_ARTIFACT_BYTES) -> None:
        super().__init__(max_bytes=max_bytes)
        needed = {os.open, os.rename, os.unlink}  # os.replace shares os.rename's support
        if not needed <= os.supports_dir_fd or os.listdir not in os.supports_fd:
            raise NotImplementedError("FileArtifactService needs dir_fd support (POSIX)")
        self.root = Path(root).absolute()

    async def _save(self, key: ArtifactKey, payload: ArtifactPayload) -> int:
        return await asyncio.to_thread(self._save_sync, key, payload)

    async def _load(self, key: ArtifactKey, version: int | None) -> ArtifactPayload | None:
        return await asyncio.to_thread(self._load_sync, key, version)

    async def _keys(self, app_name: str, user_id: str, session_id: str) -> list[str]:
        return await asyncio.to_thread(self._keys_sync, app_name, user_id, session_id)

    async def _versions(self, key: ArtifactKey) -> list[int]:
        return await asyncio.to_thread(self._versions_sync, key)

    async def _delete(self, key: ArtifactKey) -> None:
        await asyncio.to_thread(self._delete_sync, key)

    def _scope_dir(self, app_name: str, user_id: str, session_id: str | None) -> Path:
        if session_id is None:
            scope = _USER_SCOPE_DIR
        else:
            scope = _component(session_id)
            scope = _SESSION_NAMED_USER if scope == _USER_SCOPE_DIR else scope
        return self.root / _component(app_name) / _component(user_id) / scope

    def _key_dir(self, key: ArtifactKey) -> Path:
        session_id = None if key.user_scoped else key.session_id
        return self._scope_dir(key.app_name, key.user_id, session_id) / _component(key.filename)

    def _save_sync(self, key: ArtifactKey, payload: ArtifactPayload) -> int:
        directory = self._key_dir(key)
        sidecar = _Sidecar(filename=_quote(key.filename), mime_type=payload.mime_type,
                           is_text=payload.is_text, size=len(payload.data))
        for attempt in range(_SAVE_ATTEMPTS):
            try:
                directory.mkdir(parents=True, exist_ok=True)
                with _open_dir(directory) as dfd:
                    version = _claim(dfd)
                    _write_atomic(dfd, str(version), payload.data)
                    _write_atomic(dfd, f"{version}.json", _encode(sidecar))
                    os.fsync(dfd)
                    return version
            except (FileNotFoundError, FileExistsError):
                # mkdir(exist_ok=True) raises FileExistsError when the directory it
                # found is renamed away by a delete before it checks it.
                if attempt == _SAVE_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    def _load_sync(self, key: ArtifactKey, version: int | None) -> ArtifactPayload | None:
        try:
            with _open_dir(self._key_dir(key)) as dfd:
                if version is None:
                    version = max(_committed(dfd), default=None)
                    if version is None:
                        return None
                sidecar = _decode(_read_at(dfd, f"{version}.json"))
                data = _read_at(dfd, str(version))
        except FileNotFoundError:
            return None
        return ArtifactPayload(data=data, mime_type=sidecar.mime_type, is_text=sidecar.is_text)

    def _keys_sync(self, app_name: str, user_id: str, session_id: str) -> list[str]:
        found: list[str] = []
        for session in (session_id, None):
            scope = self._scope_dir(app_name, user_id, session)
            with contextlib.suppress(FileNotFoundError):
                found.extend(_names_in(scope))
        return found

    def _versions_sync(self, key: ArtifactKey) -> list[int]:
        try:
            with _open_dir(self._key_dir(key)) as dfd:
                return _committed(dfd)
        except FileNotFoundError:
            return []

    def _delete_sync(self, key: ArtifactKey) -> None:
        directory = self._key_dir(key)
        # A rename is atomic: readers and savers see the old tree or none, and the
        # next save starts a fresh directory at version 0.
        tomb = directory.with_name(f"{_TEMPORARY}deleted-{secrets.token_hex(8)}")
        try:
            directory.rename(tomb)
        except FileNotFoundError:
            return
        for _ in range(_REMOVE_ATTEMPTS):
            shutil.rmtree(tomb, ignore_errors=True)
            if not tomb.exists():
                return


def _quote(value: str) -> str:
    return quote(value, safe="", errors="surrogatepass")


def _component(value: str) -> str:
    quoted = _quote(value)
    if quoted in ("", ".", ".."):  # the base class refuses these; never build such a path
        raise UserError(f"{value!r} cannot be a path component")
    if len(quoted) > _MAX_COMPONENT:
        return _HASHED + hashlib.sha256(quoted.encode("ascii")).hexdigest()
    return quoted


@contextlib.contextmanager
def _open_dir(path: Path) -> Iterator[int]:
    dfd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield dfd
    finally:
        os.close(dfd)


def _committed(dfd: int) -> list[int]:
    return [int(m[1]) for name in os.listdir(dfd) if (m := _SIDECAR.fullmatch(name))]


def _claim(dfd: int) -> int:
    """Create an empty placeholder for the next free version with ``O_EXCL``; return it."""
    names = os.listdir(dfd)
    version = max((int(n) for n in names if _VERSION.fullmatch(n)), default=-1) + 1
    while True:
        try:
            fd = os.open(str(version), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=dfd)
        except FileExistsError:
            version += 1
            continue
        os.close(fd)
        return version


def _write_atomic(dfd: int, name: str, data: bytes) -> None:
    temporary = f"{_TEMPORARY}tmp-{secrets.token_hex(8)}"
    try:
        with open(temporary, "xb", opener=lambda p, f: os.open(p, f, 0o644, dir_fd=dfd)) as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=dfd)
        raise


def _read_at(dfd: int, name: str) -> bytes:
    with open(name, "rb", opener=lambda p, f: os.open(p, f, dir_fd=dfd)) as source:
        return source.read()


def _encode(sidecar: _Sidecar) -> bytes:
    # json.dumps escapes lone surrogates a MIME type may hold; pydantic would refuse them.
    return json.dumps(sidecar.model_dump()).encode("ascii")


def _decode(raw: bytes) -> _Sidecar:
    return _Sidecar.model_validate(json.loads(raw))


def _names_in(scope: Path) -> Iterator[str]:
    """The filenames with at least one committed version in a scope directory."""
    for entry in os.listdir(scope):
        if entry.startswith(_TEMPORARY):
            continue
        try:
            with _open_dir(scope / entry) as dfd:
                latest = max(_committed(dfd), default=None)
                if latest is None:
                    continue
                if not entry.startswith(_HASHED):
                    yield unquote(entry, errors="surrogatepass")
                    continue
                yield unquote(_decode(_read_at(dfd, f"{latest}.json")).filename,
                              errors="surrogatepass")
        except FileNotFoundError:
            continue  # deleted while listing
