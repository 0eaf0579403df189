"""Artifact stores: versioned blobs and texts saved next to a session, as in Google ADK.

``InMemoryArtifactService`` for tests, ``FileArtifactService`` for real use on
one machine (or several sharing a file system). The limits and the
``"user:"`` prefix are constants of :mod:`headwater.artifacts.base`.
"""

from .base import ArtifactKey as ArtifactKey
from .base import ArtifactPayload as ArtifactPayload
from .base import BaseArtifactService as BaseArtifactService
from .file import FileArtifactService as FileArtifactService
from .memory import InMemoryArtifactService as InMemoryArtifactService

__all__ = (
    "ArtifactKey",
    "ArtifactPayload",
    "BaseArtifactService",
    "FileArtifactService",
    "InMemoryArtifactService",
)
