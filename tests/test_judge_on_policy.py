"""evaluation.judge_on_policy: a judge's pair accuracy on a policy's own sampled answers."""

from __future__ import annotations

import json
import subprocess

import pandas as pd
import pytest

from data_prep import offline
from evaluation.judge_on_policy import (
    Answer,
    JudgeOnPolicyConfig,
    Question,
    add_rule_mixes,
    read_questions,
    report,
)
from tests.conftest import REPO_ROOT
from tests.support.readme_blocks import readme_command


def question(text: str, reference: str) -> Question:
    return Question([{"role": "user", "content": text}], text, reference, None)


def test_the_report_counts_right_wrong_pairs_per_question():
    two, three = question("What is 1 + 1?", "2"), question("What is 1 + 2?", "3")
    answers = [
        Answer(two, "2", 1.0, {"good": 0.9, "coin": 0.1}),
        Answer(two, "5", 0.0, {"good": 0.2, "coin": 0.8}),
        Answer(two, "7", 0.0, {"good": 0.3, "coin": 0.1}),
        Answer(three, "9", 0.0, {"good": 0.9, "coin": 0.5}),  # no right answer to this question: in no pair
    ]
    config = JudgeOnPolicyConfig("policy", "questions.parquet", ["good", "coin"], group_size=3)
    lines = report(answers, config)
    assert lines[0].startswith("4 answers to 2 questions (3 each") and lines[0].endswith(
        "rule accuracy 0.250, 1 questions with a right and a wrong answer"
    )
    assert lines[2].split() == ["good", "2", "1.000", "0.900", "0.467", "1"]
    assert lines[3].split() == ["coin", "2", "0.250", "0.100", "0.467", "1"]  # one loss, one tie; 1 + 2 has one answer


def test_rule_mixes_reorder_a_judge_and_a_gate_ties_the_wrong_answers():
    two, three = question("What is 1 + 1?", "2"), question("What is 1 + 2?", "3")
    answers = [
        Answer(two, "2", 1.0, {"coin": 0.1}),
        Answer(two, "5", 0.0, {"coin": 0.8}),
        Answer(three, "9", 0.0, {"coin": 0.5}),
        Answer(three, "8", 0.0, {"coin": 0.3}),
    ]
    names = add_rule_mixes(answers, ["coin"], [0.25, 0.5])
    assert names == ["coin + 0.25 rule", "coin + 0.5 rule", "coin gated by rule"]
    assert [a.rewards["coin + 0.5 rule"] for a in answers] == pytest.approx([0.55, 0.4, 0.25, 0.15])
    config = JudgeOnPolicyConfig("policy", "questions.parquet", ["coin"], group_size=2)
    lines = report(answers, config, ["coin", *names])
    assert [line.split()[-5:] for line in lines[2:]] == [
        ["1", "0.000", "0.100", "0.533", "0"],
        ["1", "0.000", "0.325", "0.400", "0"],  # 0.75 x 0.1 + 0.25 = 0.325 < 0.75 x 0.8 = 0.6: still wrong
        ["1", "1.000", "0.550", "0.267", "0"],
        ["1", "1.000", "0.100", "0.000", "1"],  # the gate pays every wrong answer 0: question 1 + 2 ties
    ]


def test_a_row_without_the_question_is_named(tmp_path):
    path = tmp_path / "policy.parquet"
    rows = [
        {
            "prompt": [{"role": "user", "content": "What is 1 + 1?"}],
            "reward_model": {"ground_truth": "2"},
            "extra_info": {"question": "What is 1 + 1?", "answer_type": "NUMBER"},
        },
        {
            "prompt": [{"role": "user", "content": "What is 2 + 2?"}],
            "reward_model": {"ground_truth": "4"},
            "extra_info": {"question": "", "answer_type": "NUMBER"},
        },
    ]
    pd.DataFrame(rows).to_parquet(path)
    with pytest.raises(ValueError, match=r"policy.parquet: row 1 has no extra_info.question"):
        read_questions(path)


def test_a_subset_keeps_its_questions(tmp_path):
    offline.generate(tmp_path / "data")
    path = tmp_path / "data/policy/val.parquet"
    arithmetic = read_questions(path, "arithmetic")
    assert 0 < len(arithmetic) < len(read_questions(path))
    assert all(q.answer_type == "NUMBER" for q in arithmetic)


@pytest.mark.e2e
def test_the_command_samples_scores_and_repeats_itself_for_a_seed(tmp_path, tiny_model_dir, tiny_scalar_judge_dir):
    offline.generate(tmp_path / "data")
    questions = tmp_path / "data/policy/val.parquet"
    runs = []
    for name in ("first", "again"):
        out = tmp_path / f"{name}.jsonl"
        words = {
            "[JUDGE_DIR ...]": "",  # one judge
            "POLICY_DIR": str(tiny_model_dir),
            "OUT/policy/val.parquet": str(questions),
            "JUDGE_DIR": str(tiny_scalar_judge_dir),
            "answers.jsonl": str(out),
        }
        command = readme_command("evaluation/README.md", "python -m evaluation.judge_on_policy", words)
        command += ["--group-size", "2", "--max-new-tokens", "6"]  # 2 short answers per question
        result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, check=True)
        runs.append([json.loads(line) for line in out.read_text().splitlines()])
    assert result.stdout.startswith("90 answers to 45 questions (2 each, temperature 0.7, at most 6 tokens, seed 0)")
    assert result.stdout.splitlines()[2].split()[0] == str(tiny_scalar_judge_dir)
    assert runs[0] == runs[1]  # the same seed samples the same answers and the judge scores them alike
    assert len(runs[0]) == 90 and set(runs[0][0]["rewards"]) == {str(tiny_scalar_judge_dir)}
    assert [r["question"] for r in runs[0][:4]] == [runs[0][0]["question"]] * 2 + [runs[0][2]["question"]] * 2
