"""The launcher keeps verl's metrics file whole across a resumed run (training/launch/metrics_file.py)."""

from __future__ import annotations

import json

from training.launch.metrics_file import earlier_steps_kept, merged


def lines(*steps: int, key: str = "train/loss") -> list[str]:
    return [json.dumps({"step": step, "data": {key: float(step)}}) for step in steps]


def test_a_resumed_run_follows_the_earlier_steps_before_its_first():
    earlier = lines(1, 2, 3, 4) + lines(4, key="val/loss")
    assert merged(earlier, lines(3, 4)) == lines(1, 2) + lines(3, 4)


def test_a_run_started_afresh_replaces_everything():
    assert merged(lines(1, 2, 3), lines(1, 2)) == lines(1, 2)


def test_a_run_that_logged_nothing_replaces_nothing():
    assert merged(lines(1, 2), []) == lines(1, 2)


def test_the_half_written_line_of_a_killed_run_goes():
    earlier = lines(1, 2) + ['{"step": 3, "data": {"train/lo']
    assert merged(earlier, lines(3)) == lines(1, 2, 3)


def test_the_file_truncated_by_a_run_gets_its_earlier_steps_back(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("\n".join(lines(1, 2, 3)) + "\n")
    with earlier_steps_kept(path):
        path.write_text("\n".join(lines(3, 4)) + "\n")  # what verl's FileLogger does: open(path, "w")
    assert path.read_text().splitlines() == lines(1, 2, 3, 4)


def test_a_first_run_leaves_its_file_as_written(tmp_path):
    path = tmp_path / "metrics.jsonl"
    with earlier_steps_kept(path):
        path.write_text("\n".join(lines(1, 2)) + "\n")
    assert path.read_text().splitlines() == lines(1, 2)
