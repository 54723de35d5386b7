"""`python -m evaluation` end to end with a tiny scalar judge: through a real judge server
subprocess on 127.0.0.1 and in-process, on a small RewardBench 2-schema parquet file."""

from __future__ import annotations

import json
import os
import subprocess

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evaluation.cli import main
from tests.support.readme_blocks import readme_arguments, readme_command
from tests.support.servers import free_port, start_server

from .conftest import REPO_ROOT

pytestmark = pytest.mark.e2e

API_KEY = "evaluation-test-key"
MAX_INPUT_TOKENS = "256"  # the long completion below exceeds it: one judgement fails on both paths
LONG_COMPLETION = "far too long " * 400


def rb2_row(row_id, subset, chosen, rejected):
    return {
        "id": row_id,
        "prompt": f"Question {row_id}: what is the answer?",
        "chosen": chosen,
        "rejected": rejected,
        "num_correct": len(chosen),
        "num_incorrect": len(rejected),
        "total_completions": len(chosen) + len(rejected),
        "models": ["test-model"] * (len(chosen) + len(rejected)),
        "subset": subset,
        "additional_metadata": {"source": "test"},
    }


@pytest.fixture(scope="module")
def eval_file(tmp_path_factory):
    rows = [
        rb2_row(f"fact-{i}", "Factuality", [f"The answer is {i}."], [f"It is {i + 1}.", "No idea.", f"{i} or so"])
        for i in range(3)
    ]
    rows.append(rb2_row("focus-0", "Focus", ["A focused answer."], ["An answer about something else entirely."]))
    rows.append(rb2_row("focus-1", "Focus", ["Short."], [LONG_COMPLETION]))
    for n in (1, 2):
        rows.append(rb2_row(f"ref:{n}", "Ties", [f"Exactly {n}."], [f"Not {n}.", "Maybe."]))
        rows.append(rb2_row(f"tied:{n}", "Ties", [f"{n}.", f"It's {n}.", f"The number {n}."], ["Zero.", "Many."]))
    path = tmp_path_factory.mktemp("rb2") / "test.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.fixture(scope="module")
def judge_server(tiny_scalar_judge_dir, tmp_path_factory):
    with start_server(
        ["--model", str(tiny_scalar_judge_dir), "--max-input-tokens", MAX_INPUT_TOKENS, "--api-key", API_KEY],
        log_path=tmp_path_factory.mktemp("judge_server") / "server.log",
    ) as server:
        yield server


# evaluation/README.md's quick start: its first command over HTTP, its second in process
QUICK_START = "# through a running judge server"


@pytest.fixture(scope="module")
def http_run(judge_server, eval_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("http_run")
    words = {"OUT/eval/test.parquet": str(eval_file), "http://127.0.0.1:8888": judge_server.url, "eval_out": str(out)}
    completed = subprocess.run(
        [*readme_command("evaluation/README.md", QUICK_START, words, index=0), "--batch-size", "5", "--row-scores"],
        cwd=REPO_ROOT,
        env={**os.environ, "JUDGE_MODEL_API_KEY": API_KEY},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return out, completed.stdout


@pytest.fixture(scope="module")
def in_process_run(tiny_scalar_judge_dir, eval_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("in_process_run")
    words = {"OUT/eval/test.parquet": str(eval_file), "JUDGE_DIR": str(tiny_scalar_judge_dir), "eval_out": str(out)}
    command = readme_arguments("evaluation/README.md", QUICK_START, words, index=1)
    main([*command, "--max-input-tokens", MAX_INPUT_TOKENS, "--batch-size", "7", "--row-scores"])
    return out


def results(out):
    return json.loads((out / "results.json").read_text())


def test_http_run_writes_every_output_and_says_where(http_run, eval_file):
    out, stdout = http_run
    for name in ("results.json", "report.md", "chart.png"):
        assert str(out / name) in stdout
    document = results(out)
    assert [s["name"] for s in document["subsets"]] == ["Factuality", "Focus", "Ties"]
    assert [s["rows"] for s in document["subsets"]] == [3, 2, 4]
    assert document["data"]["path"] == str(eval_file)
    assert document["judge"]["kind"] == "scalar" and document["judge"]["access"].startswith("HTTP http://127.0.0.1")
    assert document["config"]["judge"]["http"]["api_key"] == "set"
    assert API_KEY not in (out / "results.json").read_text()


def test_a_failed_judgement_fails_its_row_visibly(http_run):
    out, _ = http_run
    document = results(out)
    assert document["failed_rows"] == 1
    focus = next(s for s in document["subsets"] if s["name"] == "Focus")
    assert focus["failed"] == 1
    failed = [r for r in document["row_scores"] if r["error"]]
    assert [(r["id"], r["scores"], r["credit"]) for r in failed] == [("focus-1", None, 0.0)]
    assert "--max-input-tokens" in failed[0]["error"]
    report = (out / "report.md").read_text()
    assert "Failed rows: 1 of 9" in report and "--max-input-tokens" in report


def test_subset_scores_follow_from_the_row_scores(http_run):
    out, _ = http_run
    document = results(out)
    credits = [r["credit"] for r in document["row_scores"] if r["subset"] == "Factuality"]
    factuality = document["subsets"][0]
    assert factuality["score"] == pytest.approx(sum(credits) / 3)
    assert factuality["chance"] == pytest.approx(0.25)
    assert document["score"] == pytest.approx(sum(s["score"] for s in document["subsets"]) / 3)
    assert document["subsets"][2]["ties_components"]["paired_prompts"] == 2


def test_http_and_in_process_give_the_same_scores(http_run, in_process_run):
    over_http, in_process = results(http_run[0]), results(in_process_run)
    assert [r["id"] for r in over_http["row_scores"]] == [r["id"] for r in in_process["row_scores"]]
    for remote, local in zip(over_http["row_scores"], in_process["row_scores"], strict=True):
        assert (remote["scores"] is None) == (local["scores"] is None)
        if remote["scores"] is not None:
            assert remote["scores"] == pytest.approx(local["scores"], rel=1e-5, abs=1e-7)
    assert over_http["score"] == pytest.approx(in_process["score"], rel=1e-6)
    assert in_process["judge"]["access"].startswith("in-process from ")


@pytest.mark.parametrize("run", ["http", "in_process"])
def test_both_paths_report_tied_completions_from_their_row_scores(http_run, in_process_run, run):
    document = results(http_run[0] if run == "http" else in_process_run)
    scored = [r["scores"] for r in document["row_scores"] if r["scores"] is not None]
    tied = sum(sum(1 for s in scores if scores.count(s) > 1) for scores in scored)
    completions = sum(len(scores) for scores in scored)
    assert document["tied_completions"]["completions"] == completions == 30  # 32 less the failed row's 2
    assert document["tied_completions"]["tied"] == tied
    assert document["position_consistency"] is None  # a scalar judge judges no pair


def test_the_chart_is_a_valid_png(in_process_run):
    from PIL import Image

    with Image.open(in_process_run / "chart.png") as image:
        image.verify()
        assert image.format == "PNG" and image.size[0] > 400


def test_a_wrong_api_key_stops_the_run(judge_server, eval_file, tmp_path):
    with pytest.raises(SystemExit, match="HTTP 401"):
        main(["--data", str(eval_file), "--out", str(tmp_path), "--judge-url", judge_server.url, "--api-key", "wrong"])
    assert not (tmp_path / "results.json").exists()


def test_an_unreachable_server_stops_the_run_before_judging(eval_file, tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(SystemExit, match="cannot reach the judge server"):
        main(["--data", str(eval_file), "--out", str(tmp_path), "--judge-url", url])


def test_a_reference_the_served_judge_ignores_is_refused_before_judging(judge_server, eval_file, tmp_path):
    reference_file = tmp_path / "with_reference.parquet"
    table = pq.read_table(eval_file)
    pq.write_table(table.append_column("reference", pa.array(["x"] * table.num_rows)), reference_file)
    given = ["--data", str(reference_file), "--out", str(tmp_path / "out"), "--reference-column", "reference"]
    with pytest.raises(SystemExit, match="the scalar judge .* ignores each request's reference answer"):
        main([*given, "--judge-url", judge_server.url, "--api-key", API_KEY])
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("judge", "reference", "message"),
    [
        # a generative judge served without --reference-from-answer never sees the reference
        (["--judge", "generative"], True, "the generative judge .* ignores each request's reference answer"),
        (
            ["--judge", "generative", "--reference-from-answer"],
            False,
            "reads each request's reference answer, and none",
        ),
        (["--judge", "rule"], False, "the rule judge rules reads each request's reference answer, and none is given"),
    ],
)
def test_a_judge_asked_with_a_reference_it_does_not_read_or_without_one_it_reads_is_refused(
    tiny_model_dir, eval_file, tmp_path, judge, reference, message
):
    data = tmp_path / "rows.parquet"
    table = pq.read_table(eval_file)
    pq.write_table(table.append_column("reference", pa.array(["x"] * table.num_rows)), data)
    given = ["--data", str(data), "--out", str(tmp_path / "out"), *judge]
    if judge[1] != "rule":
        given += ["--model", str(tiny_model_dir), "--max-new-tokens", "4"]
    with pytest.raises(SystemExit, match=message):
        main([*given, *(["--reference-column", "reference"] if reference else [])])
