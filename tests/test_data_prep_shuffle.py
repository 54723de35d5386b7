"""`python -m data_prep shuffle`: a parquet file's rows in a seeded order, the way to a second run of verl 0.6.1's
SFT trainer (which ignores trainer.seed)."""

from __future__ import annotations

import pandas as pd
import pytest

from data_prep import cli

ROWS = pd.DataFrame({"messages": [[{"role": "user", "content": f"question {i}"}] for i in range(50)], "n": range(50)})


@pytest.fixture
def source(tmp_path):
    path = tmp_path / "train.parquet"
    ROWS.to_parquet(path)
    return path


def shuffled(source, out, seed: int) -> pd.DataFrame:
    cli.main(["shuffle", str(source), str(out), "--seed", str(seed)])
    return pd.read_parquet(out)


def test_the_copy_holds_every_row_once_in_the_order_its_seed_draws(source, tmp_path, capsys):
    first = shuffled(source, tmp_path / "a" / "s2.parquet", 2)
    assert f"wrote the 50 rows of {source} to {tmp_path}/a/s2.parquet in seed 2's order" in capsys.readouterr().out
    assert sorted(first.n) == list(range(50)) and list(first.n) != list(range(50))
    assert list(first.messages.map(lambda m: m[0]["content"])) == [f"question {n}" for n in first.n]
    assert list(shuffled(source, tmp_path / "again.parquet", 2).n) == list(first.n)
    assert list(shuffled(source, tmp_path / "s3.parquet", 3).n) != list(first.n)


@pytest.mark.parametrize(
    "make_input, message",
    [
        (lambda path: None, "no such file"),
        (lambda path: path.write_text("a,b\n1,2\n"), "not a parquet file"),
    ],
)
def test_a_missing_or_unreadable_input_is_an_error_naming_it(tmp_path, make_input, message):
    path = tmp_path / "train.parquet"
    make_input(path)
    with pytest.raises(SystemExit, match=f"^shuffle: {path}: {message}"):
        cli.main(["shuffle", str(path), str(tmp_path / "out.parquet"), "--seed", "2"])
    assert not (tmp_path / "out.parquet").exists()


def test_the_input_is_never_overwritten(source):
    before = source.read_bytes()
    with pytest.raises(SystemExit, match="is the input; write the shuffled copy elsewhere"):
        cli.main(["shuffle", str(source), str(source), "--seed", "2"])
    assert source.read_bytes() == before
