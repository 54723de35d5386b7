"""The evaluation run with a stand-in judge: batching, ordering and what a row is scored by."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from evaluation.data import EvalRow
from evaluation.judges import EvaluationError
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
