"""The processes a server started (vLLM's engine core and workers, multiprocessing's helpers), found in /proc
and stopped with it: a server stopped at any moment, loading, compiling, serving or draining, leaves none.

Linux only (/proc, prctl); elsewhere nothing is found and engines stop as their own code stops them."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
from multiprocessing import resource_tracker
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36
GRACE_S = 10.0  # how long the engine gets to stop on SIGTERM before SIGKILL
GIVE_UP_S = 30.0


def adopt_orphans() -> None:
    """Make this process the child subreaper of its tree: a process whose parent dies (a vLLM worker whose engine
    core was stopped first) becomes this process's child, so it can still be found and stopped."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def descendants(root: int) -> set[int]:
    """Live (not zombie) processes below `root`, from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, frontier = set(), [root]
    while frontier:
        for child in children.get(frontier.pop(), ()):
            if child not in found:
                found.add(child)
                frontier.append(child)
    return found


def stop_descendants(grace_s: float = GRACE_S, give_up_s: float = GIVE_UP_S) -> None:
    """SIGTERM every process below this one, SIGKILL those alive after `grace_s`, until none is left (or
    `give_up_s` passed); dead children are reaped."""
    started = time.monotonic()
    signalled: set[int] = set()
    tracker = _resource_tracker_pid()
    while time.monotonic() - started < give_up_s:
        _reap()
        alive = descendants(os.getpid()) - {tracker}
        if not alive:
            _stop_resource_tracker()
            return
        late = time.monotonic() - started > grace_s
        for pid in alive if late else alive - signalled:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL if late else signal.SIGTERM)
        signalled |= alive
        time.sleep(0.1)


def _resource_tracker_pid() -> int | None:
    """multiprocessing's resource tracker of this process (vLLM starts one), if it runs. It ignores SIGTERM and
    SIGINT: it stops when the processes using it are gone and this one closes its pipe, first removing what they
    left behind (shared memory, semaphores). Killed instead, it would leave those."""
    return getattr(getattr(resource_tracker, "_resource_tracker", None), "_pid", None)


def _stop_resource_tracker() -> None:
    """Closes this process's end of the tracker's pipe and waits while the tracker cleans up and exits. Where it
    cannot (no tracker, one already reaped, a signal that came while this thread was using it), the pipe closes
    when this process exits."""
    with contextlib.suppress(AttributeError, OSError, RuntimeError):
        resource_tracker._resource_tracker._stop()


def _reap() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def stop_now(signum: int, _frame=None) -> None:
    """A signal handler: stop every process this one started, then exit (0 for SIGTERM, a stop that was asked
    for; 128 + the signal's number otherwise, as a shell reports it). Runs once, however many signals come."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    print(f"judge server: {signal.Signals(signum).name}: stopping", file=sys.stderr, flush=True)
    stop_descendants()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if signum == signal.SIGTERM else 128 + signum)


def stop_on_signals() -> None:
    """From now on SIGTERM and SIGINT stop this process and everything it started (see stop_now)."""
    adopt_orphans()
    signal.signal(signal.SIGTERM, stop_now)
    signal.signal(signal.SIGINT, stop_now)
