"""RewardBench 2 conversion on a stand-in parquet file of the upstream schema."""

import json
import re
from collections import Counter, defaultdict

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data_prep import cli, rewardbench2
from data_prep.records import DataError, read_records
from evaluation.data import load_rows as load_eval_rows
from judge_core.protocol import templates

SUBSETS = ("Factuality", "Precise IF", "Math", "Safety", "Focus")
METADATA = pa.struct([("category", pa.string()), ("index", pa.float64()), ("models", pa.list_(pa.string()))])
UPSTREAM_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("prompt", pa.string()),
        ("chosen", pa.list_(pa.string())),
        ("rejected", pa.list_(pa.string())),
        ("num_correct", pa.int64()),
        ("num_incorrect", pa.int64()),
        ("total_completions", pa.int64()),
        ("models", pa.list_(pa.string())),
        ("subset", pa.string()),
        ("additional_metadata", METADATA),
    ]
)


def upstream_rows():
    rows = []
    for subset in SUBSETS:
        for n in range(10):
            rows.append(
                {
                    "id": f"{len(rows)}",
                    "prompt": f"{subset} question {n}?",
                    "chosen": [f"{subset} good {n}"],
                    "rejected": [f"{subset} bad {n}.{k}" for k in range(3)],
                    "num_correct": 1,
                    "num_incorrect": 3,
                    "total_completions": 4,
                    "models": ["m1", "m2", "m3", "m4"],
                    "subset": subset,
                    "additional_metadata": {"category": subset.lower(), "index": float(n), "models": ["m1"]},
                }
            )
    for tie_id, correct in (("ref:1", 1), ("tied:1", 3), ("ref:2", 1), ("tied:2", 2)):
        rows.append(
            {
                "id": tie_id,
                "prompt": f"Ties {tie_id}?",
                "chosen": [f"right {k}" for k in range(correct)],
                "rejected": ["wrong a", "wrong b"],
                "num_correct": correct,
                "num_incorrect": 2,
                "total_completions": correct + 2,
                "models": ["m"] * (correct + 2),
                "subset": "Ties",
                "additional_metadata": {"category": "ties", "index": None, "models": []},
            }
        )
    return rows


UPSTREAM = upstream_rows()
BY_PROMPT = {row["prompt"]: row for row in UPSTREAM}


@pytest.fixture
def upstream_file(tmp_path):
    path = tmp_path / "test.parquet"
    pq.write_table(pa.Table.from_pylist(UPSTREAM, schema=UPSTREAM_SCHEMA), path)
    return path


def convert(path, out, **config):
    return rewardbench2.convert(read_records(path), out, rewardbench2.RewardBench2Config(**config))


def read(out, name):
    return pd.read_parquet(out / name).to_dict("records")


def conversation_prompt(row):
    """The original question inside a GRPO row's judge prompt."""
    content = row["prompt"][0]["content"]
    return content.split("## Conversation\n[User]\n", 1)[1].split("\n\n## ", 1)[0]


def ids_of(out, name):
    return {row["extra_info"]["prompt_id"] for row in read(out, name)}


def test_prompt_ids_are_split_per_subset_and_never_shared(upstream_file, tmp_path):
    convert(upstream_file, tmp_path / "out", eval_fraction=0.2, val_fraction=0.1)
    train = ids_of(tmp_path / "out", "grpo/pointwise/train.parquet")
    val = ids_of(tmp_path / "out", "grpo/pointwise/val.parquet")
    eval_ids = {row["id"] for row in read(tmp_path / "out", "eval/test.parquet")}
    assert not train & val and not train & eval_ids and not val & eval_ids
    assert train | val | eval_ids == {row["id"] for row in UPSTREAM}
    assert ids_of(tmp_path / "out", "grpo/pairwise/train.parquet") == train
    assert ids_of(tmp_path / "out", "grpo/pairwise/val.parquet") == val
    subset_of = {row["id"]: row["subset"] for row in UPSTREAM}
    assert Counter(subset_of[i] for i in eval_ids) == {**dict.fromkeys(SUBSETS, 2), "Ties": 4}
    assert Counter(subset_of[i] for i in val) == dict.fromkeys(SUBSETS, 1)
    assert Counter(subset_of[i] for i in train) == dict.fromkeys(SUBSETS, 7)


def test_ties_are_never_trained_on_and_all_go_to_eval(upstream_file, tmp_path):
    summary = convert(upstream_file, tmp_path / "out")
    for name in ("grpo/pointwise/train.parquet", "grpo/pairwise/train.parquet", "grpo/pointwise/val.parquet"):
        assert all(row["extra_info"]["subset"] != "Ties" for row in read(tmp_path / "out", name))
    ties = [row for row in read(tmp_path / "out", "eval/test.parquet") if row["subset"] == "Ties"]
    assert sorted(row["id"] for row in ties) == ["ref:1", "ref:2", "tied:1", "tied:2"]
    reason = "Ties subset (several correct answers; all 4 rows go to eval/)"
    assert summary.skipped[("grpo/pointwise", reason)] == 4
    assert summary.skipped[("grpo/pairwise", "prompt id held out for eval/")] == 10


def test_eval_keeps_the_upstream_schema_and_rows(upstream_file, tmp_path):
    convert(upstream_file, tmp_path / "out")
    assert pq.read_schema(tmp_path / "out" / "eval" / "test.parquet") == UPSTREAM_SCHEMA
    written = pq.read_table(tmp_path / "out" / "eval" / "test.parquet").to_pylist()
    by_id = {row["id"]: row for row in UPSTREAM}
    assert written == [by_id[row["id"]] for row in written]


def test_eval_file_loads_with_the_project_evaluation(upstream_file, tmp_path):
    convert(upstream_file, tmp_path / "out")
    rows = load_eval_rows(tmp_path / "out" / "eval" / "test.parquet")
    assert len(rows) == 14 and sum(row.is_ties for row in rows) == 4


def test_pointwise_labels_chosen_4_and_one_sampled_rejected_0(upstream_file, tmp_path):
    convert(upstream_file, tmp_path / "out")
    rows = read(tmp_path / "out", "grpo/pointwise/train.parquet")
    labels_by_prompt = defaultdict(list)
    for index, row in enumerate(rows):
        upstream = BY_PROMPT[conversation_prompt(row)]
        score = templates.read_ground_truth(row["reward_model"]["ground_truth"])["score"]
        answer = (
            upstream["chosen"][0]
            if score == 4
            else next(a for a in upstream["rejected"] if row["prompt"][0]["content"].count(a))
        )
        assert score in (0, 4)
        assert [dict(m) for m in row["prompt"]] == templates.pointwise_messages(upstream["prompt"], answer)
        assert row["data_source"] == "rewardbench2/pointwise"
        row_number = int(upstream["id"]) + 1
        assert row["extra_info"] == {
            "split": "train",
            "index": index,
            "prompt_id": upstream["id"],
            "subset": upstream["subset"],
            "source": f"test.parquet row {row_number}",
        }
        labels_by_prompt[upstream["id"]].append(score)
    assert all(sorted(labels) == [0, 4] for labels in labels_by_prompt.values())


def test_pointwise_can_take_every_rejected_answer(upstream_file, tmp_path):
    convert(upstream_file, tmp_path / "out", pointwise_rejected=3)
    rows = read(tmp_path / "out", "grpo/pointwise/train.parquet")
    scores = Counter(json.loads(row["reward_model"]["ground_truth"])["score"] for row in rows)
    assert scores == {4: 35, 0: 105}  # 7 train ids in each of the 5 subsets


def test_pairwise_pairs_the_chosen_with_each_rejected_in_balanced_positions(upstream_file, tmp_path):
    convert(upstream_file, tmp_path / "out")
    rows = read(tmp_path / "out", "grpo/pairwise/train.parquet")
    assert len(rows) == 35 * 3
    labels, pairs = Counter(), set()
    for row in rows:
        upstream = BY_PROMPT[conversation_prompt(row)]
        better = templates.read_ground_truth(row["reward_model"]["ground_truth"])["better"]
        rejected = next(a for a in upstream["rejected"] if a in row["prompt"][0]["content"])
        a, b = (upstream["chosen"][0], rejected) if better == "A" else (rejected, upstream["chosen"][0])
        assert [dict(m) for m in row["prompt"]] == templates.pairwise_messages(upstream["prompt"], a, b)
        labels[better] += 1
        pairs.add((upstream["id"], rejected))
    assert labels == {"A": 52, "B": 53}
    assert len(pairs) == 105


def test_same_seed_same_output_other_seed_other_split(upstream_file, tmp_path):
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        convert(upstream_file, tmp_path / name, seed=seed)
    for name in ("grpo/pointwise/train.parquet", "grpo/pairwise/train.parquet", "eval/test.parquet"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    train_ids = [ids_of(tmp_path / name, "grpo/pointwise/train.parquet") for name in ("a", "c")]
    assert train_ids[0] != train_ids[1]


def test_jsonl_input_and_cli_summary(tmp_path, capsys):
    path = tmp_path / "rb2.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in UPSTREAM))
    cli.main(["rewardbench2", "--input", str(path), "--out", str(tmp_path / "out")])
    first_line, *rest = capsys.readouterr().out.splitlines()
    assert first_line == f"rewardbench2: wrote 214 rows under {tmp_path / 'out'}"
    assert rest == [
        "  eval/test.parquet                  14 rows",
        "  grpo/pairwise/train.parquet       105 rows",
        "  grpo/pairwise/val.parquet          15 rows",
        "  grpo/pointwise/train.parquet       70 rows",
        "  grpo/pointwise/val.parquet         10 rows",
        "skipped:",
        "  grpo/pairwise: Ties subset (several correct answers; all 4 rows go to eval/): 4",
        "  grpo/pairwise: prompt id held out for eval/: 10",
        "  grpo/pointwise: Ties subset (several correct answers; all 4 rows go to eval/): 4",
        "  grpo/pointwise: prompt id held out for eval/: 10",
    ]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("rejected", "oops", "test.jsonl line 3: field 'rejected' must be a list of strings, got 'oops'"),
        (
            "chosen",
            [],
            "test.jsonl line 3: field 'chosen' must be a non-empty list of strings outside the Ties subset, got []",
        ),
        ("num_correct", -1, "test.jsonl line 3: field 'num_correct' must be an int 0-1000000, got -1"),
        ("id", 7, "test.jsonl line 3: field 'id' must be a string, got 7"),
    ],
)
def test_a_bad_row_names_file_line_and_field(tmp_path, field, value, message):
    rows = [dict(row) for row in UPSTREAM]
    rows[2][field] = value
    path = tmp_path / "test.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(DataError, match=f"^{re.escape(message)}$"):
        convert(path, tmp_path / "out")


# The dataset card's YAML as allenai/reward-bench-2 has it: one parquet-backed `test` split under data/.
REWARDBENCH2_CARD = """---
license: odc-by
configs:
- config_name: default
  data_files:
  - split: test
    path: data/test-*
---
# RewardBench 2 (test stand-in)
"""


def test_hub_reads_the_test_split(monkeypatch, tmp_path):
    """The real `datasets.load_dataset` path, offline, on a local copy of the hub repository's layout: the
    hub name resolves to ./allenai/reward-bench-2 (a local directory wins over the hub), whose card and
    files are laid out as on the hub. A wrong split name, repo layout or column finds nothing or fails."""
    import datasets

    repo = tmp_path / "hub" / rewardbench2.HUB_NAME
    (repo / "data").mkdir(parents=True)
    (repo / "README.md").write_text(REWARDBENCH2_CARD)
    pq.write_table(
        pa.Table.from_pylist(UPSTREAM, schema=UPSTREAM_SCHEMA), repo / "data" / "test-00000-of-00001.parquet"
    )
    monkeypatch.chdir(tmp_path / "hub")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets_cache")

    summary = rewardbench2.convert(rewardbench2.records_from(hub=rewardbench2.HUB_NAME), tmp_path / "out")
    assert summary.written["eval/test.parquet"] == 14
    eval_rows = read(tmp_path / "out", "eval/test.parquet")
    for row in eval_rows:
        upstream = BY_PROMPT[row["prompt"]]
        assert (row["id"], list(row["chosen"]), list(row["rejected"])) == (
            upstream["id"],
            upstream["chosen"],
            upstream["rejected"],
        )
    trained = read(tmp_path / "out", "grpo/pointwise/train.parquet")
    assert trained[0]["extra_info"]["source"].startswith("allenai/reward-bench-2[test] row ")
