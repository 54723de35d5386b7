"""RewardBench 2 (allenai/reward-bench-2) to GRPO pointwise / pairwise datasets plus a held-out eval set.

Training a judge on RewardBench 2 and then scoring it on RewardBench 2 is contamination. The remedy here:
prompt ids are split (per subset, seeded) into train / val / eval before anything is built, no id is in
two splits, and eval/ keeps RewardBench 2's own schema so the evaluation scores only held-out prompts.
Ties rows are never trained on (several answers are correct, so there is no 4-vs-0 label); they all go to
eval/, where RewardBench 2's Ties scoring needs them.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from data_prep import outputs
from data_prep.records import Record, UsageError, hub_records, read_records
from judge_core.settings import option

HUB_NAME = "allenai/reward-bench-2"
TIES_SUBSET = "Ties"
DATA_SOURCE_POINTWISE = "rewardbench2/pointwise"
DATA_SOURCE_PAIRWISE = "rewardbench2/pairwise"
CHOSEN_SCORE = 4
REJECTED_SCORE = 0
EVAL = "eval"


@dataclass(frozen=True)
class RewardBench2Config:
    """How the prompt ids are split and how many rejected answers each row gets."""

    eval_fraction: float = option(0.2, "share of each subset's prompt ids held out for eval/")
    val_fraction: float = option(0.05, "share of each subset's prompt ids for the val split")
    # 1: labels 4 and 0 balanced in pointwise; 3: every rejected answer RB2 has in pairwise
    pointwise_rejected: int = option(1, "rejected answers per prompt in pointwise; each chosen answer is one more row")
    pairwise_rejected: int = option(3, "rejected answers per prompt in pairwise (one pair each)")
    seed: int = option(0, "seed of the split, sampling and A/B positions")

    def __post_init__(self):
        if not (self.eval_fraction >= 0 and self.val_fraction >= 0 and self.eval_fraction + self.val_fraction < 1):
            raise UsageError("eval and val fractions must be >= 0 and leave some prompts for training")
        if self.pointwise_rejected < 1 or self.pairwise_rejected < 1:
            raise UsageError("at least one rejected answer per prompt is needed")


@dataclass(frozen=True)
class _Row:
    record: Record
    id: str
    prompt: str
    chosen: list[str]
    rejected: list[str]
    subset: str


def records_from(path: str | Path | None = None, hub: str | None = None) -> Iterable[Record]:
    return read_records(path) if path is not None else hub_records(hub or HUB_NAME, "test")


def convert(
    records: Iterable[Record], out_dir: str | Path, config: RewardBench2Config = RewardBench2Config()
) -> outputs.Summary:
    summary = outputs.Summary("rewardbench2", Path(out_dir))
    rows = [_validated(record) for record in records]
    splits = assign_splits(rows, config)
    trainable = [row for row in rows if row.subset != TIES_SUBSET]
    ties = len(rows) - len(trainable)
    for output in (outputs.POINTWISE, outputs.PAIRWISE):
        summary.skip(output, f"{TIES_SUBSET} subset (several correct answers; all {ties} rows go to eval/)", ties)
        summary.skip(output, "prompt id held out for eval/", sum(splits[row.id] == EVAL for row in trainable))
    for split in outputs.SPLITS:
        in_split = [row for row in trainable if splits[row.id] == split]
        rng = random.Random(f"{config.seed}/{split}")
        summary.add_split(outputs.POINTWISE, split, _pointwise_rows(in_split, config, rng))
        summary.add_split(outputs.PAIRWISE, split, _pairwise_rows(in_split, config, rng))
    summary.add_eval([_eval_row(row) for row in rows if splits[row.id] == EVAL])
    return summary.save()


def _validated(record: Record) -> _Row:
    for name in ("num_correct", "num_incorrect", "total_completions"):
        record.integer(name, 0, 10**6)
    record.text_list("models")
    row = _Row(
        record,
        record.text("id"),
        record.text("prompt"),
        record.text_list("chosen"),
        record.text_list("rejected"),
        record.text("subset"),
    )
    if row.subset != TIES_SUBSET:
        for name in ("chosen", "rejected"):
            if not getattr(row, name):
                raise record.fail(name, "a non-empty list of strings outside the Ties subset")
    return row


def assign_splits(rows: list[_Row], config: RewardBench2Config) -> dict[str, str]:
    """Prompt id -> train / val / eval, drawn per subset with the seed; every Ties id -> eval."""
    ids_by_subset = defaultdict(set)
    for row in rows:
        ids_by_subset[row.subset].add(row.id)
    splits = {}
    for subset, ids in sorted(ids_by_subset.items()):
        ordered = sorted(ids)
        if subset == TIES_SUBSET:
            splits.update(dict.fromkeys(ordered, EVAL))
            continue
        random.Random(f"{config.seed}/{subset}").shuffle(ordered)
        n_eval, n_val = _share(config.eval_fraction, len(ordered)), _share(config.val_fraction, len(ordered))
        for position, row_id in enumerate(ordered):
            splits[row_id] = EVAL if position < n_eval else "val" if position < n_eval + n_val else "train"
    return splits


def _share(fraction: float, count: int) -> int:
    """How many of `count` ids a fraction takes: at least one when the fraction is not 0."""
    return 0 if fraction == 0 else max(1, round(fraction * count))


def _origin(row: _Row) -> outputs.RowOrigin:
    return outputs.RowOrigin(row.id, row.subset, row.record.where)


def _pointwise_rows(rows: list[_Row], config: RewardBench2Config, rng: random.Random) -> list[dict]:
    result = []
    for row in rows:
        graded = [(answer, CHOSEN_SCORE) for answer in row.chosen]
        graded += [(answer, REJECTED_SCORE) for answer in _sample(row.rejected, config.pointwise_rejected, rng)]
        result += [
            outputs.pointwise_row(DATA_SOURCE_POINTWISE, row.prompt, answer, score, _origin(row))
            for answer, score in graded
        ]
    return result


def _pairwise_rows(rows: list[_Row], config: RewardBench2Config, rng: random.Random) -> list[dict]:
    pairs = [
        (row, chosen, rejected)
        for row in rows
        for chosen in row.chosen
        for rejected in _sample(row.rejected, config.pairwise_rejected, rng)
    ]
    positions = outputs.balanced_positions(len(pairs), rng)
    return [
        outputs.pairwise_row(DATA_SOURCE_PAIRWISE, row.prompt, chosen, rejected, chosen_is_a, _origin(row))
        for (row, chosen, rejected), chosen_is_a in zip(pairs, positions, strict=True)
    ]


def _sample(answers: list[str], count: int, rng: random.Random) -> list[str]:
    return rng.sample(answers, min(count, len(answers)))


def _eval_row(row: _Row) -> dict:
    """The upstream row as it was (all its columns were validated)."""
    data = row.record.data
    return {
        **{name: data[name] for name in outputs.RB2_COLUMNS},
        "additional_metadata": data.get("additional_metadata"),
    }
