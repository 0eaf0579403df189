"""Models named by strings: ``"provider:model"`` through one registry.

Built-ins register exactly as third-party packages do, through the
``headwater.models`` entry-point group: the entry point's name is the provider
prefix and its value a callable taking the part after the colon. A factory
registered in code (:func:`register_model`, :func:`registered_model`) takes
precedence over an entry point of the same prefix.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib.metadata import entry_points

from ..errors import UserError
from .base import BaseLlm

ModelFactory = Callable[[str], BaseLlm]

_registered: dict[str, ModelFactory] = {}  # in code; wins over an entry point
_entry_points: dict[str, ModelFactory] = {}
_loaded = False


def register_model(prefix: str, factory: ModelFactory) -> Callable[[], None]:
    """Register (or replace) the factory for ``"<prefix>:<model>"`` strings.

    The registration lasts until the returned function is called, which puts
    back what ``prefix`` resolved to before (another factory, the entry point,
    or nothing). Undo registrations in the reverse order they were made.
    """
    had = prefix in _registered
    previous = _registered.get(prefix)
    _registered[prefix] = factory

    def undo() -> None:
        if previous is not None and had:
            _registered[prefix] = previous
        else:
            _registered.pop(prefix, None)

    return undo


@contextmanager
def registered_model(prefix: str, factory: ModelFactory) -> Iterator[None]:
    """Resolve ``"<prefix>:<model>"`` with ``factory`` inside a ``with`` block only.

    For tests: on leaving the block (normally or by an exception) the prefix
    resolves as it did before.
    """
    undo = register_model(prefix, factory)
    try:
        yield
    finally:
        undo()


def _load_entry_points() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for ep in entry_points(group="headwater.models"):
        _entry_points.setdefault(ep.name, ep.load())


def available_providers() -> list[str]:
    """The provider prefixes that can be resolved."""
    _load_entry_points()
    return sorted({*_registered, *_entry_points})


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
    factory = _registered.get(prefix)
    if factory is None:
        _load_entry_points()
        factory = _entry_points.get(prefix)
    if factory is None:
        raise UserError(
            f"unknown model provider {prefix!r} in {model!r}; known: "
            f"{', '.join(available_providers())}. Third-party providers register an entry "
            "point in the 'headwater.models' group."
        )
    return factory(name)
