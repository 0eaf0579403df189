"""Session state with change tracking.

Re-exported from :mod:`headwater.core.state`, where the code lives.
"""

from .core.state import TEMP_PREFIX, State

__all__ = ("TEMP_PREFIX", "State")
