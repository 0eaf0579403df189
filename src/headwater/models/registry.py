"""Models named by strings: ``"provider:model"`` through one registry.

Built-ins register exactly as third-party packages do, through the
``headwater.models`` entry-point group: the entry point's name is the provider
prefix and its value a callable taking the part after the colon.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points

from ..errors import UserError
from .base import BaseLlm

ModelFactory = Callable[[str], BaseLlm]

_factories: dict[str, ModelFactory] = {}
_loaded = False


def register_model(prefix: str, factory: ModelFactory) -> None:
    """Register (or replace) the factory for ``"<prefix>:<model>"`` strings."""
    _factories[prefix] = factory


def _load_entry_points() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for ep in entry_points(group="headwater.models"):
        if ep.name not in _factories:
            _factories[ep.name] = ep.load()


def available_providers() -> list[str]:
    """The provider prefixes that can be resolved."""
    _load_entry_points()
    return sorted(_factories)


def get_model(model: str | BaseLlm) -> BaseLlm:
    """Resolve a model string (``"openai:gpt-4o-mini"``) or pass a model object through.

    Raises:
        UserError: the string has no ``provider:`` prefix or names an unknown provider.
    """
    if isinstance(model, BaseLlm):
        return model
    prefix, sep, name = model.partition(":")
    if not sep or not prefix or not name:
        raise UserError(
            f"model string {model!r} must look like 'provider:model' "
            f"(known providers: {', '.join(available_providers()) or 'none'})"
        )
    _load_entry_points()
    factory = _factories.get(prefix)
    if factory is None:
        raise UserError(
            f"unknown model provider {prefix!r} in {model!r}; known: "
            f"{', '.join(available_providers())}. Third-party providers register an entry "
            "point in the 'headwater.models' group."
        )
    return factory(name)
