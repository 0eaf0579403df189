"""Whether a lease's holder is provably dead: only a process of this host that has ended."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

from headwater.sessions._holder import Holder, holder_is_dead, process_start, this_process

ASLEEP = "import sys; sys.stdin.readline()"  # a child that lives until its stdin closes


def started() -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", ASLEEP], stdin=subprocess.PIPE, text=True)


def test_this_process_is_alive() -> None:
    here = this_process()
    assert here.host == socket.gethostname() and here.pid == os.getpid()
    assert here.start is not None and here.start == process_start(os.getpid())
    assert not holder_is_dead(here)
    assert not holder_is_dead(Holder(here.host, here.pid, None))  # start unknown: pid alone


def test_a_process_that_ended_is_dead_a_live_one_is_not() -> None:
    child = started()
    try:
        holder = Holder(socket.gethostname(), child.pid, process_start(child.pid))
        assert holder.start is not None and holder.start != this_process().start
        assert not holder_is_dead(holder)
        assert not holder_is_dead(Holder(holder.host, child.pid, None))
    finally:
        child.communicate("\n", timeout=30)
    assert child.returncode == 0
    assert holder_is_dead(holder)
    assert holder_is_dead(Holder(holder.host, child.pid, None))  # no such pid


def test_a_killed_process_not_yet_reaped_is_dead() -> None:
    child = started()
    try:
        holder = Holder(socket.gethostname(), child.pid, process_start(child.pid))
        os.kill(child.pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while not holder_is_dead(holder):  # until the kernel has ended it (a zombie)
            assert time.monotonic() < deadline, "the killed child never showed as dead"
            time.sleep(0.01)
        os.kill(child.pid, 0)  # not reaped: the pid still exists
        assert holder_is_dead(Holder(holder.host, child.pid, None))
    finally:
        child.kill()
        child.wait(10)
        assert child.stdin is not None
        child.stdin.close()


def test_a_reused_pid_does_not_keep_a_dead_holder_alive() -> None:
    here = this_process()
    assert here.start is not None
    scope, _, ticks = here.start.rpartition(":")
    # This pid, recorded for a process that started at another time: that one has ended.
    assert holder_is_dead(Holder(here.host, here.pid, f"{scope}:{int(ticks) - 1}"))


def test_what_this_host_cannot_judge_is_never_dead() -> None:
    child = started()
    child.communicate("\n", timeout=30)
    gone = Holder(socket.gethostname(), child.pid, None)
    assert holder_is_dead(gone)
    assert not holder_is_dead(Holder("some-other-host", gone.pid, None))
    here = this_process()
    assert here.start is not None
    ticks = here.start.rpartition(":")[2]
    # Recorded in another boot, or another PID namespace of a host with the same name.
    assert not holder_is_dead(Holder(gone.host, gone.pid, f"another-boot/pid:[1]:{ticks}"))
    assert not holder_is_dead(Holder(gone.host, 0, None))
    assert not holder_is_dead(Holder(gone.host, -1, None))
