"""`python -m training.export causal-lm --not-a-judge`: a trained policy is exported as a
plain causal LM with export.json, never with a judge.json that would make the judge server serve it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM

from tests.conftest import REPO_ROOT
from training import export

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def checkpoint(tiny_model_dir, tmp_path_factory):
    """A one-process verl actor checkpoint of the tiny model: global_step_3/actor with the plain-tensor shard
    FSDP saves when a single process holds everything, and huggingface/ with config and tokenizer."""
    save_dir = tmp_path_factory.mktemp("policy_run")
    actor = save_dir / "global_step_3" / "actor"
    shutil.copytree(tiny_model_dir, actor / export.HF_SUBDIR)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    torch.save(model.state_dict(), actor / "model_world_size_1_rank_0.pt")
    (actor / export.FSDP_CONFIG_FILE).write_text(json.dumps({"world_size": 1}))
    (save_dir / export.CHECKPOINT_TRACKER).write_text("3")
    return save_dir


def run_export(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "training.export", "causal-lm", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_policy_export_has_no_judge_json_and_records_its_training(checkpoint, tiny_model_dir, tmp_path):
    out = tmp_path / "policy"
    result = run_export("--not-a-judge", str(checkpoint), str(out), "--recipe", "grpo-policy")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"exported causal-lm model to {out}\n")
    assert not (out / "judge.json").exists()
    record = json.loads((out / export.EXPORT_RECORD_FILE).read_text())["trained_with"]
    assert (record["recipe"], record["steps"]) == ("grpo-policy", 3)
    exported = AutoModelForCausalLM.from_pretrained(out).state_dict()
    original = AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()
    assert exported.keys() == original.keys()
    assert all(torch.equal(exported[name], original[name]) for name in original)


def test_a_rerun_replaces_a_policy_export_but_never_a_foreign_folder(checkpoint, tmp_path):
    out = tmp_path / "policy"
    export.export_causal_lm(checkpoint, out, as_judge=False)
    (out / "stale.txt").write_text("from the first export")
    export.export_causal_lm(checkpoint, out, as_judge=False)
    assert not (out / "stale.txt").exists() and (out / export.EXPORT_RECORD_FILE).is_file()

    foreign = tmp_path / "notes"
    foreign.mkdir()
    (foreign / "todo.txt").write_text("mine")
    result = run_export("--not-a-judge", str(checkpoint), str(foreign))
    assert result.returncode == 1
    assert "exists and is not an export (no judge.json or export.json)" in result.stderr
    assert (foreign / "todo.txt").read_text() == "mine"


def test_without_the_flag_the_export_is_still_a_generative_judge(checkpoint, tmp_path):
    out = export.export_causal_lm(checkpoint, tmp_path / "judge")
    assert json.loads((out / "judge.json").read_text())["kind"] == "generative"
    assert not (out / export.EXPORT_RECORD_FILE).exists()
