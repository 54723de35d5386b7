"""The SFT recipe end to end, through bash, on the tiny model (CPU mode): 2 processes with FSDP2 and 1 process
with FSDP1, each exported at the end; the exported causal LM is checked against the trainer's own numbers."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.launcher_helpers import SFT_LAUNCHER, judge_spec, logged_metrics, run_launcher, write_message_files

pytestmark = pytest.mark.e2e

STEPS = 4
MICRO_BATCH_SIZE = 2
MAX_LENGTH = 48


@pytest.fixture(scope="module")
def message_files(tmp_path_factory):
    return write_message_files(tmp_path_factory.mktemp("sft"))


@pytest.fixture(scope="module")
def runs(tiny_model_dir, message_files, tmp_path_factory) -> dict[int, tuple[Path, str]]:
    """Save folder and output of a run per process count."""
    root = tmp_path_factory.mktemp("sft_runs")
    train_file, val_file = message_files
    outputs = {}
    for processes, strategy in ((2, "fsdp2"), (1, "fsdp")):
        save_dir = root / f"{strategy}_{processes}"
        result = run_launcher(
            SFT_LAUNCHER,
            "optim.lr=5e-3",
            f"trainer.total_training_steps={STEPS}",
            f"model.strategy={strategy}",
            MODEL_PATH=tiny_model_dir,
            TRAIN_FILE=train_file,
            VAL_FILE=val_file,
            SAVE_DIR=save_dir,
            N_GPUS_PER_NODE=processes,
            TRAIN_BATCH_SIZE=8,
            MICRO_BATCH_SIZE=MICRO_BATCH_SIZE,
            MAX_LENGTH=MAX_LENGTH,
            TOTAL_EPOCHS=2,
        )
        assert result.returncode == 0, (result.stdout + result.stderr)[-2500:]
        outputs[processes] = (save_dir, result.stdout)
    return outputs


@pytest.mark.parametrize("processes", [2, 1])
def test_loss_falls(runs, processes):
    metrics = logged_metrics(runs[processes][1])
    assert sorted(metrics) == list(range(1, STEPS + 1))
    assert metrics[STEPS]["train/loss"] < 0.8 * metrics[1]["train/loss"]
    assert "val/loss" in metrics[STEPS]


def verl_validation_loss(model_dir: Path, val_file: Path, world_size: int) -> float:
    """val/loss as verl's SFT trainer computes it, with the exported model: verl's multi-turn dataset (its
    loss mask), each rank's micro-batches in sampler order, the token-mean loss of each micro-batch, averaged
    over ranks and then over micro-batches."""
    from omegaconf import OmegaConf
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    config = OmegaConf.create({"max_length": MAX_LENGTH, "truncation": "right", "multiturn": {"enable": True}})
    dataset = MultiTurnSFTDataset(str(val_file), tokenizer, config)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    usable = len(dataset) // world_size * world_size
    per_rank = [list(range(rank, usable, world_size)) for rank in range(world_size)]
    batch_losses = []
    for start in range(0, len(per_rank[0]) // MICRO_BATCH_SIZE * MICRO_BATCH_SIZE, MICRO_BATCH_SIZE):
        rank_losses = []
        for indices in per_rank:
            items = [dataset[i] for i in indices[start : start + MICRO_BATCH_SIZE]]
            input_ids = torch.stack([item["input_ids"] for item in items])
            with torch.no_grad():
                logits = model(
                    input_ids=input_ids,
                    attention_mask=torch.stack([item["attention_mask"] for item in items]),
                    position_ids=torch.stack([item["position_ids"] for item in items]),
                ).logits
            token_losses = torch.nn.functional.cross_entropy(
                logits[:, :-1].flatten(0, 1), input_ids[:, 1:].flatten(), reduction="none"
            )
            mask = torch.stack([item["loss_mask"] for item in items])[:, 1:].flatten()
            rank_losses.append((token_losses * mask).sum() / (mask.sum() + 1e-8))
        batch_losses.append(torch.stack(rank_losses).mean())
    return torch.stack(batch_losses).mean().item()


@pytest.mark.parametrize("processes", [2, 1])
def test_the_exported_causal_lm_gives_the_trained_models_loss(runs, message_files, processes):
    save_dir, output = runs[processes]
    model_dir = save_dir / "hf"
    trained = logged_metrics(output)[STEPS]["val/loss"]
    assert verl_validation_loss(model_dir, message_files[1], processes) == pytest.approx(trained, rel=1e-4)
    spec = judge_spec(model_dir)
    assert spec["kind"] == "generative"
    assert spec["trained_with"]["recipe"] == "sft" and spec["trained_with"]["steps"] == STEPS
    assert (model_dir / "generation_config.json").is_file()


def test_the_exported_judge_generates_with_its_chat_template(runs):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from judge_core.protocol import templates

    model_dir = runs[2][0] / "hf"
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    prompt = tokenizer.apply_chat_template(
        templates.pointwise_messages("What is 2 + 2?", "4"), add_generation_prompt=True, return_tensors="pt"
    )
    assert model.generation_config.eos_token_id == tokenizer.eos_token_id
    output = model.generate(prompt, max_new_tokens=5, do_sample=False)
    assert output.shape[1] > prompt.shape[1]
