"""The GRPO recipes end to end on CPU: `bash pointwise/run_pointwise.sh` on a private local Ray and
`bash pairwise/run_pairwise.sh` submitted as a job to a running `ray start` cluster, each 2 steps of real
verl on a tiny model, then the export and the judge server loading it.

The tiny model is first warm-started by the SFT recipe on judge-format answers of the recipe's mode whose values
it cannot tell from the question, so that GRPO samples answers that parse with differing values: rewards differ
within a group and advantages are non-zero. (Trained on both modes at once, it mixed up the tags: 88-97% of its
sampled answers did not parse, and in one CI run every reward of both steps was the same; trained on one mode,
83-95% parse.)
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from pathlib import Path
from subprocess import PIPE, STDOUT

import httpx
import pandas as pd
import pytest
import yaml

from judge_core.grpo_rewards import REWARD_KEYS
from judge_core.protocol import templates
from judge_rewards.judge_client import JudgeUnavailableError
from serving.judges.pairwise import NO_REFERENCE
from tests.grpo_recipe import (
    COOKBOOK,
    DATA_SOURCE,
    GRPO_DIR,
    LAUNCHERS,
    judge_sft_rows,
    launcher_env,
    processes_mentioning,
    ray_head,
    write_rl_data,
)
from tests.launcher_helpers import logged_metrics
from tests.reward_adapter_servers import make_system
from tests.support.processes import run_in_own_group
from tests.support.readme_blocks import readme_command
from tests.support.servers import start_server

pytestmark = pytest.mark.e2e

# A hang's bound: warm start and run took 395 s together beside the vLLM tests on a slow 2-core machine.
LAUNCHER_TIMEOUT_S = 900
SERVED_NEW_TOKENS = 16
GRPO_README = "cookbooks/training_judge_model/grpo/README.md"


def run_bash(script: Path, *args: str, env: dict, cwd: Path) -> str:
    """Runs a launcher in its own process group and kills what is left of the group afterwards."""
    result = run_in_own_group(
        ["bash", str(script), *args], LAUNCHER_TIMEOUT_S, cwd=cwd, env=env, stdout=PIPE, stderr=STDOUT
    )
    assert result.returncode == 0, result.stdout[-6000:]
    return result.stdout


@pytest.fixture(scope="module")
def ray_tmpdir():
    """A short, private Ray temp root: every Ray process of these tests names it on its command line."""
    with tempfile.TemporaryDirectory(prefix="rayg", dir="/tmp") as directory:
        yield directory
    assert processes_mentioning(directory) == [], "a Ray process outlived its test"


def warm_judge(mode: str, tiny_model_dir: Path, directory: Path) -> Path:
    """The tiny model after the SFT recipe on well-formed `mode` judge answers (exported by that recipe)."""
    directory.mkdir(parents=True)
    pd.DataFrame(judge_sft_rows(mode, 64)).to_parquet(directory / "train.parquet")
    pd.DataFrame(judge_sft_rows(mode, 8)).to_parquet(directory / "val.parquet")
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


def cpu_cluster(ray_tmpdir: str):
    """`ray start --head` on loopback, declaring what a CPU-mode run asks for (the launcher checks it before it
    submits): the resources of the README's CPU cluster, 1 logical GPU and the `cpu` resource among them."""
    start = readme_command(GRPO_README, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 ray start --head")
    resources = [word for word in start if word.startswith(("--num-cpus=", "--num-gpus=", "--resources="))]
    assert resources == ["--num-cpus=4", "--num-gpus=1", '--resources={"cpu": 1}'], start
    return ray_head(ray_tmpdir, *resources)


def run_recipe(
    mode: str, tmp_path: Path, tiny_model_dir: Path, ray_tmpdir: str, on_cluster: bool = False, **knobs
) -> tuple[Path, str]:
    """The warm start, then the launcher: with `on_cluster`, submitted to a cluster started for it alone."""
    model = warm_judge(mode, tiny_model_dir, tmp_path / "warm_start")
    train, val = write_rl_data(tmp_path / "data", mode)
    save_dir = tmp_path / "save"
    env = launcher_env(
        MODEL_PATH=model, TRAIN_FILE=train, VAL_FILE=val, SAVE_DIR=save_dir, RAY_TMPDIR=ray_tmpdir, **knobs
    )
    with cpu_cluster(ray_tmpdir) if on_cluster else contextlib.nullcontext() as dashboard:
        if dashboard:
            env["RAY_ADDRESS"] = dashboard
        output = run_bash(LAUNCHERS[mode], "--config", "configs/cpu_tiny.yaml", env=env, cwd=GRPO_DIR)
    return save_dir, output


def assert_trained_with_our_rewards(save_dir: Path) -> dict[int, dict[str, float]]:
    steps = logged_metrics((save_dir / "launch" / "train.log").read_text())
    assert sorted(steps) == [1, 2]
    validation = {key for key in steps[2] if key.startswith("val-aux/")}
    # Only judge_core.grpo_rewards emits these keys: verl called our function.
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
    # the offline data's judge prompts show no reference answer; only a pointwise judge records it
    assert spec["reference_in_prompts"] is (False if mode == "pointwise" else None)
    assert json.loads((export / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    return export


def test_pointwise_runs_on_a_local_ray_exports_and_serves(tiny_model_dir, tmp_path, ray_tmpdir):
    save_dir, output = run_recipe("pointwise", tmp_path, tiny_model_dir, ray_tmpdir, RAY_MODE="local")
    assert "+ray_kwargs.ray_init.address=local" in output
    snapshot = yaml.safe_load((save_dir / "launch" / "config.yaml").read_text())
    assert snapshot["actor_rollout_ref"]["rollout"]["name"] == "hf" and "launch" not in snapshot
    assert_trained_with_our_rewards(save_dir)
    export = assert_checkpoint_and_export(save_dir, "pointwise")

    question = {"prompt": "What is 2 + 2?", "completion": "It is 4."}
    server_args = [
        *("--model", str(export), "--max-new-tokens", str(SERVED_NEW_TOKENS), "--temperature", "0"),
        *("--score-mode", "sample"),  # the served score is then the greedy answer's own, as computed below
    ]
    with start_server(server_args, log_path=tmp_path / "server.log") as server:
        health = httpx.get(f"{server.url}/health").json()
        assert (health["judge_kind"], health["model_loaded"]) == ("generative", True)
        body = httpx.post(f"{server.url}/judge", json={**question, "request_id": "g1"}, timeout=60).json()
        batch = httpx.post(f"{server.url}/batch_judge", json={"requests": [question]}, timeout=60).json()
        comparison = {"prompt": question["prompt"], "response_a": "It is 4.", "response_b": "It is 5."}
        refused = httpx.post(f"{server.url}/compare", json=comparison, timeout=60)
        with make_system(server.url, timeout=60.0, fallback_to_rule=False) as system:
            try:
                adapter_reward = system.reward(question["prompt"], question["completion"])["reward"]
            except JudgeUnavailableError as err:
                adapter_reward = str(err)
    assert body["request_id"] == "g1"
    assert (batch["responses"][0]["score"], batch["responses"][0]["error"]) == (body["score"], body["error"])
    assert refused.status_code == 400 and "hosts a generative judge" in refused.json()["detail"]
    # The adapter passes on the judge's score, or its error when there is no score (no rule fallback here).
    assert adapter_reward == body["score"] if body["error"] is None else body["error"] in adapter_reward
    answer = greedy_pointwise_answer(export, question["prompt"], question["completion"])
    judgement = templates.parse_pointwise(answer)
    if judgement.ok:  # whether a 2-step judge answers in format is the model's business; the server must agree
        assert (body["score"], body["error"]) == (templates.normalized_score(judgement.value), None)
        assert body["metadata"]["judge_score"] == judgement.value
    else:
        assert body["score"] is None and body["error"].startswith(f"unparsable judge answer: {judgement.error}")
        assert body["metadata"]["judge_output"] == answer


def greedy_pointwise_answer(model_dir: Path, prompt: str, completion: str) -> str:
    """The exported judge's own greedy answer to the pointwise template, generated in this process with plain
    transformers (up to the end of its turn): what the served judge must have parsed."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    text = tokenizer.apply_chat_template(
        templates.pointwise_messages(prompt, completion), tokenize=False, add_generation_prompt=True
    )
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    configured = model.generation_config.eos_token_id
    stop_ids = {*(configured if isinstance(configured, list) else [configured]), tokenizer.eos_token_id} - {None}
    with torch.inference_mode():
        output = model.generate(ids, max_new_tokens=SERVED_NEW_TOKENS, do_sample=False, eos_token_id=sorted(stop_ids))
    new_tokens = output[0, ids.shape[1] :].tolist()
    kept = new_tokens[: next((i for i, token in enumerate(new_tokens) if token in stop_ids), len(new_tokens))]
    return tokenizer.decode(kept, skip_special_tokens=True)


def test_pairwise_is_submitted_to_a_running_cluster(tiny_model_dir, tmp_path, ray_tmpdir):
    save_dir, output = run_recipe("pairwise", tmp_path, tiny_model_dir, ray_tmpdir, on_cluster=True)
    assert "submitting the training as a Ray job" in output
    assert "succeeded" in output
    assert_trained_with_our_rewards(save_dir)
    export = assert_checkpoint_and_export(save_dir, "pairwise")

    prompt, better, worse = "What is 2 + 2?", "It is 4.", "It is 5."
    server_args = ["--model", str(export), "--max-new-tokens", str(SERVED_NEW_TOKENS), "--temperature", "0"]
    with start_server(server_args, log_path=tmp_path / "server.log") as server:
        assert httpx.get(f"{server.url}/health").json()["judge_kind"] == "pairwise"
        with_and_without_reference = [
            {"prompt": prompt, "completion": better, "answer": worse},
            {"prompt": prompt, "completion": better},
        ]
        judged = httpx.post(
            f"{server.url}/batch_judge", json={"requests": with_and_without_reference}, timeout=60
        ).json()["responses"]
        compared = httpx.post(
            f"{server.url}/compare", json={"prompt": prompt, "response_a": better, "response_b": worse}, timeout=60
        ).json()
    assert (judged[1]["score"], judged[1]["error"]) == (None, NO_REFERENCE)
    # Both ask the judge the same two questions (the completion / response_a first, then second), so they agree.
    assert judged[0]["error"] == compared["error"]
    assert judged[0]["score"] == pytest.approx(compared["score"], abs=1e-4)
