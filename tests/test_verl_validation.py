"""A GRPO judge's verl validation dumps read per step (evaluation/verl_validation.py), on files written by verl's own
dump code with the recipes' own reward function, and drawn by `python -m evaluation.judge_curves --validation`."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
from verl.trainer.ppo.ray_trainer import RayPPOTrainer

from evaluation.judge_curves import OUTPUT, main
from evaluation.verl_validation import read_step, read_validation
from judge_core.grpo_rewards import REWARD_KEYS, compute_pairwise_score, compute_pointwise_score
from judge_core.protocol import templates
from tests.support.readme_blocks import readme_arguments
from tests.test_evaluate_run import ROWS, LengthJudge
from tests.test_judge_curves import evaluated

RIGHT, WRONG = "The capital of France is Paris.", "The capital of France is Rome."


def verdict(letter: str) -> str:
    return f"<think>Response A says something; Response B says something else.</think><better>{letter}</better>"


def as_decoded(messages: list[dict]) -> str:
    """The prompt as verl dumps it: the chat template's text decoded without its special tokens."""
    return f"user\n{messages[0]['content']}\nassistant\n"


def pairwise_row(question: str, first: str, second: str, output: str) -> tuple[str, str, str]:
    prompt = as_decoded(templates.pairwise_messages(question, first, second))
    return prompt, output, templates.pairwise_ground_truth("A" if first == RIGHT else "B")


def dump(folder: Path, step: int, rows: list[tuple[str, str, str]], reward=compute_pairwise_score) -> Path:
    """What verl 0.6.1's trainer writes at a validation step: its own _dump_generations on the reward's keys."""
    inputs, outputs, gts = map(list, zip(*rows, strict=True))
    rewards = [reward("offline/pairwise", output, truth) for output, truth in zip(outputs, gts, strict=True)]
    extra = {key: [reward[key] for reward in rewards] for key in REWARD_KEYS}
    scores = [reward["score"] for reward in rewards]
    RayPPOTrainer._dump_generations(SimpleNamespace(global_steps=step), inputs, outputs, gts, scores, extra, folder)
    return folder / f"{step}.jsonl"


def both_orders(question: str, verdict_right_first: str, verdict_right_second: str) -> list[tuple[str, str, str]]:
    return [
        pairwise_row(question, RIGHT, WRONG, verdict_right_first),
        pairwise_row(question, WRONG, RIGHT, verdict_right_second),
    ]


STEP_ROWS = [
    *both_orders("Capital of France?", verdict("A"), verdict("B")),  # reads the content: consistent, right twice
    *both_orders("Capital of France, again?", verdict("A"), verdict("A")),  # always A: inconsistent, right once
    *both_orders("France's capital?", verdict("B"), "B"),  # second answer malformed: the pair says nothing
    pairwise_row("Which city?", RIGHT, WRONG, verdict("A")),  # its other order is missing
]


def test_a_step_counts_consistent_pairs_failures_and_unpaired_rows(tmp_path):
    point = read_step(dump(tmp_path, 4, STEP_ROWS))
    assert (point.rows, point.format_failures, point.pairs, point.agreeing, point.unpaired) == (7, 1, 2, 1, 1)
    assert point.position_consistency == 0.5
    assert point.accuracy == pytest.approx(4 / 7)  # rows 1, 2, 3 and 7 are right


def test_a_pointwise_validation_has_no_position_consistency(tmp_path):
    prompt = as_decoded(templates.pointwise_messages("Capital of France?", RIGHT))
    rows = [(prompt, "<think>Right.</think><score>4</score>", templates.pointwise_ground_truth(4))]
    point = read_step(dump(tmp_path, 0, rows, reward=compute_pointwise_score))
    assert (point.rows, point.accuracy, point.pairs, point.unpaired) == (1, 1.0, 0, 0)
    assert math.isnan(point.position_consistency)


def test_judge_curves_prints_and_draws_the_validations_beside_the_evaluations(tmp_path, capsys):
    run = evaluated(tmp_path / "run" / "step0", LengthJudge(), ROWS).parent
    validation = tmp_path / "validation"
    dump(validation, 0, STEP_ROWS[:4])
    dump(validation, 4, STEP_ROWS)
    words = {  # evaluation/README.md's command, on this run
        "evals/val/grpo-seed1": str(run),
        "checkpoints/grpo-seed1/validation": str(validation),
        "plots/": str(tmp_path / "plots"),
    }
    main(readme_arguments("evaluation/README.md", "python -m evaluation.judge_curves evals/val/grpo-seed1", words))
    lines = capsys.readouterr().out.splitlines()
    header = lines.index(next(line for line in lines if "verl val accuracy" in line))
    assert lines[header + 1].split() == ["0", str(run), "0.750", "0/4", "0.500", "of", "2", "0"]
    assert lines[header + 2].split() == ["4", str(run), "0.571", "1/7", "0.500", "of", "2", "1"]
    assert lines[-1] == str(tmp_path / "plots" / OUTPUT)
    assert (tmp_path / "plots" / OUTPUT).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_folders_and_rows_of_something_else_are_errors_naming_them(tmp_path):
    with pytest.raises(FileNotFoundError, match=rf"^{tmp_path}: no <step>.jsonl"):
        read_validation(tmp_path)
    (tmp_path / "3.jsonl").write_text(json.dumps({"input": "x", "output": "y"}) + "\n")
    with pytest.raises(ValueError, match=r"3.jsonl:1: no \['gts', 'accuracy', 'format_ok'\]"):
        read_validation(tmp_path)


def test_validation_folders_must_match_the_runs(tmp_path):
    run = evaluated(tmp_path / "run" / "step0", LengthJudge(), ROWS).parent
    with pytest.raises(SystemExit, match=r"^judge_curves: 2 --validation for 1 runs$"):
        main([str(run), "--validation", str(tmp_path), str(tmp_path)])
