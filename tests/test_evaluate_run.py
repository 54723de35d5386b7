"""The evaluation run with a stand-in judge: batching, ordering and what a row is scored by."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from evaluation.data import EvalRow
from evaluation.judges import EvaluationError
from evaluation.report import markdown_report, results_json
from evaluation.run import EvaluationOptions, evaluate, judge_rows
from serving.judges import Verdict


class LengthJudge:
    """Scores a completion by its length (raw_reward = length, score = length / 100); batches finish in
    reverse order of submission, so only correct reassembly keeps the rows right."""

    def __init__(self, kind="scalar", parallel_calls=3, failing=()):
        self.identity = {"kind": kind, "backend": "test", "model_id": "length", "model_version": "1", "access": "test"}
        self.parallel_calls = parallel_calls
        self.failing = set(failing)
        self.batch_sizes = []
        self._lock = threading.Lock()

    def score_batch(self, items):
        with self._lock:
            self.batch_sizes.append(len(items))
            delay = 0.05 / len(self.batch_sizes)
        time.sleep(delay)
        return [
            Verdict.failed("too long")
            if item.completion in self.failing
            else Verdict(score=len(item.completion) / 100, metadata={"raw_reward": float(len(item.completion))})
            for item in items
        ]


ROWS = [
    EvalRow("a", "q", ("aaaa",), ("a", "aa"), "Math"),
    EvalRow("b", "q", ("b",), ("bbbbbb", "bb"), "Math"),
    EvalRow("c", "q", ("ccc",), ("cc",), "Focus"),
]


def test_rows_get_their_own_scores_whatever_order_batches_finish_in():
    judge = LengthJudge()
    scored = judge_rows(ROWS, judge, batch_size=2, score_field="score")
    assert judge.batch_sizes == [2, 2, 2, 2]
    assert [(r.id, r.scores) for r in scored] == [
        ("a", (0.04, 0.01, 0.02)),
        ("b", (0.01, 0.06, 0.02)),
        ("c", (0.03, 0.02)),
    ]


def test_raw_reward_ranks_by_the_reward_before_the_sigmoid():
    scored = judge_rows(ROWS, LengthJudge(), batch_size=4, score_field="raw_reward")
    assert scored[0].scores == (4.0, 1.0, 2.0)


def test_one_failed_judgement_fails_the_whole_row():
    scored = judge_rows(ROWS, LengthJudge(failing={"bb"}), batch_size=4, score_field="score")
    assert [(r.id, r.error) for r in scored if r.failed] == [("b", "too long")]


def test_evaluate_scores_subsets_and_refuses_raw_reward_without_a_scalar_judge(tmp_path):
    options = EvaluationOptions(Path("data.parquet"), tmp_path, batch_size=3)
    result = evaluate(ROWS, LengthJudge(), options, judge_config={}, data_digest="x")
    # Math: row a chosen 4 is the longest (1), row b chosen 1 is not (0) -> 0.5; Focus: 3 > 2 -> 1
    assert [(s.name, s.score) for s in result.subsets] == [("Math", 0.5), ("Focus", 1.0)]
    assert result.score == 0.75
    raw = EvaluationOptions(Path("data.parquet"), tmp_path, score_field="raw_reward")
    with pytest.raises(EvaluationError, match="needs a scalar judge"):
        evaluate(ROWS, LengthJudge(kind="generative"), raw, judge_config={}, data_digest="x")


class ReferenceJudge:
    """A pairwise-like stand-in: compares each completion with the item's `answer` (score 1 when they are
    equal, else 0.5 for "long" completions and 0 for short ones) and says the two orders agreed unless the
    completion starts with "?". A completion "!" fails."""

    identity = {"kind": "generative", "backend": "test", "model_id": "ref", "model_version": "1", "access": "test"}
    parallel_calls = 1

    def __init__(self, agree_value=None):
        self.answers = []
        self.agree_value = agree_value

    def score_batch(self, items):
        self.answers += [item.answer for item in items]
        return [self._verdict(item) for item in items]

    def _verdict(self, item):
        if item.completion == "!":
            return Verdict.failed("unparsable", orders_agree=True)
        score = 1.0 if item.completion == item.answer else 0.5 if len(item.completion) > 3 else 0.0
        agree = not item.completion.startswith("?") if self.agree_value is None else self.agree_value
        return Verdict(score=score, metadata={"orders_agree": agree})


REFERENCE_ROWS = [
    EvalRow("a", "q", ("yes",), ("?no", "long no", "long maybe"), "Math", reference="yes"),
    EvalRow("b", "q", ("sure",), ("?x", "?y"), "Math", reference="ok"),
    EvalRow("c", "q", ("fine",), ("!",), "Focus", reference="fine"),
]


def test_the_reference_goes_out_as_the_answer_and_orders_agree_comes_back():
    judge = ReferenceJudge()
    scored = judge_rows(REFERENCE_ROWS, judge, batch_size=4, score_field="score")
    assert judge.answers == ["yes"] * 4 + ["ok"] * 3 + ["fine"] * 2
    assert [r.orders_agree for r in scored] == [(True, False, True, True), (True, False, False), (True, None)]
    assert scored[2].failed  # the failed verdict's metadata is no judged completion's


def test_without_a_reference_no_answer_is_sent():
    judge = ReferenceJudge()
    judge_rows(ROWS, judge, batch_size=4, score_field="score")
    assert judge.answers == [None] * 8


def test_an_orders_agree_that_is_not_a_bool_stops_the_run_naming_the_row():
    with pytest.raises(EvaluationError, match=r"^row a completion 0: metadata orders_agree is 'yes', not a bool$"):
        judge_rows(REFERENCE_ROWS, ReferenceJudge(agree_value="yes"), batch_size=4, score_field="score")


def test_results_and_report_carry_tied_completions_and_position_consistency(tmp_path):
    options = EvaluationOptions(Path("data.parquet"), tmp_path, batch_size=3)
    result = evaluate(REFERENCE_ROWS, ReferenceJudge(), options, judge_config={}, data_digest="x")
    document = results_json(result)
    # row a scores 1.0, 0.0, 0.5, 0.5 and row b 0.5, 0.0, 0.0: 2 + 2 tied; row c failed ("!")
    assert document["tied_completions"] == {
        "share": 4 / 7,
        "completions": 7,
        "tied": 4,
        "rows_with_ties_share": 1.0,
        "rows": 2,
        "rows_with_ties": 2,
    }
    # the correct completions (chosen, first in each row) agree in a, b and c; the incorrect ones in 2 of 5
    assert document["position_consistency"] == {
        "share": 5 / 8,
        "completions": 8,
        "agreeing": 5,
        "correct_completions": {"share": 1.0, "completions": 3, "agreeing": 3},
        "incorrect_completions": {"share": 2 / 5, "completions": 5, "agreeing": 2},
    }
    report = markdown_report(result)
    assert "- Tied completions: 57.1% of 7 share their score exactly" in report
    assert "100.0% of 2 rows have a tie" in report
    assert "- Position consistency: 62.5% of 8 judged completions" in report
    assert "swapped (100.0% of the 3 correct ones; 40.0% of the 5 incorrect ones)" in report


def test_a_judge_that_never_judges_both_orders_reports_no_position_consistency(tmp_path):
    result = evaluate(ROWS, LengthJudge(), EvaluationOptions(Path("d"), tmp_path), judge_config={}, data_digest="x")
    assert results_json(result)["position_consistency"] is None
    assert "Position consistency" not in markdown_report(result)
    assert results_json(result)["tied_completions"]["tied"] == 0
