"""A parquet file's rows in a seeded order: another run of verl 0.6.1's SFT trainer, whose own order is fixed
(its sampler's seed is 0, and it does not read trainer.seed)."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from data_prep.records import UsageError


def shuffle_file(source: str | Path, out: str | Path, seed: int) -> int:
    """Write `source`'s rows to `out` in the order `seed` draws; the number of rows."""
    source, out = Path(source), Path(out)
    if not source.is_file():
        raise UsageError(f"{source}: no such file")
    if out.resolve() == source.resolve():
        raise UsageError(f"the output {out} is the input; write the shuffled copy elsewhere")
    try:
        table = pq.read_table(source)
    except pa.ArrowInvalid as err:
        raise UsageError(f"{source}: not a parquet file ({err})") from None
    order = list(range(table.num_rows))
    random.Random(seed).shuffle(order)
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table.take(order), out)
    return table.num_rows
