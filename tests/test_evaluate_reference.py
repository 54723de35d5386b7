"""evaluation.scoring against RewardBench 2's reference code, run side by side on the same scores.

The reference is rewardbench 0.1.4 from PyPI, which `make setup` installs without its dependencies
(Makefile, REWARDBENCH_SPEC): its `rewardbench/utils.py` is read from the installed package and only
its scoring functions are run: `reroll_and_score_dataset` (best-of-N credit), `process_single_model`
(the Ties score) and `sample_stats` (its helper). Importing the package whole would import torch,
fastchat and a pinned transformers. A best-of-N subset's score is the mean of the rows' credit, as the
reference's scripts/run_v2.py (not in the wheel) computes it.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import math
import random
from pathlib import Path

import pytest

from evaluation.scoring import ScoredRow, subset_results

REFERENCE = ("rewardbench", "0.1.4")
REFERENCE_FUNCTIONS = ("sample_stats", "process_single_model", "reroll_and_score_dataset")


@pytest.fixture(scope="module")
def reference() -> dict:
    """The reference's scoring functions, compiled from the installed rewardbench/utils.py."""
    name, version = REFERENCE
    spec = importlib.util.find_spec(name)  # finds the package without importing it
    assert spec is not None, f"{name}=={version} is not installed: run `make setup`"
    assert importlib.metadata.version(name) == version, f"run `make setup` to install {name}=={version}"
    source_path = Path(spec.origin).parent / "utils.py"
    module = ast.parse(source_path.read_text(), filename=str(source_path))
    functions = [node for node in module.body if isinstance(node, ast.FunctionDef) and node.name in REFERENCE_FUNCTIONS]
    assert sorted(node.name for node in functions) == sorted(REFERENCE_FUNCTIONS), source_path

    import numpy as np
    import pandas as pd
    from datasets import Dataset

    namespace = {"math": math, "np": np, "pd": pd, "Dataset": Dataset}
    exec(compile(ast.Module(body=functions, type_ignores=[]), str(source_path), "exec"), namespace)
    return namespace


def reference_scores(reference: dict, rows: list[ScoredRow]) -> dict[str, float]:
    """Each subset's score by the reference: one dataset row per completion, rerolled into one row per
    prompt (the best-of-N credit), then the Ties subset scored by process_single_model."""
    from datasets import Dataset

    scores = {}
    for subset in dict.fromkeys(row.subset for row in rows):
        members = [row for row in rows if row.subset == subset]
        flat = [
            {"id": row.id, "subset": subset, "num_correct": row.num_correct, "text": "", "scores": score}
            for row in members
            for score in row.scores
        ]
        rerolled = reference["reroll_and_score_dataset"](
            Dataset.from_list(flat), [len(row.scores) for row in members], cols_to_combine=["text", "scores"]
        )
        if subset.lower() == "ties":
            scores[subset] = reference["process_single_model"](rerolled)[1]
        else:
            scores[subset] = sum(rerolled["results"]) / len(rerolled)
    return scores


def project_scores(rows: list[ScoredRow]) -> dict[str, float]:
    return {result.name: result.score for result in subset_results(rows)}


# Score draws: distinct scores (a classifier), few levels (sampled generative ratings, rule judges), and
# ties at the cap (most answers get the top score).
DRAWS = {
    "continuous": lambda rng: rng.uniform(-3, 3),
    "few_levels": lambda rng: float(rng.randint(1, 3)),
    "ties_at_max": lambda rng: 1.0 if rng.random() < 0.7 else rng.choice([0.0, 0.5]),
}


def random_rows(rng: random.Random, draw) -> list[ScoredRow]:
    """A Best-of-N subset (1-2 chosen of 2-5 completions) and a Ties subset (ref:N with one correct
    answer, tied:N with 2-4; some prompt numbers with only one of the two rows)."""
    rows = []
    for number in range(rng.randint(3, 8)):
        completions = rng.randint(2, 5)
        scores = tuple(draw(rng) for _ in range(completions))
        rows.append(ScoredRow(f"focus-{number}", "Focus", rng.randint(1, min(2, completions - 1)), scores))
    prompts = rng.randint(2, 8)
    for number in range(prompts):
        kinds = ("ref", "tied") if number == 0 else rng.choice([("ref", "tied")] * 4 + [("ref",), ("tied",)])
        for kind in kinds:
            correct = 1 if kind == "ref" else rng.randint(2, 4)
            scores = tuple(draw(rng) for _ in range(correct + rng.randint(1, 3)))
            rows.append(ScoredRow(f"{kind}:{number}", "Ties", correct, scores))
    return rows


@pytest.mark.parametrize("kind", sorted(DRAWS))
def test_every_subset_score_equals_the_reference_code(reference, kind):
    rng = random.Random(kind)
    for case in range(15):
        rows = random_rows(rng, DRAWS[kind])
        expected = reference_scores(reference, rows)
        assert project_scores(rows) == pytest.approx(expected, rel=1e-12, abs=1e-12), f"{kind} case {case}: {rows}"


def test_prompts_whose_correct_answers_all_score_alike_leave_the_tanh_term_as_the_reference_does(reference):
    """Spread 0 everywhere: the reference's tanh term has no prompt, so it is 0 (not tanh(+-inf))."""
    rows = [
        ScoredRow("ref:1", "Ties", 1, (1.0, 0.0)),  # margin 1
        ScoredRow("tied:1", "Ties", 2, (1.0, 1.0, 0.0)),  # spread 0, margin 1
        ScoredRow("ref:2", "Ties", 1, (1.0, 1.0)),  # margin 0, inaccurate
        ScoredRow("tied:2", "Ties", 2, (1.0, 1.0, 1.0)),  # spread 0, margin 0, inaccurate
    ]
    [result] = subset_results(rows)
    # 0.30 * 1/2 + 0.30 * 1/2 + 0.20 * (1 > 0, 0 > 0: 1/2) + 0.20 * (min 1 > 0, min 0 > 0: 1/2) + 0.01 * 0
    assert result.ties.margin_score == 0.0
    assert result.score == pytest.approx(0.5)
    assert reference_scores(reference, rows) == {"Ties": pytest.approx(result.score, rel=1e-12)}
