"""A GRPO judge's validations as verl dumps them (`trainer.validation_data_dir=DIR`: `DIR/<step>.jsonl`, a line per
validation prompt with its `input`, the greedy `output`, its ground truth `gts` and the reward's keys), read per
step: the accuracy and the format failures (the reward's `accuracy` and `format_ok` keys), and for a pairwise
judge validated on both orders of its pairs (`data_prep offline --both-orders`) the position consistency: the
share of pairs whose two verdicts name the same response (or are both tie), of those whose two verdicts parse.
The two orders of a pair are found by their prompts (judge_core.protocol.templates.split_pairwise_prompt); a
pairwise row whose other order is not in the file is counted as unpaired, never dropped unseen.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import statistics
from collections import defaultdict
from pathlib import Path

from judge_core.protocol import templates

STEP_FILE = re.compile(r"(\d+)\.jsonl")
ROW_KEYS = ("input", "output", "gts", "accuracy", "format_ok")


@dataclasses.dataclass(frozen=True)
class ValidationPoint:
    rows: int
    accuracy: float
    format_failures: int
    pairs: int  # both-order pairs whose two verdicts parse
    agreeing: int  # of them, those naming the same response in both orders
    unpaired: int  # pairwise rows without exactly one other order in the file

    @property
    def position_consistency(self) -> float:
        """NaN without pairs (a pointwise judge, or one validated in one order)."""
        return self.agreeing / self.pairs if self.pairs else math.nan


def read_validation(folder: Path) -> dict[int, ValidationPoint]:
    """Every `<step>.jsonl` in the folder, by step; a folder without any is an error naming it."""
    points = {}
    for child in folder.iterdir() if folder.is_dir() else ():
        match = STEP_FILE.fullmatch(child.name)
        if match:
            points[int(match.group(1))] = read_step(child)
    if not points:
        raise FileNotFoundError(f"{folder}: no <step>.jsonl (verl's trainer.validation_data_dir={folder})")
    return dict(sorted(points.items()))


def read_step(path: Path) -> ValidationPoint:
    rows = _rows(path)
    orders: dict[tuple[str, str, str], list[tuple[bool, str | None]]] = defaultdict(list)
    unpaired = 0
    for row in rows:
        if "better" not in templates.read_ground_truth(row["gts"]):
            continue
        split = templates.split_pairwise_prompt(row["input"])
        if split is None:
            unpaired += 1
            continue
        before, response_a, response_b = split
        allowed = templates.pairwise_verdicts(templates.offers_tie(row["input"]))
        judgement = templates.parse_pairwise(row["output"], allowed)
        swapped = response_a > response_b
        key = (before, *sorted((response_a, response_b)))
        orders[key].append((swapped, judgement.value if judgement.ok else None))
    pairs = agreeing = 0
    for verdicts in orders.values():
        if sorted(swapped for swapped, _ in verdicts) != [False, True]:
            unpaired += len(verdicts)
            continue
        (_, first), (_, second) = verdicts
        if first is not None and second is not None:
            pairs += 1
            agreeing += second == templates.verdict_in_other_order(first)
    return ValidationPoint(
        rows=len(rows),
        accuracy=statistics.fmean(float(row["accuracy"]) for row in rows),
        format_failures=sum(not row["format_ok"] for row in rows),
        pairs=pairs,
        agreeing=agreeing,
        unpaired=unpaired,
    )


def _rows(path: Path) -> list[dict]:
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        row = json.loads(line)
        missing = [key for key in ROW_KEYS if key not in row]
        if missing:
            raise ValueError(f"{path}:{number}: no {missing} (a verl validation dump of a judge_rewards reward?)")
        rows.append(row)
    if not rows:
        raise ValueError(f"{path}: no rows")
    return rows
