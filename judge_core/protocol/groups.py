"""Gathering a GRPO group's per-sample requests by prompt, on the client and on the server alike.

An RL trainer often scores one completion at a time (verl's per-sample reward function, OpenRLHF's remote reward
model), while a group-relative reward needs a prompt's completions together. A group closes once it holds `size`
members, or `window_s` seconds after its first member arrived, whichever comes first; its owner then judges it
(and refuses a lone member: it has no sibling to be compared with)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol


class Cancellable(Protocol):
    def cancel(self) -> object: ...


def thread_timer(delay: float, callback: Callable[[], None]) -> threading.Timer:
    """`callback` in a daemon thread after `delay` seconds."""
    timer = threading.Timer(delay, callback)
    timer.daemon = True
    timer.start()
    return timer


@dataclass
class _OpenGroup:
    members: list = field(default_factory=list)
    timer: Cancellable | None = None


class GroupGatherer:
    """Members gathered by key into groups; `on_close(members)` gets each group exactly once, in arrival order:
    from `add` when that member filled it, else from the timer. `start_timer(delay, callback)` starts the window
    (default: a daemon thread; an asyncio server passes its loop's `call_later` and adds from the loop). Safe to
    call from any thread."""

    def __init__(
        self,
        size: int,
        window_s: float,
        on_close: Callable[[list], Any],
        start_timer: Callable[[float, Callable[[], None]], Cancellable] = thread_timer,
    ):
        self.size, self.window_s = size, window_s
        self._on_close, self._start_timer = on_close, start_timer
        self._lock = threading.Lock()
        self._open: dict[str, _OpenGroup] = {}

    def add(self, key: str, member: Any) -> None:
        with self._lock:
            group = self._open.get(key)
            if group is None:
                group = self._open[key] = _OpenGroup()
                group.timer = self._start_timer(self.window_s, lambda: self._close(key, group))
            group.members.append(member)
            full = len(group.members) >= self.size
        if full:
            self._close(key, group)

    def _close(self, key: str, group: _OpenGroup) -> None:
        with self._lock:
            if self._open.get(key) is not group:
                return
            del self._open[key]
        group.timer.cancel()
        self._on_close(group.members)
