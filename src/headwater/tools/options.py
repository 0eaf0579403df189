"""``ToolOptions``: every option of a tool, written once, with its defaults and checks.

A tool's options live in one frozen dataclass, :class:`ToolOptions`, and a
built tool holds them as ``tool.options``; the runner reads nothing else.
Incoherent combinations raise ``ValueError`` when the options are made, which
is when the tool is built.

**Kinds.** ``ToolOptions.kind`` says how a call is answered; it is decided once,
when the tool is built, and never re-derived:

- ``"call"``: a plain (sync or async) function; answers once.
- ``"progress"`` (``streaming=True`` or ``kind="progress"``): an async generator
  whose ``ToolStreamEvent``\\ s before ``done`` are progress for the caller; the
  ``done`` response is the one result the model sees.
- ``"live"`` (a bare async generator, or ``kind="live"``). The rule: in
  ``run_live`` each value it yields is told to the model (``Function <name>
  returned: <value>``): it is a live streaming tool. In ``run_async`` (``NONE``
  or ``SSE``) it runs like a progress tool: each yielded value is progress for
  the caller and the last value (or a ``done`` event's response) is the one
  result the model sees.

**Why keywords are not typed by a TypedDict.** ``FunctionTool`` and ``tool()``
take the options as keywords (``tool(timeout=3)``) and build
``ToolOptions(**keywords)`` from them, so the names, types and defaults exist
only here: a second, typed list of keywords would have to be kept equal to this
one by hand. The price is that a misspelt keyword is caught when the tool is
built (at import, for a decorator) with a ``TypeError`` naming the known
options, not by the type checker. Pass ``options=ToolOptions(...)`` for a
spelling the type checker sees.
"""

from __future__ import annotations

import difflib
import inspect
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Literal, cast, get_args

ToolKind = Literal["call", "progress", "live"]
ResponseFormat = Literal["content", "content_and_artifact"]
AfterTicket = Literal["end_turn", "ask_model"]
"""What follows a long-running call's ticket in the same turn: the turn ends (headwater's),
or the model is asked once more with the ticket as the call's result (ADK's)."""
CacheFunction = Callable[[dict[str, Any], Any], bool]
ApprovalSummary = Callable[[dict[str, Any]], str]
"""``(args) -> str``: the line an approver is shown for a call with these arguments."""

_KINDS: tuple[str, ...] = get_args(ToolKind)
_FORMATS: tuple[str, ...] = get_args(ResponseFormat)


@dataclass(frozen=True, kw_only=True)
class ToolOptions:
    """How a tool is run; frozen (assigning raises ``FrozenInstanceError``).

    Attributes:
        kind: ``"call"`` (answers once), ``"progress"`` (an async generator whose
            events before ``done`` are progress; ``done`` is the result) or
            ``"live"`` (an async generator: in ``run_live`` every value is told to
            the model; in ``run_async`` it runs like ``"progress"``, its last value
            being the result). ``FunctionTool`` infers it from the function unless
            ``kind=`` or ``streaming=`` says.
        timeout: seconds a call may take (``None``: the run's default).
        requires_approval: the run stops before the call until a human answers.
        long_running: the call answers at once with a ticket; the result comes
            later as a function response with the same call id.
        after_ticket: with ``long_running``: ``"end_turn"`` (the default: the
            turn ends at the ticket) or ``"ask_model"`` (ADK's: the model is asked
            once more in the same turn, the ticket being the call's result so
            far; ``LongRunningFunctionTool`` sets it).
        return_direct: the result ends the run as its final response.
        response_format: ``"content_and_artifact"``: the tool returns
            ``(content, artifact)``; the model sees the content, the artifact is
            stored in the artifact service.
        idempotent: safe to re-run after a crash (never re-run automatically
            otherwise).
        expose_result: the gateway may forward arguments and results raw.
        cache: results are kept per arguments and reused (``"call"`` tools only).
        cache_function: ``(args, result) -> bool``, whether to keep a result
            (needs ``cache=True``).
        approval_summary: what an approver is shown instead of the raw
            arguments (needs ``requires_approval=True``): a template whose
            fields name the tool's parameters (``"deploy {version} to
            {environment}"``, ``str.format`` syntax), or a function ``(args) ->
            str``. Made into one line when the approval is asked; a template
            whose field has no value, or a function that raises, falls back to
            the call with its arguments (logged).
        max_lifetime, max_emissions, min_interval: bounds of a live stream in
            ``run_live`` (seconds, count, seconds between emissions with the
            latest value winning).

    Raises:
        ValueError: when made, for an unknown ``kind`` or ``response_format``,
            ``cache_function`` without ``cache=True``, an ``approval_summary``
            without ``requires_approval=True`` or that is neither a template
            (malformed, or a field that is not a plain name) nor a function of
            one argument, or a streaming kind
            combined with ``cache``, ``cache_function``,
            ``response_format="content_and_artifact"``, ``return_direct`` or
            ``long_running``; an unknown ``after_ticket``, or ``"ask_model"``
            without ``long_running=True``.
    """

    kind: ToolKind = "call"
    timeout: float | None = None
    requires_approval: bool = False
    long_running: bool = False
    after_ticket: AfterTicket = "end_turn"
    return_direct: bool = False
    response_format: ResponseFormat = "content"
    idempotent: bool = False
    expose_result: bool = False
    cache: bool = False
    cache_function: CacheFunction | None = None
    approval_summary: str | ApprovalSummary | None = None
    max_lifetime: float | None = None
    max_emissions: int | None = None
    min_interval: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"kind must be 'call', 'progress' or 'live', not {self.kind!r}")
        if self.response_format not in _FORMATS:
            raise ValueError(f"response_format must be 'content' or 'content_and_artifact', "
                             f"not {self.response_format!r}")
        if self.after_ticket not in ("end_turn", "ask_model"):
            raise ValueError(f"after_ticket must be 'end_turn' or 'ask_model', "
                             f"not {self.after_ticket!r}")
        if self.after_ticket == "ask_model" and not self.long_running:
            raise ValueError("after_ticket='ask_model' needs long_running=True")
        if self.cache_function is not None and not self.cache:
            raise ValueError("cache_function is only consulted with cache=True")
        if self.approval_summary is not None:
            _check_summary(self.approval_summary, self.requires_approval)
        if self.kind != "call":
            self._check_streaming()

    def _check_streaming(self) -> None:
        what = f"a streaming tool (kind={self.kind!r})"
        if self.cache:
            raise ValueError(f"{what} cannot combine with cache=True: a cache stores a single "
                             "value, not a stream")
        if self.cache_function is not None:
            raise ValueError(f"{what} cannot combine with cache_function: it is only consulted "
                             "with cache=True, which a stream cannot use")
        if self.response_format == "content_and_artifact":
            raise ValueError(f"{what} cannot combine with response_format="
                             "'content_and_artifact': the artifact channel needs the full payload")
        if self.return_direct:
            raise ValueError(f"{what} cannot combine with return_direct=True: return-direct "
                             "semantics do not apply to a streaming intermediary")
        if self.long_running:
            raise ValueError(f"{what} cannot combine with long_running=True: a long-running "
                             "tool answers with a ticket at once")


def _check_summary(summary: Any, requires_approval: bool) -> None:  # summary: user input
    if not requires_approval:
        raise ValueError("approval_summary is only shown with requires_approval=True")
    if isinstance(summary, str):
        template_fields(summary)
        return
    if not callable(summary):
        raise ValueError("approval_summary must be a template (str) or a function "
                         f"(args) -> str, not {type(summary).__name__}")
    if inspect.iscoroutinefunction(summary):
        raise ValueError("approval_summary must be a plain function (args) -> str, not an "
                         "async one: it is called when the approval is asked")
    try:
        signature = inspect.signature(summary)
    except (TypeError, ValueError):  # a builtin without a signature: taken as it is
        return
    try:
        signature.bind({})
    except TypeError:
        raise ValueError("approval_summary must take one argument, the call's arguments "
                         f"(a dict); its signature is {signature}") from None


def template_fields(template: str) -> tuple[str, ...]:
    """The names an ``approval_summary`` template's fields use, in order.

    Raises:
        ValueError: a malformed template, or a field that is not a plain name
            (``{}``, ``{0}``, ``{a.b}``, ``{a[0]}``, a nested ``{a:{b}}``).
    """
    names: list[str] = []
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ValueError(f"approval_summary {template!r} is not a valid template: {exc} "
                         "(write {{ and }} for literal braces)") from None
    for _, name, spec, _ in parsed:
        if name is None:
            continue
        if not name.isidentifier() or (spec and "{" in spec):
            raise ValueError(f"approval_summary {template!r}: each field names a parameter "
                             f"of the tool, like {{version}}; {{{name}}} does not")
        names.append(name)
    return tuple(names)


OPTION_NAMES: frozenset[str] = frozenset(f.name for f in fields(ToolOptions))
"""The names ``ToolOptions`` accepts (``FunctionTool`` also takes ``streaming``)."""


def options_for(func: Callable[..., Any], name: str, base: ToolOptions | None,
                keywords: Mapping[str, Any]) -> ToolOptions:
    """The options of the tool ``name`` built from ``func``: ``base`` with ``keywords`` applied.

    The kind comes from ``kind=`` or ``streaming=`` in ``keywords``, else from
    ``base``, else from the function: an async generator is ``"live"``, any
    other function ``"call"``. ``streaming=True`` means ``kind="progress"``.

    Raises:
        TypeError: an unknown option name.
        ValueError: incoherent options, or a kind the function cannot be.
    """
    given = dict(keywords)
    streaming = given.pop("streaming", None)
    _refuse_unknown(name, given)
    try:
        declared = _declared_kind(given.pop("kind", None), streaming)
        if declared is None and base is not None:
            declared = base.kind
        kind = _check_shape(declared, streaming, inspect.isasyncgenfunction(func))
        return replace(base or ToolOptions(), kind=kind, **given)
    except ValueError as exc:
        raise ValueError(f"tool {name!r}: {exc}") from None


def _refuse_unknown(name: str, given: Mapping[str, Any]) -> None:
    unknown = sorted(set(given) - OPTION_NAMES)
    if not unknown:
        return
    hints = [f"{u!r} (did you mean {close[0]!r}?)" if (close := difflib.get_close_matches(
        u, OPTION_NAMES, n=1)) else repr(u) for u in unknown]
    raise TypeError(f"tool {name!r}: unknown option {', '.join(hints)}; the options are "
                    f"streaming, {', '.join(sorted(OPTION_NAMES))}")


def _declared_kind(kind: Any, streaming: bool | None) -> ToolKind | None:  # kind: user input
    if kind is not None and kind not in _KINDS:
        raise ValueError(f"kind must be 'call', 'progress' or 'live', not {kind!r}")
    if streaming is True and kind not in (None, "progress"):
        raise ValueError(f"streaming=True means kind='progress' and contradicts kind={kind!r}: "
                         "pass only one of them")
    if streaming is False and kind not in (None, "call"):
        raise ValueError(f"streaming=False means kind='call' and contradicts kind={kind!r}: "
                         "pass only one of them")
    if kind is not None:
        return cast(ToolKind, kind)  # checked against _KINDS above
    return None if streaming is None else ("progress" if streaming else "call")


def _check_shape(declared: ToolKind | None, streaming: bool | None,
                 is_generator: bool) -> ToolKind:
    """The kind, once the function's shape agrees with what was declared."""
    if declared is None:
        return "live" if is_generator else "call"
    if declared == "call" and is_generator:
        if streaming is False:
            raise ValueError("an async generator function is a streaming tool; do not pass "
                             "streaming=False (omit it for kind='live', or pass streaming=True "
                             "for kind='progress')")
        raise ValueError("kind='call' needs a plain function, but this is an async generator: "
                         "omit kind (a bare async generator is kind='live') or pass "
                         "kind='progress'")
    if declared != "call" and not is_generator:
        flag = "streaming=True" if streaming else f"kind={declared!r}"
        raise ValueError(f"{flag} needs an async generator function (async def … yield); "
                         "a plain function is kind='call': omit it")
    return declared
