"""Time as tools and live streams see it: real by default, virtual in tests.

Re-exported from :mod:`headwater.core.clock`, where the code lives.
"""

from .core.clock import SYSTEM_CLOCK, Clock, SystemClock

__all__ = ("SYSTEM_CLOCK", "Clock", "SystemClock")
