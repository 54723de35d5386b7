"""`python -m evaluation --likelihood-model DIR`: a language model's own likelihood of each completion as the
judge, the baseline a trained judge should beat. Scores checked against transformers' own loss."""

from __future__ import annotations

import json
import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from evaluation.cli import main
from tests.support.readme_blocks import readme_arguments
from tests.test_evaluate_e2e import rb2_row

LIKELIHOOD_COMMAND = "python -m evaluation --data ./data/eval/test.parquet --likelihood-model ./models/smollm2"

ROWS = [
    rb2_row("capital-0", "capitals", ["The capital of Kenya is Nairobi."], ["The capital of Kenya is Lima.", "Paris."]),
    rb2_row("sum-0", "arithmetic", ["3 + 19 is 22."], ["3 + 19 is 12.", "3 + 19 is 23."]),
]


@pytest.fixture(scope="module")
def eval_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("likelihood") / "test.parquet"
    pq.write_table(pa.Table.from_pylist([{**row, "reference": "x"} for row in ROWS]), path)
    return path


def transformers_likelihood(model_dir, prompt: str, completion: str) -> float:
    """exp(-loss) of the completion tokens after the chat-formatted prompt, by transformers' own loss."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
    )
    prefix = tokenizer(text, add_special_tokens=False)["input_ids"]
    ids = prefix + tokenizer(completion, add_special_tokens=False)["input_ids"]
    labels = [-100] * len(prefix) + ids[len(prefix) :]
    with torch.no_grad():
        loss = model(torch.tensor([ids]), labels=torch.tensor([labels])).loss.item()
    return math.exp(-loss)


def test_each_completion_scores_its_likelihood_after_the_prompt(eval_file, tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "out"
    words = {  # experiments/evaluation/LOG.md's command, on this file and the tiny model
        "./data/eval/test.parquet": str(eval_file),
        "./models/smollm2": str(tiny_model_dir),
        "./evals/base-likelihood": str(out),
    }
    main([*readme_arguments("experiments/evaluation/LOG.md", LIKELIHOOD_COMMAND, words), "--row-scores"])
    results = json.loads((out / "results.json").read_text())
    assert results["judge"]["kind"] == "likelihood" and results["failed_rows"] == 0
    assert results["config"]["judge"] == {"likelihood": {"likelihood_model": str(tiny_model_dir)}}
    scores = {row["id"]: row["scores"] for row in results["row_scores"]}
    for row in ROWS:
        completions = [*row["chosen"], *row["rejected"]]
        expected = [transformers_likelihood(tiny_model_dir, row["prompt"], c) for c in completions]
        assert scores[row["id"]] == pytest.approx(expected, rel=1e-4)
    assert len(set(scores["sum-0"])) == 3  # the completions differ, and so do their scores


def test_a_second_judge_is_refused(eval_file, tiny_model_dir, tmp_path, capsys):
    with pytest.raises(SystemExit, match="^2$"):  # argparse's usage error
        main(
            [
                "--data",
                str(eval_file),
                "--likelihood-model",
                str(tiny_model_dir),
                "--out",
                str(tmp_path),
                "--judge-url",
                "http://127.0.0.1:1",
            ]
        )
    assert "give one judge: --judge-url and --likelihood-model were both given" in capsys.readouterr().err


def test_a_reference_is_refused_before_judging(eval_file, tiny_model_dir, tmp_path):
    given = ["--data", str(eval_file), "--likelihood-model", str(tiny_model_dir), "--out", str(tmp_path / "out")]
    with pytest.raises(SystemExit, match="the likelihood judge .* ignores each request's reference answer"):
        main([*given, "--reference-column", "reference"])
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def short_model_dir(tiny_model_dir, tmp_path_factory):
    """The tiny model with 48 positions and a tokenizer without a pad token (likelihood scoring pads nothing)."""
    out = tmp_path_factory.mktemp("short_model")
    AutoModelForCausalLM.from_pretrained(tiny_model_dir).save_pretrained(out)
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 48, "pad_token_id": None}))
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    tokenizer.pad_token = None
    tokenizer.save_pretrained(out)
    assert AutoTokenizer.from_pretrained(out).pad_token_id is None
    return out


def test_an_input_past_the_models_positions_fails_its_row_and_no_pad_token_is_needed(short_model_dir, tmp_path):
    long_answer = " ".join(["Nairobi"] * 40)
    rows = [ROWS[0], rb2_row("long-0", "capitals", ["The capital of Kenya is Nairobi."], [long_answer])]
    data = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist(rows), data)
    out = tmp_path / "out"
    main(["--data", str(data), "--likelihood-model", str(short_model_dir), "--out", str(out), "--row-scores"])
    results = json.loads((out / "results.json").read_text())
    assert results["failed_rows"] == 1
    failed = [row for row in results["row_scores"] if row["id"] == "long-0"]
    assert "tokens, past the model's 48" in json.dumps(failed)
    scored = [row for row in results["row_scores"] if row["id"] == "capital-0"]
    assert scored and all(score is not None for score in scored[0]["scores"])
