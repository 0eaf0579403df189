"""Every bound in one place; each is an env var ``HEADWATER_<NAME>``.

Re-exported from :mod:`headwater.core.settings`, where the code lives.
"""

from .core.settings import Settings, get_settings, reload_settings, settings_or_default

__all__ = ("Settings", "get_settings", "reload_settings", "settings_or_default")
