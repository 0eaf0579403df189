"""Sans-I/O assembly of streamed tool-call fragments into calls.

Providers stream a call's arguments as pieces of a JSON string keyed by an
index. Fragments are buffered per call and parsed only at :meth:`finish`, so a
half-received call can never run.
"""

from __future__ import annotations

import json
from typing import Any

from ..core.errors import ToolCallAssemblyError
from ..core.events import new_id
from ..core.types import FunctionCall


class _Slot:
    __slots__ = ("arguments", "id", "index", "name")

    def __init__(self, index: int | None, call_id: str | None) -> None:
        self.index = index
        self.id = call_id
        self.name: str | None = None
        self.arguments: list[str] = []


class ToolCallAssembler:
    """Collects fragments per call; :meth:`finish` returns the parsed calls.

    Keying: by provider index; when a server repeats an index (or omits it)
    for what carries a new call id, the call id decides. A call id seen
    before under another index is a new call (a server that gives every call
    of a response the same id); the session gives it a fresh id when it is
    stored. A fragment that names no call and cannot be attributed raises
    ``ToolCallAssemblyError``.
    """

    __slots__ = ("_by_id", "_by_index", "_slots")

    def __init__(self) -> None:
        self._slots: list[_Slot] = []
        self._by_index: dict[int, _Slot] = {}
        self._by_id: dict[str, _Slot] = {}

    def __bool__(self) -> bool:
        return bool(self._slots)

    def feed(
        self,
        *,
        index: int | None = None,
        call_id: str | None = None,
        name: str | None = None,
        arguments: str | None = None,
    ) -> None:
        """Add one fragment; any of its fields may be missing."""
        slot = self._slot_for(index, call_id, name)
        if name:
            if slot.name is not None and slot.name != name:
                # Some servers resend the name on every fragment; a different one is a new call.
                raise ToolCallAssemblyError(
                    f"call {slot.id or slot.index}: name changed from {slot.name!r} to {name!r}"
                )
            slot.name = name
        if arguments:
            slot.arguments.append(arguments)

    def _slot_for(self, index: int | None, call_id: str | None, name: str | None) -> _Slot:
        if call_id:
            known = self._by_id.get(call_id)
            if known is not None and (index is None or known.index in (None, index)):
                return known
            same_index = self._by_index.get(index) if index is not None else None
            if same_index is not None and same_index.id is None:
                same_index.id = call_id
                self._by_id[call_id] = same_index
                return same_index
            return self._new_slot(index, call_id)
        if index is not None:
            slot = self._by_index.get(index)
            if slot is not None:
                return slot
            return self._new_slot(index, None)
        if self._slots and not name:
            return self._slots[-1]
        if name:
            return self._new_slot(None, None)
        raise ToolCallAssemblyError("tool-call fragment with no index, id or name before any call")

    def _new_slot(self, index: int | None, call_id: str | None) -> _Slot:
        slot = _Slot(index, call_id)
        self._slots.append(slot)
        if index is not None:
            self._by_index[index] = slot
        if call_id:
            self._by_id[call_id] = slot
        return slot

    def finish(self) -> list[FunctionCall]:
        """Parse every call.

        Raises:
            ToolCallAssemblyError: a call without a name, or arguments that are
                not one complete JSON object.
        """
        calls: list[FunctionCall] = []
        for slot in self._slots:
            label = slot.id or f"#{slot.index}"
            if not slot.name:
                raise ToolCallAssemblyError(f"tool call {label} has no name")
            calls.append(
                FunctionCall(id=slot.id or new_id("call"), name=slot.name, args=_parse(slot, label))
            )
        return calls


def _parse(slot: _Slot, label: str) -> dict[str, Any]:
    raw = "".join(slot.arguments).strip()
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ToolCallAssemblyError(
            f"tool call {label} ({slot.name}): arguments are not complete JSON ({exc.msg} "
            f"at {exc.pos} of {len(raw)} characters)"
        ) from None
    if not isinstance(value, dict):
        raise ToolCallAssemblyError(
            f"tool call {label} ({slot.name}): arguments are a JSON {type(value).__name__}, "
            "not an object"
        )
    return value
