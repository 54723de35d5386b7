"""The Bradley-Terry recipe end to end, through bash, on the tiny model (CPU mode).

One module fixture runs the launcher three times on arithmetic pairs (right answer vs "I do not know."):
  a: 2 processes, FSDP2, 4 steps, a checkpoint every 2 steps, max_length 512 given as an override (not the
     knob), exported at the end;
  b: a new run folder holding only a's step-2 checkpoint: the launcher resumes there and runs steps 3-4;
  c: 1 process, FSDP1, the margin-scaled loss, exported at the end.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import httpx
import pandas as pd
import pytest
import torch
import yaml

from judge_core.protocol.judge_spec import sigmoid
from tests.launcher_helpers import BT_LAUNCHER, judge_spec, logged_metrics, run_launcher, write_pair_files
from tests.reward_adapter_servers import make_system
from tests.support.servers import start_server

pytestmark = pytest.mark.e2e

STEPS = 4


@dataclass
class Run:
    save_dir: Path
    log: str

    @property
    def metrics(self) -> dict[int, dict[str, float]]:
        return logged_metrics(self.log)


def launch(save_dir: Path, *overrides: str, **knobs) -> Run:
    result = run_launcher(BT_LAUNCHER, f"trainer.total_training_steps={STEPS}", *overrides, SAVE_DIR=save_dir, **knobs)
    assert result.returncode == 0, (result.stdout + result.stderr)[-2500:]
    return Run(save_dir, result.stdout)


@pytest.fixture(scope="module")
def pair_files(tmp_path_factory):
    return write_pair_files(tmp_path_factory.mktemp("bradley_terry"))


@pytest.fixture(scope="module")
def runs(tiny_model_dir, pair_files, tmp_path_factory) -> dict[str, Run]:
    root = tmp_path_factory.mktemp("bt_runs")
    train_file, val_file = pair_files
    common = dict(
        MODEL_PATH=tiny_model_dir,
        TRAIN_FILE=train_file,
        VAL_FILE=val_file,
        TRAIN_BATCH_SIZE=8,
        MICRO_BATCH_SIZE=2,
        LR="1e-3",
        TOTAL_EPOCHS=1,
    )
    file_logger = "trainer.logger=[console,file]"
    a = launch(root / "a", "trainer.save_freq=2", "data.max_length=512", file_logger, N_GPUS_PER_NODE=2, **common)
    (root / "b" / "launch").mkdir(parents=True)
    shutil.copytree(root / "a" / "global_step_2", root / "b" / "global_step_2")
    (root / "b" / "latest_checkpointed_iteration.txt").write_text("2")
    # as if a's run had stopped after step 4's metrics but before its step-4 checkpoint
    shutil.copy(root / "a" / "launch" / "metrics.jsonl", root / "b" / "launch" / "metrics.jsonl")
    b = launch(root / "b", "data.max_length=512", "launch.export_dir=none", file_logger, N_GPUS_PER_NODE=2, **common)
    c = launch(root / "c", "bt.margin_mode=scaled", N_GPUS_PER_NODE=1, STRATEGY="fsdp", **common)
    return {"a": a, "b": b, "c": c}


@pytest.mark.parametrize("name", ["a", "c"])
def test_loss_falls_and_every_metric_is_logged(runs, name):
    metrics = runs[name].metrics
    assert sorted(metrics) == list(range(1, STEPS + 1))
    for step in range(1, STEPS + 1):
        assert {"train/loss", "train/accuracy", "train/padding_share", "train/grad_norm", "train/lr"} <= set(
            metrics[step]
        )
    assert {"val/loss", "val/accuracy"} <= set(metrics[STEPS])
    assert metrics[STEPS]["train/loss"] < 0.7 * metrics[1]["train/loss"]
    assert metrics[STEPS]["val/accuracy"] > 0.9
    assert 0 <= metrics[STEPS]["train/padding_share"] < 0.5


def test_a_resumed_run_continues_where_it_stopped(runs):
    uninterrupted, resumed = runs["a"].metrics, runs["b"].metrics
    assert sorted(resumed) == [3, 4], "the resumed run starts after its checkpoint's step"
    for step in (3, 4):
        for key in ("train/loss", "train/accuracy", "train/lr"):
            assert resumed[step][key] == pytest.approx(uninterrupted[step][key], rel=1e-4, abs=1e-6), (step, key)
    assert resumed[4]["val/loss"] == pytest.approx(uninterrupted[4]["val/loss"], rel=1e-4)


def test_a_resumed_run_keeps_the_earlier_steps_in_the_metrics_file(runs):
    """verl's file logger empties the file at the start of a run; the launcher puts the steps before it back."""
    earlier = (runs["a"].save_dir / "launch" / "metrics.jsonl").read_text().splitlines()
    merged = (runs["b"].save_dir / "launch" / "metrics.jsonl").read_text().splitlines()
    steps = [json.loads(line)["step"] for line in merged]
    assert sorted(set(steps)) == [1, 2, 3, 4] and steps == sorted(steps)
    assert merged[: steps.index(3)] == [line for line in earlier if json.loads(line)["step"] < 3]
    resumed = runs["b"].metrics
    for line in merged[steps.index(3) :]:
        row = json.loads(line)
        for key, value in row["data"].items():
            assert resumed[row["step"]][key] == pytest.approx(value, rel=1e-6), (row["step"], key)


def test_the_run_folder_has_snapshot_log_and_checkpoints(runs):
    """The trainer read the snapshot (the override's max_length included) and the export used the same values."""
    save_dir = runs["a"].save_dir
    snapshot = save_dir / "launch"
    config = yaml.safe_load((snapshot / "config.yaml").read_text())
    assert config["data"]["micro_batch_size_per_gpu"] == 2 and config["data"]["max_length"] == 512
    assert config["bt"]["margin_mode"] == "none" and "launch" not in config
    sources = yaml.safe_load((snapshot / "sources.yaml").read_text())
    assert sources["data.micro_batch_size_per_gpu"] == {"value": 2, "source": "environment (MICRO_BATCH_SIZE)"}
    assert sources["data.max_length"] == {"value": 512, "source": "command line"}
    command = (snapshot / "command.sh").read_text()
    assert f"--config-path {snapshot} --config-name config" in command
    assert "training.export scalar" in command and "--max-length 512 --truncation left" in command
    log = (snapshot / "train.log").read_text()
    assert "val/accuracy" in log and log.count("===== ") == 1
    assert {"global_step_2", "global_step_4"} <= {p.name for p in save_dir.iterdir()}


def conversation_rewards(model_dir: Path, conversations: list[list[dict]], auto_class) -> torch.Tensor:
    """Each conversation's reward, scored one at a time (no padding): the test's own reading of the model."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = auto_class.from_pretrained(model_dir).eval()
    rewards = []
    for messages in conversations:
        text = tokenizer.apply_chat_template(messages, tokenize=False)
        ids = torch.tensor([tokenizer(text, add_special_tokens=False)["input_ids"]])
        with torch.no_grad():
            logits = model(input_ids=ids).logits
        rewards.append(logits[0, -1] if logits.dim() == 3 else logits[0])  # token classification: the last token
    return torch.stack(rewards).squeeze(-1).double()


def val_pair_rewards(model_dir: Path, val_file: Path, auto_class) -> tuple[torch.Tensor, torch.Tensor]:
    frame = pd.read_parquet(val_file)
    conversations = [json.loads(text) for column in ("chosen", "rejected") for text in frame[column]]
    rewards = conversation_rewards(model_dir, conversations, auto_class)
    return rewards.view(2, -1).T, torch.tensor(frame["margin"].to_numpy())


@pytest.mark.parametrize("name", ["a", "c"])
def test_the_exported_judge_gives_the_trained_models_rewards(runs, pair_files, name):
    """The trainer's final validation (FSDP model, batched, padded) is recomputed from the exported folder."""
    from transformers import AutoConfig, AutoModelForSequenceClassification

    model_dir = runs[name].save_dir / "hf"
    rewards, margins = val_pair_rewards(model_dir, pair_files[1], AutoModelForSequenceClassification)
    gaps = rewards[:, 0] - rewards[:, 1]
    losses = -torch.nn.functional.logsigmoid(gaps) * (margins if name == "c" else 1.0)
    trained = runs[name].metrics[STEPS]
    assert losses.mean().item() == pytest.approx(trained["val/loss"], rel=1e-4)
    assert (gaps > 0).double().mean().item() == pytest.approx(trained["val/accuracy"])

    spec = judge_spec(model_dir)
    assert spec["kind"] == "scalar"
    assert spec["reward_center"] == pytest.approx(rewards.mean().item(), rel=1e-4)
    assert spec["reward_scale"] == pytest.approx(rewards.flatten().std(unbiased=False).item(), rel=1e-4)
    assert spec["trained_with"]["recipe"] == "bradley-terry" and spec["trained_with"]["steps"] == STEPS
    assert spec["trained_with"]["train_file"] == str(pair_files[0])
    config = AutoConfig.from_pretrained(model_dir)
    assert config.architectures == ["LlamaForSequenceClassification"] and config.num_labels == 1


def test_the_export_serves_judge_compare_and_the_reward_adapter(runs, tmp_path):
    """`python -m serving --model` on the export: /batch_judge gives each completion's raw reward, /compare the
    Bradley-Terry probability of the two, and JudgeRewardSystem the served score."""
    from transformers import AutoModelForSequenceClassification

    model_dir = runs["a"].save_dir / "hf"
    prompt, right, unsure = "What is 2 + 3?", "It is 5.", "I do not know."
    expected = conversation_rewards(
        model_dir,
        [[{"role": "user", "content": prompt}, {"role": "assistant", "content": text}] for text in (right, unsure)],
        AutoModelForSequenceClassification,
    ).tolist()
    requests = [{"prompt": prompt, "completion": text} for text in (right, unsure)]
    with start_server(["--model", str(model_dir)], log_path=tmp_path / "server.log") as server:
        judged = httpx.post(f"{server.url}/batch_judge", json={"requests": requests}, timeout=60).json()["responses"]
        compared = httpx.post(
            f"{server.url}/compare", json={"prompt": prompt, "response_a": right, "response_b": unsure}, timeout=60
        ).json()
        with make_system(server.url, timeout=60.0, fallback_to_rule=False) as system:
            reward = system.reward(prompt, right)
    assert [r["metadata"]["raw_reward"] for r in judged] == pytest.approx(expected, abs=1e-4)
    assert compared["score"] == pytest.approx(sigmoid(expected[0] - expected[1]), abs=1e-4)
    assert (reward["source"], reward["reward"]) == ("judge", pytest.approx(judged[0]["score"], abs=1e-6))


def test_verls_reward_worker_class_reads_the_same_rewards(runs, pair_files):
    """verl's reward-model worker loads AutoModelForTokenClassification and reads the last token's logit."""
    from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification

    model_dir = runs["a"].save_dir / "hf"
    sequence, _ = val_pair_rewards(model_dir, pair_files[1], AutoModelForSequenceClassification)
    token, _ = val_pair_rewards(model_dir, pair_files[1], AutoModelForTokenClassification)
    assert torch.allclose(sequence, token, atol=1e-5)


def test_a_bad_row_stops_the_run_naming_file_row_and_field(tiny_model_dir, pair_files, tmp_path):
    frame = pd.read_parquet(pair_files[0])
    frame.loc[5, "rejected"] = '[{"role": "user"}]'
    bad_file = tmp_path / "bad.parquet"
    frame.to_parquet(bad_file)
    result = run_launcher(
        BT_LAUNCHER,
        MODEL_PATH=tiny_model_dir,
        TRAIN_FILE=bad_file,
        VAL_FILE=pair_files[1],
        SAVE_DIR=tmp_path / "run",
        TRAIN_BATCH_SIZE=8,
        MICRO_BATCH_SIZE=2,
        N_GPUS_PER_NODE=1,
    )
    assert result.returncode != 0
    assert f"{bad_file} row 5 field rejected: message 0 needs a role" in result.stdout + result.stderr
    assert not (tmp_path / "run" / "hf").exists()
