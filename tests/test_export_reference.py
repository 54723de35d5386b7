"""A pointwise judge's export records whether its training prompts showed a reference answer
(judge.json `reference_in_prompts`), read from the train file, so that the judge server can refuse to serve it
the other way (tests/test_serving_generative.py)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from transformers import AutoModelForCausalLM

from judge_core.protocol import templates
from tests.support.models import verl_checkpoint
from training import export

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def checkpoint(tiny_model_dir, tmp_path_factory):
    return verl_checkpoint(tiny_model_dir, tmp_path_factory.mktemp("sft_run"), AutoModelForCausalLM)


def prompt(reference: str | None) -> list[dict]:
    """A judge prompt after a system message: the reference is looked for in the user's message, wherever it is."""
    system = {"role": "system", "content": "You are a careful judge."}
    return [system, *templates.pointwise_messages("What is 2 + 2?", "4", reference=reference)]


def sft_file(path, references: list[str | None]):
    """An SFT judge file (`messages`: the judge prompt, then the demonstration)."""
    answer = {"role": "assistant", "content": "<think>ok</think><score>4</score>"}
    pd.DataFrame({"messages": [[*prompt(reference), answer] for reference in references]}).to_parquet(path)
    return str(path)


def rl_file(path, references: list[str | None]):
    """A GRPO judge file (verl's RL format: `prompt` and the label)."""
    rows = [{"prompt": prompt(reference), "reward_model": {"ground_truth": '{"score": 4}'}} for reference in references]
    pd.DataFrame(rows).to_parquet(path)
    return str(path)


@pytest.mark.parametrize("write", [sft_file, rl_file], ids=["sft", "grpo"])
@pytest.mark.parametrize(
    ("references", "recorded"),
    [(["4", "four"], True), ([None, None], False), (["4", None], None)],
    ids=["every prompt", "none", "some"],
)
def test_the_export_records_whether_the_training_prompts_showed_a_reference(
    checkpoint, tmp_path, write, references, recorded
):
    train_file = write(tmp_path / "train.parquet", references)
    out = export.export_causal_lm(checkpoint, tmp_path / "judge", trained_with={"train_file": train_file})
    assert json.loads((out / "judge.json").read_text())["reference_in_prompts"] is recorded


def test_without_a_readable_train_file_nothing_is_recorded(checkpoint, tmp_path):
    for trained_with in ({}, {"train_file": str(tmp_path / "gone.parquet")}):
        out = export.export_causal_lm(checkpoint, tmp_path / "judge", trained_with=trained_with)
        assert json.loads((out / "judge.json").read_text())["reference_in_prompts"] is None


def test_a_pairwise_judge_records_nothing(checkpoint, tmp_path):
    train_file = sft_file(tmp_path / "train.parquet", ["4"])
    out = export.export_causal_lm(
        checkpoint, tmp_path / "judge", trained_with={"train_file": train_file}, prompt_format="pairwise"
    )
    assert json.loads((out / "judge.json").read_text())["reference_in_prompts"] is None
