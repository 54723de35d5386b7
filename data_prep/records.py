"""Reading input rows (.jsonl, .jsonl.gz, .parquet, or a Hugging Face hub dataset) with their location,
so that a bad row is reported by file, row and field, and never guessed at."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

SUPPORTED_SUFFIXES = (".jsonl", ".jsonl.gz", ".parquet")


class DataError(ValueError):
    """A malformed input row; the message names the file, the row and the field."""


class UsageError(ValueError):
    """Options that cannot work together (sizes, fractions, sources)."""


@dataclass(frozen=True)
class Record:
    """One input row and where it came from, e.g. `train.jsonl.gz line 17`."""

    where: str
    data: dict

    def fail(self, field: str, expected: str) -> DataError:
        shown = _shorten(repr(self.data[field])) if field in self.data else "nothing (the field is missing)"
        return DataError(f"{self.where}: field '{field}' must be {expected}, got {shown}")

    def text(self, field: str) -> str:
        value = self.data.get(field)
        if not isinstance(value, str):
            raise self.fail(field, "a string")
        return value

    def integer(self, field: str, low: int, high: int) -> int:
        value = self.data.get(field)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise self.fail(field, f"an int {low}-{high}" if low >= 0 else f"an int from {low} to {high}")
        return value

    def choice(self, field: str, allowed: tuple[str, ...]) -> str:
        value = self.data.get(field)
        if value not in allowed:
            raise self.fail(field, "one of " + ", ".join(repr(a) for a in allowed))
        return value

    def text_list(self, field: str) -> list[str]:
        value = self.data.get(field)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(field, "a list of strings")
        return value


def _shorten(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def read_records(path: str | Path) -> Iterator[Record]:
    """The rows of a local .jsonl, .jsonl.gz or .parquet file, with a progress bar."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"input file {path} does not exist")
    if path.name.endswith(".parquet"):
        yield from _parquet_records(path)
    elif path.name.endswith((".jsonl", ".jsonl.gz")):
        yield from _jsonl_records(path)
    else:
        raise DataError(f"{path.name}: unsupported input format; expected one of {', '.join(SUPPORTED_SUFFIXES)}")


def _jsonl_records(path: Path) -> Iterator[Record]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as lines:
        for number, line in enumerate(tqdm(lines, desc=f"reading {path.name}", unit=" rows"), start=1):
            where = f"{path.name} line {number}"
            if not line.strip():
                raise DataError(f"{where}: empty line")
            try:
                data = json.loads(line)
            except json.JSONDecodeError as err:
                raise DataError(f"{where}: not valid JSON ({err.msg})") from err
            if not isinstance(data, dict):
                raise DataError(f"{where}: expected a JSON object, got {type(data).__name__}")
            yield Record(where, data)


def _parquet_records(path: Path) -> Iterator[Record]:
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(path)
    progress = tqdm(total=parquet.metadata.num_rows, desc=f"reading {path.name}", unit=" rows")
    number = 0
    with progress:
        for batch in parquet.iter_batches(batch_size=1024):
            for data in batch.to_pylist():
                number += 1
                progress.update(1)
                yield Record(f"{path.name} row {number}", data)


def hub_records(name: str, split: str, **load_kwargs: Any) -> Iterator[Record]:
    """The rows of a split of a Hugging Face hub dataset (needs internet access)."""
    import datasets

    dataset = datasets.load_dataset(name, split=split, **load_kwargs)
    label = f"{name}[{split}]" + "".join(f" {k}={v}" for k, v in load_kwargs.items())
    for number, data in enumerate(tqdm(dataset, desc=f"reading {label}", unit=" rows"), start=1):
        yield Record(f"{label} row {number}", data)
