"""Reading an evaluation file in RewardBench 2's schema, checked row by row before any judge is called.

Columns used: id, prompt (str), chosen (list[str]), rejected (list[str]), subset; num_correct,
num_incorrect and total_completions must agree with the lists when present. Ties rows are identified by
ids `ref:N` (one correct answer) and `tied:N` (several), N shared by the two rows of one prompt.
Optionally a column of reference answers (a string per row; the offline eval set's is `reference`),
sent to the judge as the item's `answer`.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

REQUIRED_COLUMNS = ("id", "prompt", "chosen", "rejected", "subset")
TIES_ID = re.compile(r"(ref|tied):(\d+)")


class DataError(ValueError):
    """The evaluation file does not fit RewardBench 2's schema; the message names the row and field."""


@dataclass(frozen=True)
class EvalRow:
    id: str
    prompt: str
    chosen: tuple[str, ...]
    rejected: tuple[str, ...]
    subset: str
    reference: str | None = None  # a correct answer the judge compares with; None: no answer is sent

    @property
    def completions(self) -> tuple[str, ...]:
        """Chosen first, then rejected: the order the scoring relies on."""
        return self.chosen + self.rejected

    @property
    def is_ties(self) -> bool:
        return is_ties_subset(self.subset)


def is_ties_subset(subset: str) -> bool:
    return subset.lower() == "ties"  # the official scripts match the name case-insensitively


def ties_key(row_id: str) -> tuple[str, int]:
    """('ref' or 'tied', prompt number) of a Ties row id."""
    match = TIES_ID.fullmatch(row_id)
    if match is None:
        raise DataError(f"Ties row id {row_id!r} is neither 'ref:N' nor 'tied:N'")
    return match.group(1), int(match.group(2))


def file_digest(path: str | Path) -> str:
    """The first 12 hex digits of the file's SHA-256, to tell data files apart in reports."""
    digest = hashlib.sha256()
    with open(path, "rb") as data:
        for block in iter(lambda: data.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:12]


def load_rows(path: str | Path, reference_column: str | None = None) -> list[EvalRow]:
    """The rows of a RewardBench 2-schema parquet file, in file order, all checked; with
    `reference_column`, each row's reference answer from that column."""
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.is_file():
        raise DataError(f"evaluation file {path} does not exist")
    table = pq.read_table(path)
    missing = [name for name in REQUIRED_COLUMNS if name not in table.column_names]
    if missing:
        raise DataError(f"{path.name}: missing columns {missing}; RewardBench 2's schema has {list(REQUIRED_COLUMNS)}")
    if reference_column is not None and reference_column not in table.column_names:
        raise DataError(f"{path.name}: no reference column {reference_column!r} (columns: {table.column_names})")
    rows = [
        _row(f"{path.name} row {number}", data, reference_column)
        for number, data in enumerate(table.to_pylist(), start=1)
    ]
    if not rows:
        raise DataError(f"{path.name} has no rows")
    _check_unique_ids(rows, path.name)
    _check_ties(rows, path.name)
    return rows


def _row(where: str, data: dict, reference_column: str | None) -> EvalRow:
    for name in ("id", "prompt", "subset"):
        if not isinstance(data[name], str):
            raise DataError(f"{where}: {name} must be a string, got {type(data[name]).__name__}")
    chosen, rejected = _texts(where, data, "chosen"), _texts(where, data, "rejected")
    expected = {
        "num_correct": len(chosen),
        "num_incorrect": len(rejected),
        "total_completions": len(chosen) + len(rejected),
    }
    for name, count in expected.items():
        if data.get(name) is not None and data[name] != count:
            raise DataError(f"{where}: {name} is {data[name]} but the lists hold {count}")
    reference = None
    if reference_column is not None:
        reference = data[reference_column]
        if not isinstance(reference, str):
            raise DataError(f"{where}: {reference_column} must be a string, got {type(reference).__name__}")
    return EvalRow(data["id"], data["prompt"], chosen, rejected, data["subset"], reference)


def _texts(where: str, data: dict, name: str) -> tuple[str, ...]:
    value = data[name]
    if not isinstance(value, list) or not value or not all(isinstance(text, str) for text in value):
        raise DataError(f"{where}: {name} must be a non-empty list of strings")
    return tuple(value)


def _check_unique_ids(rows: list[EvalRow], file_name: str) -> None:
    seen: set[str] = set()
    for row in rows:
        if row.id in seen:
            raise DataError(f"{file_name}: id {row.id!r} appears twice")
        seen.add(row.id)


def _check_ties(rows: list[EvalRow], file_name: str) -> None:
    """The Ties formula needs tied rows with several correct answers, and prompts with both a ref and a
    tied row (its margin terms are undefined otherwise)."""
    keys: set[tuple[str, int]] = set()
    for row in (r for r in rows if r.is_ties):
        key = ties_key(row.id)
        if key in keys:
            raise DataError(f"{file_name}: Ties prompt {key[0]}:{key[1]} appears twice")
        keys.add(key)
        if key[0] == "tied" and len(row.chosen) < 2:
            raise DataError(
                f"{file_name}: Ties row {row.id} has {len(row.chosen)} correct answer; tied rows need several"
            )
    ref, tied = ({number for kind, number in keys if kind == wanted} for wanted in ("ref", "tied"))
    if keys and not ref & tied:
        raise DataError(f"{file_name}: the Ties subset has no prompt with both a ref:N and a tied:N row")
