"""The artifact store interface, modelled on Google ADK's artifact service.

An artifact is a named, versioned blob or text that a run saves next to its
session: a generated report, an uploaded image. Every save of a filename adds
a version (0, 1, 2, …); loading without a version gives the latest.

A filename that starts with ``"user:"`` is scoped to the user: every session
of that user in the app sees it. Any other filename belongs to its session.

Validation lives here, once, so every store refuses the same input with the
same :class:`~headwater.errors.UserError`; stores implement the ``_save``,
``_load``, ``_keys``, ``_versions`` and ``_delete`` hooks and receive only
checked keys and normalised payloads.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from ..core.errors import UserError
from ..core.types import Blob, Part

USER_SCOPE_PREFIX: Final = "user:"
"""A filename with this prefix is shared by all sessions of its user in the app."""

DEFAULT_MAX_ARTIFACT_BYTES: Final = 64 * 1024 * 1024
"""The default ``max_bytes`` of a store (64 MiB).

A constructor default rather than a setting for now; pass ``max_bytes`` to
change it per store.
"""

TEXT_MIME_TYPE: Final = "text/plain; charset=utf-8"
"""The MIME type recorded for an artifact saved from a text part."""

MAX_FILENAME_CHARS: Final = 255
"""The longest artifact filename, ``"user:"`` prefix included."""

_ACCEPTED = (
    "an artifact is a headwater.types.Part with exactly one of "
    "inline_data=Blob(mime_type=..., data=bytes) or text=str "
    "(no function call or response, not a thought)"
)


@dataclass(frozen=True, slots=True)
class ArtifactKey:
    """The checked address of one artifact: who owns it and its filename.

    ``session_id`` is kept even for user-scoped filenames; stores ignore it
    there (see :attr:`user_scoped`).
    """

    app_name: str
    user_id: str
    session_id: str
    filename: str

    @property
    def user_scoped(self) -> bool:
        """Whether the filename starts with ``"user:"`` and so belongs to the user."""
        return self.filename.startswith(USER_SCOPE_PREFIX)


@dataclass(frozen=True, slots=True)
class ArtifactPayload:
    """One stored version: its bytes, MIME type and whether it came from a text part.

    Immutable, so a store may keep it as is; text is held as its UTF-8 bytes.
    """

    data: bytes
    mime_type: str
    is_text: bool

    @classmethod
    def from_part(cls, part: Part, *, filename: str, max_bytes: int) -> ArtifactPayload:
        """Check ``part`` and normalise it into a payload.

        Raises:
            UserError: ``part`` is not a text or inline-data part, its text is not
                encodable as UTF-8, or it is larger than ``max_bytes``.
        """
        if not isinstance(part, Part):
            raise UserError(f"{_ACCEPTED}; got {type(part).__name__}")
        extra = (part.function_call, part.function_response, part.thought_signature)
        if part.thought or any(x is not None for x in extra):
            raise UserError(f"{_ACCEPTED}; artifact {filename!r} has other fields set")
        if (part.text is None) == (part.inline_data is None):
            which = "neither text nor inline_data" if part.text is None else "both"
            raise UserError(f"{_ACCEPTED}; artifact {filename!r} sets {which}")
        payload = cls._from_text(part.text, filename) if part.text is not None else (
            cls._from_blob(part.inline_data, filename))
        if len(payload.data) > max_bytes:
            raise UserError(
                f"artifact {filename!r} is {len(payload.data)} bytes; this store accepts at "
                f"most {max_bytes} (its max_bytes)"
            )
        return payload

    @classmethod
    def _from_text(cls, text: object, filename: str) -> ArtifactPayload:
        if not isinstance(text, str):
            raise UserError(f"{_ACCEPTED}; artifact {filename!r} has text of type "
                            f"{type(text).__name__}")
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise UserError(f"artifact {filename!r} has text that is not valid UTF-8 "
                            f"(a lone surrogate at {exc.start}); store it as a Blob") from None
        return cls(data=data, mime_type=TEXT_MIME_TYPE, is_text=True)

    @classmethod
    def _from_blob(cls, blob: Blob | None, filename: str) -> ArtifactPayload:
        if not isinstance(blob, Blob):
            raise UserError(f"{_ACCEPTED}; artifact {filename!r} has inline_data of type "
                            f"{type(blob).__name__}")
        if not isinstance(blob.data, bytes | bytearray | memoryview):
            raise UserError(f"{_ACCEPTED}; artifact {filename!r} has data of type "
                            f"{type(blob.data).__name__}")
        if not isinstance(blob.mime_type, str) or not blob.mime_type:
            raise UserError(f"artifact {filename!r} needs a MIME type, "
                            "e.g. Blob(mime_type='application/octet-stream', data=...)")
        return cls(data=bytes(blob.data), mime_type=blob.mime_type, is_text=False)

    def to_part(self) -> Part:
        """A fresh part holding this payload; the caller may mutate it freely."""
        if self.is_text:
            return Part(text=self.data.decode("utf-8"))
        return Part(inline_data=Blob(mime_type=self.mime_type, data=self.data))


class BaseArtifactService(ABC):
    """Stores versioned artifacts per app, user and session.

    Every method is safe to call concurrently from one event loop; concurrent
    saves of one filename get distinct versions. Every method raises
    :class:`~headwater.errors.UserError` for an invalid argument: an empty
    ``app_name``/``user_id``/``session_id`` or one that is ``"."`` or ``".."``,
    an invalid filename (see :func:`check_filename`), a negative version.
    Nothing is stored when a call raises.

    Args:
        max_bytes: the largest artifact accepted, in bytes of data or of UTF-8
            text; defaults to :data:`DEFAULT_MAX_ARTIFACT_BYTES` (64 MiB).

    Raises:
        UserError: ``max_bytes`` is negative or not an int.
    """

    def __init__(self, *, max_bytes: int = DEFAULT_MAX_ARTIFACT_BYTES) -> None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise UserError(f"max_bytes must be a non-negative int, got {max_bytes!r}")
        self.max_bytes = max_bytes

    async def save_artifact(
        self, *, app_name: str, user_id: str, session_id: str, filename: str, artifact: Part
    ) -> int:
        """Store ``artifact`` as the next version of ``filename`` and return that version.

        The first save of a filename is version 0. The part is copied; changing
        it afterwards does not change what is stored.

        Raises:
            UserError: an invalid key, a part that is not text or inline data,
                or one larger than ``max_bytes``.
        """
        key = _key(app_name, user_id, session_id, filename)
        payload = ArtifactPayload.from_part(artifact, filename=filename, max_bytes=self.max_bytes)
        return await self._save(key, payload)

    async def load_artifact(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        filename: str,
        version: int | None = None,
    ) -> Part | None:
        """The given version of ``filename`` (the latest by default), or ``None`` if missing.

        The part is a fresh object each call.

        Raises:
            UserError: an invalid key or a negative version.
        """
        key = _key(app_name, user_id, session_id, filename)
        if version is not None and (
            isinstance(version, bool) or not isinstance(version, int) or version < 0
        ):
            raise UserError(f"version must be a non-negative int or None, got {version!r}")
        payload = await self._load(key, version)
        return payload.to_part() if payload is not None else None

    async def list_artifact_keys(self, *, app_name: str, user_id: str, session_id: str
                                 ) -> list[str]:
        """The filenames this session sees, its own and the user's (``"user:…"``), sorted.

        Raises:
            UserError: an invalid app, user or session id.
        """
        _check_ids(app_name, user_id, session_id)
        return sorted(set(await self._keys(app_name, user_id, session_id)))

    async def list_versions(
        self, *, app_name: str, user_id: str, session_id: str, filename: str
    ) -> list[int]:
        """The stored versions of ``filename`` in ascending order; empty if missing.

        Raises:
            UserError: an invalid key.
        """
        key = _key(app_name, user_id, session_id, filename)
        return sorted(await self._versions(key))

    async def delete_artifact(
        self, *, app_name: str, user_id: str, session_id: str, filename: str
    ) -> None:
        """Delete every version of ``filename``; deleting a missing one is a no-op.

        The next save of the filename starts again at version 0.

        Raises:
            UserError: an invalid key.
        """
        await self._delete(_key(app_name, user_id, session_id, filename))

    @abstractmethod
    async def _save(self, key: ArtifactKey, payload: ArtifactPayload) -> int:
        """Store ``payload`` as a new version, distinct from any concurrent save's."""

    @abstractmethod
    async def _load(self, key: ArtifactKey, version: int | None) -> ArtifactPayload | None:
        """The version (latest when ``None``) or ``None``."""

    @abstractmethod
    async def _keys(self, app_name: str, user_id: str, session_id: str) -> Iterable[str]:
        """The session's filenames and the user's ``"user:"`` filenames, in any order."""

    @abstractmethod
    async def _versions(self, key: ArtifactKey) -> Iterable[int]:
        """The stored versions, in any order."""

    @abstractmethod
    async def _delete(self, key: ArtifactKey) -> None:
        """Remove every version; a missing key is a no-op."""


def check_filename(filename: str) -> None:
    """Refuse a filename no store could keep safely.

    A filename is at most :data:`MAX_FILENAME_CHARS` characters; after the
    optional ``"user:"`` prefix it is non-empty, has no NUL and no path
    separator (``/`` or ``\\``), and is not ``"."`` or ``".."``.

    Raises:
        UserError: saying which rule the filename breaks.
    """
    if not isinstance(filename, str):
        raise UserError(f"an artifact filename is a str, got {type(filename).__name__}")
    name = filename.removeprefix(USER_SCOPE_PREFIX)
    if not name:
        raise UserError(f"artifact filename {filename!r} is empty; use a name like 'report.pdf' "
                        "(or 'user:report.pdf' to share it across the user's sessions)")
    if len(filename) > MAX_FILENAME_CHARS:
        raise UserError(f"artifact filename is {len(filename)} characters long; "
                        f"the limit is {MAX_FILENAME_CHARS}")
    if "\x00" in name:
        raise UserError(f"artifact filename {filename!r} contains a NUL character")
    if "/" in name or "\\" in name:
        raise UserError(f"artifact filename {filename!r} contains a path separator ('/' or '\\'); "
                        "use a flat name such as 'reports_2024.pdf'")
    if name in (".", ".."):
        raise UserError(f"artifact filename {filename!r} is not a name; use a name like "
                        "'report.pdf'")


def _check_ids(app_name: str, user_id: str, session_id: str) -> None:
    for label, value in (("app_name", app_name), ("user_id", user_id),
                         ("session_id", session_id)):
        if not isinstance(value, str) or value in ("", ".", ".."):
            raise UserError(f"{label} must be a non-empty str other than '.' and '..', "
                            f"got {value!r}")


def _key(app_name: str, user_id: str, session_id: str, filename: str) -> ArtifactKey:
    _check_ids(app_name, user_id, session_id)
    check_filename(filename)
    return ArtifactKey(app_name, user_id, session_id, filename)
