"""verl's file logger (`trainer.logger` with `file`) opens its JSON-lines file for writing when a run starts, so a
run resumed in the same folder would leave only its own steps there, and the learning curve drawn from it
(`python -m evaluation.judge_curves --metrics`) would start at the resumed step. The launcher keeps the earlier
runs' lines for the steps before the new run's first and puts them back in front when the new run ends.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

FILE_LOGGER_ENV = "VERL_FILE_LOGGER_PATH"


@contextlib.contextmanager
def earlier_steps_kept(path: Path) -> Iterator[None]:
    """Around a run that writes verl's metrics file `path`: its earlier lines survive the run's truncation."""
    earlier = path.read_text().splitlines() if path.is_file() else []
    try:
        yield
    finally:
        if earlier:
            new = path.read_text().splitlines() if path.is_file() else []
            path.write_text("".join(f"{line}\n" for line in merged(earlier, new)))


def merged(earlier: list[str], new: list[str]) -> list[str]:
    """The earlier lines before the new run's first step, then the new lines. A run that logged nothing (it
    failed to start) supersedes nothing; one that started afresh (step 1) supersedes everything. A run that logged
    a step also drops the half-written last line a killed run may have left."""
    new_steps = [step for step in map(_step, new) if step is not None]
    if not new_steps:
        return earlier + new
    first = min(new_steps)
    return [line for line in earlier if (step := _step(line)) is not None and step < first] + new


def _step(line: str) -> int | None:
    try:
        step = json.loads(line).get("step")
    except (ValueError, AttributeError):
        return None
    return step if isinstance(step, int) else None
