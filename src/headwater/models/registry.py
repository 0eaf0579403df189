"""Models named by strings: one parser, one registry of providers.

A model string is ``"provider:model"`` (``"openai:gpt-4o-mini"``), or a bare
name the parser knows: ``"demo"`` (the offline demo model), or an ADK-style model
name whose family names its provider (:data:`BARE_FAMILIES`: ``"gemini-2.0-flash"``
is ``"gemini:gemini-2.0-flash"``, ``"claude-…"`` Anthropic, ``"gpt-…"``/``"o3-…"``
OpenAI). :func:`parse_model_string`
is the one parser: :func:`get_model`, ``Agent(model=…)`` (checked by
:func:`check_model` when the agent is built), ``--model`` and ``HEADWATER_MODEL``
on the command line and ``headwater serve --model`` all go through it.

Providers register exactly as third-party packages do, through the
``headwater.models`` entry-point group: the entry point's name is the provider
prefix and its value a callable taking the part after the colon. A factory
registered in code (:func:`register_model`, :func:`registered_model`) takes
precedence over an entry point of the same prefix.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import entry_points
from types import MappingProxyType

from ..core.errors import UserError
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


@dataclass(frozen=True, slots=True)
class ModelString:
    """A model string, parsed.

    Attributes:
        provider: the registry prefix whose factory builds the model (``"openai"``).
        name: what that factory is given (``"gpt-4o-mini"``).
    """

    provider: str
    name: str


BARE_MODELS: Mapping[str, ModelString] = MappingProxyType({"demo": ModelString("demo", "demo")})
"""Model strings without a ``provider:`` prefix, and the model each names."""


BARE_FAMILIES: tuple[tuple[str, str], ...] = (
    (r"gemini-[^:]+", "gemini"),
    (r"model-optimizer-[^:]+", "gemini"),
    (r"claude-[^:]+", "anthropic"),
    (r"(?:gpt-|chatgpt-|o1|o3|o4)[^:]*", "openai"),
)
"""ADK-style bare model names (a full match, no colon) and the provider each goes to.

ADK's registry resolves ``gemini-.*`` (and ``model-optimizer-.*``) to Gemini and
``claude-.*`` to Claude (on Vertex AI; here the Anthropic API); ADK reaches OpenAI
only through ``LiteLlm``, here ``gpt-…``, ``o1…``, ``o3…``, ``o4…`` are the OpenAI
Chat Completions adapter."""

_FAMILIES = tuple((re.compile(pattern), provider) for pattern, provider in BARE_FAMILIES)
_VERTEX_ENDPOINT = re.compile(r"projects/[^/]+/locations/[^/]+/endpoints/[^/]+")


def _bare(text: str) -> ModelString | None:
    """The model a string without a provider prefix names, or ``None``.

    The one place bare names are known: :data:`BARE_MODELS`, then the families of
    :data:`BARE_FAMILIES`.

    Raises:
        UserError: a Vertex AI endpoint path (ADK's third Gemini form), which has
            no adapter here.
    """
    named = BARE_MODELS.get(text)
    if named is not None:
        return named
    for pattern, provider in _FAMILIES:
        if pattern.fullmatch(text):
            return ModelString(provider, text)
    if _VERTEX_ENDPOINT.fullmatch(text):
        raise UserError(f"model {text!r} is a Vertex AI endpoint, which headwater cannot call; "
                        "name a Gemini model ('vertex:<model>@<project>/<location>'); "
                        f"{accepted_models()}")
    return None


def accepted_models() -> str:
    """What a model may be, in words (the end of every error about one)."""
    bare = ", ".join(repr(name) for name in BARE_MODELS)
    return (f"a model is a BaseLlm object, {bare} (the offline demo model) or a "
            "'provider:model' string such as 'openai:gpt-4o-mini' (providers: "
            f"{', '.join(available_providers()) or 'none'}); an ADK model name names its "
            "provider: 'gemini-…', 'model-optimizer-…', 'claude-…', 'gpt-…', 'o1…', 'o3…', "
            "'o4…'")


def parse_model_string(text: str) -> ModelString:
    """Parse a model string: ``"provider:model"`` (split at the first colon) or a bare
    name the registry knows (``"demo"``, ``"gemini-2.0-flash"``: :data:`BARE_FAMILIES`).
    It checks the shape only; :func:`get_model` finds the provider.

    Raises:
        UserError: not a string, or neither shape; the message says what is accepted.
    """
    if not isinstance(text, str):  # called from untyped code
        raise _not_a_model(text)
    bare = _bare(text)
    if bare is not None:
        return bare
    prefix, sep, name = text.partition(":")
    if not sep or not prefix or not name:
        raise UserError(f"model string {text!r} must look like 'provider:model'; "
                        f"{accepted_models()}")
    return ModelString(prefix, name)


def _not_a_model(value: object) -> UserError:
    if value is None:
        shown = "no model given"
    elif value is Ellipsis:
        shown = "model=... is a placeholder, not a model"
    else:
        kind = type(value).__name__
        shown = f"model={value!r} ({'an' if kind[:1] in 'aeiou' else 'a'} {kind}) is not a model"
    return UserError(f"{shown}; {accepted_models()}")


def _factory(parsed: ModelString, text: str) -> ModelFactory:
    factory = _registered.get(parsed.provider)
    if factory is None:
        _load_entry_points()
        factory = _entry_points.get(parsed.provider)
    if factory is None:
        raise UserError(
            f"unknown model provider {parsed.provider!r} in {text!r}; known: "
            f"{', '.join(available_providers())}. Third-party providers register an entry "
            "point in the 'headwater.models' group."
        )
    return factory


def check_model(model: object, *, agent: str) -> str | BaseLlm:
    """``model`` as ``agent``'s model, checked without building it: a ``BaseLlm``, or a
    model string whose provider is known (built on first use, so a missing API key is
    reported then). Returns ``model``.

    Raises:
        UserError: anything else, naming the agent and what a model may be.
    """
    if isinstance(model, BaseLlm):
        return model
    try:
        if not isinstance(model, str):
            raise _not_a_model(model)
        _factory(parse_model_string(model), model)
    except UserError as exc:
        raise UserError(f"agent {agent!r}: {exc}") from None
    return model


def get_model(model: str | BaseLlm) -> BaseLlm:
    """Resolve a model string (``"openai:gpt-4o-mini"``, ``"demo"``) or pass a model
    object through.

    Raises:
        UserError: a malformed string or an unknown provider; what the provider's
            factory raises (a missing API key, a malformed model name).
    """
    if isinstance(model, BaseLlm):
        return model
    parsed = parse_model_string(model)
    return _factory(parsed, model)(parsed.name)
