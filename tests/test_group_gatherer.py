"""judge_core.protocol.groups.GroupGatherer, the one gatherer of the client and the server: a group closes on its
size or at the end of its window, exactly once, with its members in arrival order."""

from __future__ import annotations

import time

from judge_core.protocol.groups import GroupGatherer
from judge_core.protocol.judge_api import prompt_key


class ManualTimers:
    """start_timer stand-in: the test fires the windows itself."""

    def __init__(self):
        self.started: list[tuple[float, object]] = []

    def __call__(self, delay, callback):
        self.started.append((delay, callback))
        return self

    def cancel(self):
        pass


def test_a_full_group_closes_at_once_and_a_partial_one_when_its_window_ends():
    closed, timers = [], ManualTimers()
    gatherer = GroupGatherer(3, 1.5, closed.append, start_timer=timers)
    for key, member in [("p", 1), ("q", "x"), ("p", 2), ("p", 3)]:
        gatherer.add(key, member)
    assert closed == [[1, 2, 3]]
    assert [delay for delay, _ in timers.started] == [1.5, 1.5]
    for _, fire in timers.started:
        fire()  # p's window ends after p closed: nothing more
    assert closed == [[1, 2, 3], ["x"]]
    gatherer.add("p", 4)  # a new group of the same key
    assert len(timers.started) == 3


def test_no_member_is_lost_or_closed_twice_when_a_window_ends_as_its_group_fills():
    closed = []
    gatherer = GroupGatherer(2, 0.0, closed.append)  # each window's thread races the second add
    for round_ in range(50):
        gatherer.add(f"k{round_}", (round_, "first"))
        gatherer.add(f"k{round_}", (round_, "second"))
    deadline = time.monotonic() + 10
    while sum(map(len, closed)) < 100 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)  # a second close of any group would land here
    members = [member for group in closed for member in group]
    assert sorted(members) == sorted((round_, order) for round_ in range(50) for order in ("first", "second"))
    assert all(len(group) == 1 or group == [(group[0][0], "first"), (group[0][0], "second")] for group in closed)


def test_equal_prompts_have_equal_keys_whatever_their_form():
    assert prompt_key("What is 2 + 2?") == prompt_key([{"role": "user", "content": "What is 2 + 2?"}])
    assert prompt_key("What is 2 + 2?") != prompt_key([{"role": "system", "content": "What is 2 + 2?"}])
