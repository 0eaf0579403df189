"""Tasks with an owner: the one way library code starts a task outside a task group.

Re-exported from :mod:`headwater.core.tasks`, where the code lives.
"""

from .core.tasks import T, TaskSet

__all__ = ("T", "TaskSet")
