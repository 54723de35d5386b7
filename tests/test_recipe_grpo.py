"""The GRPO recipes end to end on CPU: `bash pointwise/run_pointwise.sh` on a private local Ray and
`bash pairwise/run_pairwise.sh` submitted as a job to a running `ray start` cluster, each 2 steps of real
verl on a tiny model, then the export and (pointwise) the judge server loading it.

The tiny model is first warm-started by the SFT recipe on judge-format answers, so that GRPO samples
answers that parse and answers that do not: rewards differ within a group and advantages are non-zero.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

import httpx
import pandas as pd
import pytest
import yaml

from judge_rewards.grpo_rewards import REWARD_KEYS
from tests.grpo_recipe import (
    COOKBOOK,
    DATA_SOURCE,
    GRPO_DIR,
    LAUNCHERS,
    judge_sft_rows,
    kill_group,
    launcher_env,
    processes_mentioning,
    ray_head,
    write_rl_data,
)
from tests.launcher_helpers import logged_metrics
from tests.support.servers import start_server

pytestmark = pytest.mark.e2e

LAUNCHER_TIMEOUT_S = 400


def run_bash(script: Path, *args: str, env: dict, cwd: Path) -> str:
    """Runs a launcher in its own process group and kills what is left of the group afterwards."""
    process = subprocess.Popen(
        ["bash", str(script), *args],
        cwd=cwd,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=LAUNCHER_TIMEOUT_S)
    finally:
        kill_group(process.pid)
    assert process.returncode == 0, output[-6000:]
    return output


@pytest.fixture(scope="module")
def ray_tmpdir():
    """A short, private Ray temp root: every Ray process of these tests names it on its command line."""
    with tempfile.TemporaryDirectory(prefix="rayg", dir="/tmp") as directory:
        yield directory
    assert processes_mentioning(directory) == [], "a Ray process outlived its test"


@pytest.fixture(scope="module")
def warm_judge(tiny_model_dir, tmp_path_factory) -> Path:
    """The tiny model after the SFT recipe on well-formed judge answers (exported by that recipe)."""
    directory = tmp_path_factory.mktemp("warm_start")
    pd.DataFrame(judge_sft_rows(64)).to_parquet(directory / "train.parquet")
    pd.DataFrame(judge_sft_rows(8)).to_parquet(directory / "val.parquet")
    env = launcher_env(
        MODEL_PATH=tiny_model_dir,
        TRAIN_FILE=directory / "train.parquet",
        VAL_FILE=directory / "val.parquet",
        SAVE_DIR=directory / "sft",
        TRAIN_BATCH_SIZE=8,
        MICRO_BATCH_SIZE=8,
        MAX_LENGTH=160,
        TOTAL_EPOCHS=6,
    )
    settings = ["optim.lr=1e-2", "model.enable_gradient_checkpointing=false"]
    run_bash(COOKBOOK / "sft" / "run_sft_rm.sh", *settings, env=env, cwd=COOKBOOK / "sft")
    return directory / "sft" / "hf"


@pytest.fixture
def ray_cluster(ray_tmpdir):
    """`ray start --head` on loopback, declaring what a CPU-mode run asks for (the launcher checks it before it
    submits): 1 logical GPU and the `cpu` resource, as the README's CPU cluster."""
    with ray_head(ray_tmpdir, "--num-cpus=4", "--num-gpus=1", '--resources={"cpu": 1}') as dashboard:
        yield dashboard


def run_recipe(mode: str, tmp_path: Path, model: Path, ray_tmpdir: str, **knobs) -> tuple[Path, str]:
    train, val = write_rl_data(tmp_path / "data", mode)
    save_dir = tmp_path / "save"
    env = launcher_env(
        MODEL_PATH=model, TRAIN_FILE=train, VAL_FILE=val, SAVE_DIR=save_dir, RAY_TMPDIR=ray_tmpdir, **knobs
    )
    output = run_bash(LAUNCHERS[mode], "--config", "configs/cpu_tiny.yaml", env=env, cwd=GRPO_DIR)
    return save_dir, output


def assert_trained_with_our_rewards(save_dir: Path) -> dict[int, dict[str, float]]:
    steps = logged_metrics((save_dir / "launch" / "train.log").read_text())
    assert sorted(steps) == [1, 2]
    validation = {key for key in steps[2] if key.startswith("val-aux/")}
    # Only judge_rewards.grpo_rewards emits these keys: verl called our function.
    assert validation >= {f"val-aux/{DATA_SOURCE}/{key}/mean@1" for key in REWARD_KEYS}
    assert any(step["critic/score/max"] > step["critic/score/min"] for step in steps.values()), steps
    assert any(step["critic/advantages/max"] > 0 for step in steps.values())
    assert all(-1.0 <= step["critic/score/min"] <= step["critic/score/max"] <= 1.0 for step in steps.values())
    return steps


def assert_checkpoint_and_export(save_dir: Path, mode: str) -> Path:
    assert (save_dir / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    assert (save_dir / "global_step_2" / "actor" / "model_world_size_1_rank_0.pt").is_file()
    export = save_dir / "hf"
    spec = json.loads((export / "judge.json").read_text())
    assert (spec["kind"], spec["prompt_format"]) == ("generative", mode)
    assert (spec["trained_with"]["recipe"], spec["trained_with"]["steps"]) == (f"grpo-{mode}", 2)
    assert json.loads((export / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    return export


def test_pointwise_runs_on_a_local_ray_exports_and_serves(warm_judge, tmp_path, ray_tmpdir):
    save_dir, output = run_recipe("pointwise", tmp_path, warm_judge, ray_tmpdir, RAY_MODE="local")
    assert "+ray_kwargs.ray_init.address=local" in output
    snapshot = yaml.safe_load((save_dir / "launch" / "config.yaml").read_text())
    assert snapshot["actor_rollout_ref"]["rollout"]["name"] == "hf" and "launch" not in snapshot
    assert_trained_with_our_rewards(save_dir)
    export = assert_checkpoint_and_export(save_dir, "pointwise")

    server_args = ["--model", str(export), "--max-new-tokens", "16", "--temperature", "0"]
    with start_server(server_args, log_path=tmp_path / "server.log") as server:
        health = httpx.get(f"{server.url}/health").json()
        assert (health["judge_kind"], health["model_loaded"]) == ("generative", True)
        body = httpx.post(
            f"{server.url}/judge",
            json={"prompt": "What is 2 + 2?", "completion": "It is 4.", "request_id": "g1"},
            timeout=60,
        ).json()
    assert body["request_id"] == "g1"
    # A 2-step judge may or may not answer in format; either way the server says which, never a silent 0.
    assert (body["score"] is not None and 0.0 <= body["score"] <= 1.0) != bool(body["error"])


def test_pairwise_is_submitted_to_a_running_cluster(warm_judge, tmp_path, ray_tmpdir, ray_cluster):
    save_dir, output = run_recipe("pairwise", tmp_path, warm_judge, ray_tmpdir, RAY_ADDRESS=ray_cluster)
    assert "submitting the training as a Ray job" in output
    assert "succeeded" in output
    assert_trained_with_our_rewards(save_dir)
    assert_checkpoint_and_export(save_dir, "pairwise")
