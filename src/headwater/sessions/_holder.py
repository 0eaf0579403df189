"""Which process holds a lease, and whether that process is provably dead.

A SQL store records the process that takes a lease (host name, pid, and the
process's start): a run whose process was killed (``kill -9``, a crash) can
then have its session taken over by the next process on the same host at
once, instead of after the lease's TTL. Only a holder proven dead counts;
anything this host cannot tell (another host, another boot or PID namespace,
no way to read a process's start) leaves the lease to its TTL.

The start is what tells a process from a later one that got the same pid. On
Linux it is ``/proc/<pid>/stat`` field 22 (``starttime``, clock ticks since
boot), qualified by the boot id and the PID namespace, so that a holder
recorded in another container with the same host name, or before a reboot, is
never judged by this one's processes. Elsewhere it is ``None`` and only "no
such pid" counts as dead.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Final

_PROC: Final = "/proc"
_DEAD_STATES: Final = ("Z", "X")  # zombie, dead: ended, not yet (or just) reaped


@dataclass(frozen=True, slots=True)
class Holder:
    """A process, as a lease records it.

    Attributes:
        host: the host name (``socket.gethostname()``).
        pid: the process id on that host.
        start: when the process started, as :func:`process_start` tells it;
            ``None`` where that cannot be read.
    """

    host: str
    pid: int
    start: str | None


_current: Holder | None = None


def this_process() -> Holder:
    """The calling process (computed once per process; a forked child computes its own)."""
    global _current
    found = _current
    if found is None or found.pid != os.getpid():
        pid = os.getpid()
        found = _current = Holder(socket.gethostname(), pid, process_start(pid))
    return found


def process_start(pid: int) -> str | None:
    """When process ``pid`` of this host started; ``None`` when unknown (or no such pid).

    Two processes that ever had the same pid have different starts, as long as
    both were read in the same boot and PID namespace (the token says which).
    """
    scope = _scope()
    stat = _stat(pid)
    if scope is None or stat is None:
        return None
    return f"{scope}:{stat[1]}"


def holder_is_dead(holder: Holder) -> bool:
    """Whether ``holder`` has provably ended: it ran on this host and is gone.

    ``False`` whenever this process cannot be sure: a holder on another host,
    or recorded in another boot or PID namespace, is never judged here. With
    the start recorded, the holder is dead when its pid is gone, is a zombie,
    or now belongs to a process that started at another time (the pid was
    reused). Without it, only "no such pid" counts.
    """
    here = this_process()
    if holder.host != here.host or holder.pid <= 0:
        return False
    if holder.start is not None:
        if here.start is None or _scope_of(holder.start) != _scope_of(here.start):
            return False
        stat = _stat(holder.pid)
        if stat is None:
            return not _exists(holder.pid)  # /proc says gone; the kernel confirms
        state, ticks = stat
        return state in _DEAD_STATES or f"{_scope_of(holder.start)}:{ticks}" != holder.start
    if not _exists(holder.pid):
        return True
    stat = _stat(holder.pid)
    return stat is not None and stat[0] in _DEAD_STATES


def _scope() -> str | None:
    """This boot and PID namespace, where pids and start times mean something."""
    try:
        with open(f"{_PROC}/sys/kernel/random/boot_id", encoding="ascii") as file:
            boot = file.read().strip()
        namespace = os.readlink(f"{_PROC}/self/ns/pid")  # "pid:[4026531836]"
    except OSError:
        return None
    return f"{boot}/{namespace}"


def _scope_of(start: str) -> str:
    return start.rpartition(":")[0]


def _stat(pid: int) -> tuple[str, str] | None:
    """``pid``'s state (field 3) and start time in ticks (field 22), or ``None``."""
    try:
        with open(f"{_PROC}/{pid}/stat", "rb") as file:
            raw = file.read()
    except OSError:
        return None
    # Field 2, the command name in parentheses, may hold spaces and parentheses itself.
    fields = raw[raw.rfind(b")") + 2:].split()
    if len(fields) < 20:
        return None
    return fields[0].decode("ascii", "replace"), fields[19].decode("ascii", "replace")


def _exists(pid: int) -> bool:
    """Whether a process ``pid`` exists here; ``True`` when that cannot be told."""
    if os.name != "posix":
        return True  # os.kill would end the process on Windows, not probe it
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists, owned by another user
        return True
    return True
