"""`python -m evaluation --all-pairs`: a pairwise judge scored with no reference answer, each row's completions
compared with each other (every pair, both orders), through a real judge server's /judge_group and in process.
The judge is test_serving_pairwise.py's scripted one: it reads the marker ending response A, so a <good> response
beats a <bad> one in both orders, while two <bad> ones (or two <good> ones) split by position."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evaluation.cli import main
from tests.support.servers import start_server
from tests.test_evaluate_e2e import rb2_row
from tests.test_serving_generative import pointwise_script_judge_dir  # noqa: F401  (a module fixture used below)
from tests.test_serving_pairwise import pairwise_judge_dir  # noqa: F401  (a module fixture used below)
from tests.test_serving_scalar import assert_clean_shutdown

pytestmark = pytest.mark.e2e

# good vs bad: (0.9 + 0.7) / 2 = 0.8 to good, in both orders; bad vs bad: (0.3 + 0.7) / 2 = 0.5, orders disagreeing
GOOD_SCORE, BAD_SCORE = 0.8, (0.2 + 0.5 + 0.5) / 3


@pytest.fixture(scope="module")
def eval_file(tmp_path_factory):
    rows = [
        rb2_row("won", "Math", ["It is 4. <good>"], ["It is 5. <bad>", "It is 3. <bad>", "Six. <bad>"]),
        rb2_row("lost", "Math", ["It is 8. <bad>"], ["It is 7. <good>", "It is 9. <bad>", "Ten. <bad>"]),
    ]
    path = tmp_path_factory.mktemp("all_pairs") / "test.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def evaluate(eval_file, out, *judge) -> dict:
    main(["--data", str(eval_file), "--out", str(out), "--all-pairs", "--row-scores", *judge])
    return json.loads((out / "results.json").read_text())


@pytest.fixture(scope="module")
def pairwise_server(pairwise_judge_dir, tmp_path_factory):  # noqa: F811
    running = start_server(
        ["--model", str(pairwise_judge_dir), "--max-new-tokens", "8"],
        log_path=tmp_path_factory.mktemp("all_pairs_server") / "server.log",
    )
    yield running
    assert_clean_shutdown(running)


def test_each_completion_scores_its_mean_win_over_its_siblings_without_a_reference(
    pairwise_server,
    pairwise_judge_dir,  # noqa: F811
    eval_file,
    tmp_path,
):
    served = evaluate(eval_file, tmp_path / "http", "--judge-url", pairwise_server.url)
    in_process = evaluate(
        eval_file, tmp_path / "in_process", "--model", str(pairwise_judge_dir), "--max-new-tokens", "8"
    )
    for document in (served, in_process):
        scores = {row["id"]: row["scores"] for row in document["row_scores"]}
        assert scores["won"] == pytest.approx([GOOD_SCORE, BAD_SCORE, BAD_SCORE, BAD_SCORE], abs=1e-5)
        assert scores["lost"] == pytest.approx([BAD_SCORE, GOOD_SCORE, BAD_SCORE, BAD_SCORE], abs=1e-5)
        assert document["score"] == pytest.approx(0.5)
        assert document["config"]["evaluation"]["all_pairs"] is True
        assert document["config"]["evaluation"]["reference_column"] is None
        # a completion is consistent when all its three comparisons agreed: each <good> one, no <bad> one
        consistency = document["position_consistency"]
        assert (consistency["completions"], consistency["agreeing"]) == (8, 2)
        assert consistency["correct_completions"]["agreeing"] == 1  # row won's chosen; row lost's chosen is <bad>
    assert served["row_scores"] == in_process["row_scores"]


def test_all_pairs_is_refused_with_a_reference_and_for_a_judge_that_cannot_compare(
    pointwise_script_judge_dir,  # noqa: F811
    eval_file,
    tmp_path,
    capsys,
):
    with pytest.raises(SystemExit, match="^2$"):  # argparse's usage error
        main(["--data", str(eval_file), "--out", str(tmp_path), "--all-pairs", "--reference-column", "reference"])
    assert "--all-pairs compares the completions with each other" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="--all-pairs needs a judge that compares two responses"):
        evaluate(eval_file, tmp_path / "pointwise", "--model", str(pointwise_script_judge_dir))
