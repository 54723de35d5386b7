"""`python -m evaluation.compare`: the paired bootstrap of two evaluations on the same rows, on real
`python -m evaluation` outputs (the rule judge, given a right or a wrong reference) and on planted credits."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data_prep import offline, outputs
from evaluation.cli import main as evaluate
from evaluation.compare import CompareConfig, RowCredits, compare, main
from tests.support.readme_blocks import readme_arguments

SMALL = offline.OfflineConfig(train_size=40, val_size=10, eval_size=20, seed=2, val_rows_per_fact=2)


@pytest.fixture(scope="module")
def evaluations(tmp_path_factory):
    """The val file with a second reference, wrong on arithmetic rows only; the rule judge evaluated with each."""
    root = tmp_path_factory.mktemp("compare")
    offline.generate(root / "data", SMALL)
    table = pq.read_table(root / "data" / outputs.EVAL_VAL_FILE)
    rows = table.to_pylist()
    wrong = [row["rejected"][0] if row["subset"] == "arithmetic" else row["reference"] for row in rows]
    data = root / "val.parquet"
    pq.write_table(table.append_column("wrong_on_arithmetic", pa.array(wrong)), data)
    for name, column in (("right", "reference"), ("wrong", "wrong_on_arithmetic")):
        common = ["--data", str(data), "--judge", "rule", "--row-scores", "--out", str(root / name)]
        evaluate([*common, "--reference-column", column])
    return root, data, rows


def subset_scores(out) -> dict[str, float]:
    document = json.loads((out / "results.json").read_text())
    return {subset["name"]: subset["score"] for subset in document["subsets"]} | {"Mean": document["score"]}


def table_rows(output: str) -> dict[str, list[str]]:
    """The printed table's rows by subset name (Mean for the overall row), their cells stripped."""
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in output.splitlines() if line[:2] == "| "]
    return {cells[0].replace("**", "").replace(" (unweighted)", ""): cells for cells in rows[1:]}


def test_the_difference_is_the_evaluations_and_unmoved_subsets_have_no_spread(evaluations, capsys):
    root, data, rows = evaluations
    folders = {"./evals/warm-start-val": root / "right", "./evals/grpo-step8-val": root / "wrong"}
    words = {shown: str(folder) for shown, folder in folders.items()} | {"./data/eval/val.parquet": str(data)}
    main(readme_arguments("evaluation/README.md", "python -m evaluation.compare", words))  # the README's command
    output = capsys.readouterr().out
    main([str(root / "right"), str(root / "wrong" / "results.json"), "--data", str(data)])  # a results.json: the same
    assert capsys.readouterr().out == output
    printed = table_rows(output)
    right, wrong = subset_scores(root / "right"), subset_scores(root / "wrong")
    assert right["arithmetic"] > 0 and wrong["arithmetic"] == 0
    for name, cells in printed.items():
        assert float(cells[5]) == pytest.approx(100 * (wrong[name] - right[name]), abs=0.051)
        if name not in ("arithmetic", "Mean"):
            assert cells[6] == "+0.0 to +0.0" and cells[7] == "1.000"  # the same credits in every draw
    assert printed["arithmetic"][7] == printed["Mean"][7] == "1.000"  # every draw: worse
    facts = {(row["subset"], row["additional_metadata"]["fact"]) for row in rows}
    assert int(printed["Mean"][2]) == len(facts) < int(printed["Mean"][1]) == len(rows)


def planted(credits: dict[str, float]) -> RowCredits:
    score = sum(credits.values()) / len(credits)
    return RowCredits(Path("planted"), score, credits, dict.fromkeys(credits, "s"))


def test_the_rows_of_a_fact_are_drawn_together():
    """Fact A: 9 rows the other judge gets right; fact B: 1 row it gets wrong. Drawing facts, a quarter of the draws
    hold B twice: the interval reaches 0. Drawing rows, nine of ten are right: the interval stays far above 0."""
    ids = [f"A/{n}" for n in range(9)] + ["B/0"]
    base = planted(dict.fromkeys(ids, 0.0))
    other = planted({row_id: float(row_id.startswith("A")) for row_id in ids})
    config = CompareConfig("base", "other", draws=4000)
    by_fact = compare(base, other, {row_id: row_id[0] for row_id in ids}, config)[-1]
    by_row = compare(base, other, {row_id: row_id for row_id in ids}, config)[-1]
    assert (by_fact.groups, by_row.groups) == (2, 10)
    assert by_fact.difference == by_row.difference == pytest.approx(0.9)
    assert by_fact.low == 0.0 and by_row.low > 0.5


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda doc: doc.pop("row_scores"), "no row_scores; evaluate with --row-scores"),
        (lambda doc: doc["row_scores"].pop(), "did not evaluate the same rows"),
        (lambda doc: doc["row_scores"][0].update(subset="Ties"), "Ties subsets cannot be compared row by row: Ties"),
        (lambda doc: doc.update(score=0.99), "its row credits give"),
    ],
)
def test_what_cannot_be_compared_is_refused_by_name(evaluations, tmp_path, change, message):
    root, _, _ = evaluations
    document = json.loads((root / "wrong" / "results.json").read_text())
    change(document)
    (tmp_path / "results.json").write_text(json.dumps(document))
    with pytest.raises(SystemExit, match=message):
        main([str(root / "right"), str(tmp_path)])


def test_a_data_file_that_is_not_the_evaluated_one_is_refused(evaluations, tmp_path):
    root, data, _ = evaluations
    other = tmp_path / "other.parquet"
    offline.generate(tmp_path / "other", dataclasses.replace(SMALL, seed=5))
    pq.write_table(pq.read_table(tmp_path / "other" / outputs.EVAL_VAL_FILE), other)
    with pytest.raises(SystemExit, match="not the evaluated file, it lacks row ids"):
        main([str(root / "right"), str(root / "wrong"), "--data", str(other)])
