"""What callbacks, instruction providers and tools see of a run.

Re-exported from :mod:`headwater.core.context`, where the code lives.
"""

from .core.context import ArtifactStore, CallbackContext, ReadonlyContext

__all__ = ("ArtifactStore", "CallbackContext", "ReadonlyContext")
