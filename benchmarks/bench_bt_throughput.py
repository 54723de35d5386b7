"""Benchmark 3: Bradley-Terry training throughput and padding, our trainer vs TRL's RewardTrainer.

    python -m benchmarks.bench_bt_throughput --base-model models/smollm2 --data data       # the measurement
    python -m benchmarks.bench_bt_throughput --base-model DIR --data DIR --smoke           # tiny model, < 60 s

(`python -m data_prep base-model smollm2 --out models/smollm2` and `python -m data_prep offline --out data`
make the inputs; `python -m data_prep base-model tiny --out DIR` the smoke model.) Four methods, one after
the other in this one run, on the same machine:

- bt_trainer: ours, through the real launcher (`run_bt_rm.sh`, verl's FSDP SFT trainer in CPU mode, one
  process) with the recipe's default STRATEGY=fsdp2. Each step's pairs are sorted by length into
  micro-batches, each cut to its own longest sequence. Its step time, real tokens and computed positions are
  read from the run's metrics file.
- bt_trainer_fsdp1: the same with STRATEGY=fsdp. On one process FSDP1 falls back to NO_SHARD, while FSDP2
  still copies each layer's parameters into full buffers (unshard) before its forward and its backward; the
  difference between the two rows is what that costs here.
- trl: TRL's RewardTrainer (the `bench` extra), whose collator pads each micro-batch to its longest sequence.
- pad_to_max_length: the anchor cookbook's batching, every sequence padded to max_length. That cookbook's own
  trainer is not part of this project, so this is TRL's RewardTrainer again with its collator padding to a
  multiple of max_length (`pad_to_multiple_of`), i.e. to max_length exactly. The anchor pads to 4096; a
  modest max_length keeps this run to minutes, and its padding share grows with max_length.

The same for all: base model with a fresh 1-label head, fp32, SDPA attention, no gradient checkpointing,
torch AdamW (betas 0.9/0.95, weight decay 0.001), LR with cosine schedule, gradient clip 2.0; the first
steps x batch pairs of bradley_terry/train.parquet, visited in the order our trainer's sampler visits them
(TRL gets them in that order and reads them in sequence); the same pairs per optimizer step, pairs per
forward and optimizer steps; OMP_NUM_THREADS threads. TRL tokenizes the conversations itself; the benchmark
checks that every method computed the same real tokens at every step (so the same pairs, tokenized alike).

A step's time runs from its start to the end of its optimizer step (verl: the trainer's train/time(s); TRL:
its on_step_begin to on_step_end callbacks), the batch already collated. The first --warmup-steps steps
(allocations, first-call costs) are not timed; model loading, validation and checkpoints are outside every
step. Throughput = tokens of the timed steps / their time: real tokens, or processed (real + padding, every
position the model computed). On a CPU a padded position costs as much as a real one, so real tokens/s is
the figure of merit. Run it on an otherwise idle machine: the load average is recorded with the results.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd
from torch.utils.data import DistributedSampler

from benchmarks.common import RESULTS_DIR, markdown_table, write_results

REPO_ROOT = Path(__file__).resolve().parents[1]
LAUNCHER = REPO_ROOT / "cookbooks" / "training_judge_model" / "bradley-terry" / "run_bt_rm.sh"
LAUNCHER_STRATEGIES = {"bt_trainer": "fsdp2", "bt_trainer_fsdp1": "fsdp"}
METHODS = {
    "bt_trainer": "ours: run_bt_rm.sh, STRATEGY=fsdp2 (length-grouped micro-batches, each padded to its longest)",
    "bt_trainer_fsdp1": "ours, the same with STRATEGY=fsdp",
    "trl": "TRL RewardTrainer (each micro-batch padded to its longest)",
    "pad_to_max_length": "every sequence padded to max_length (anchor cookbook's batching; TRL collator)",
}
# Optimizer and schedule of training/configs/bradley_terry.yaml, given to both trainers (they hardly change a
# step's cost, but "the same training" should not differ in them).
WEIGHT_DECAY = 0.001
ADAM_BETAS = (0.9, 0.95)
WARMUP_STEPS_RATIO = 0.03
CLIP_GRAD = 2.0
DEFAULTS = {"steps": 8, "warmup_steps": 2, "batch_size": 16, "micro_batch_size": 8, "max_length": 128}
SMOKE = {"steps": 3, "warmup_steps": 1, "batch_size": 4, "micro_batch_size": 2, "max_length": 128}


@dataclass(frozen=True)
class Setup:
    base_model: str
    steps: int
    warmup_steps: int
    batch_size: int  # pairs per optimizer step
    micro_batch_size: int  # pairs per forward (2 sequences each)
    max_length: int
    lr: float
    threads: int

    @property
    def pairs(self) -> int:
        return self.steps * self.batch_size


# --- data --------------------------------------------------------------------------------------------


def trainer_order(pairs: int) -> list[int]:
    """The order in which our trainer visits a file of `pairs` pairs on one process: the shuffle of its
    DistributedSampler (seed 0) in epoch 0."""
    sampler = DistributedSampler(range(pairs), num_replicas=1, rank=0, shuffle=True, drop_last=True)
    sampler.set_epoch(0)
    return list(sampler)


def write_subsets(data_dir: Path, setup: Setup, work: Path) -> tuple[Path, Path]:
    """The first steps x batch training pairs, and one micro-batch of validation pairs (the launcher
    validates once at the end; nothing here times it)."""
    train = pd.read_parquet(data_dir / "bradley_terry" / "train.parquet")
    if len(train) < setup.pairs:
        raise SystemExit(
            f"{data_dir}/bradley_terry/train.parquet has {len(train)} pairs, fewer than steps x batch = {setup.pairs}"
        )
    val = pd.read_parquet(data_dir / "bradley_terry" / "val.parquet")
    paths = (work / "train.parquet", work / "val.parquet")
    train.head(setup.pairs).to_parquet(paths[0])
    val.head(setup.micro_batch_size).to_parquet(paths[1])
    return paths


def conversations_in_trainer_order(train_file: Path) -> list[dict]:
    rows = pd.read_parquet(train_file)
    return [
        {"chosen": json.loads(rows.chosen[i]), "rejected": json.loads(rows.rejected[i])}
        for i in trainer_order(len(rows))
    ]


def require_within_max_length(setup: Setup, train_file: Path) -> None:
    """Our trainer truncates a longer sequence and TRL drops its pair: the methods would differ in data."""
    from transformers import AutoTokenizer

    from judge_rewards.protocol.templates import conversation_token_ids
    from training.bt_trainer import parse_conversation

    tokenizer = AutoTokenizer.from_pretrained(setup.base_model)
    rows = pd.read_parquet(train_file)
    conversations = [parse_conversation(cell, "pair") for column in ("chosen", "rejected") for cell in rows[column]]
    longest = max(len(ids) for ids in conversation_token_ids(tokenizer, conversations))
    if longest > setup.max_length:
        raise SystemExit(
            f"the longest sequence of the pairs has {longest} tokens, more than --max-length "
            f"{setup.max_length}; raise --max-length"
        )


# --- method 1: our trainer, through its launcher -----------------------------------------------------


def launcher_knobs(setup: Setup, strategy: str, train_file: Path, val_file: Path, save_dir: Path) -> dict[str, str]:
    knobs = {
        "MODEL_PATH": setup.base_model,
        "TRAIN_FILE": train_file,
        "VAL_FILE": val_file,
        "SAVE_DIR": save_dir,
        "TRAIN_BATCH_SIZE": setup.batch_size,
        "MICRO_BATCH_SIZE": setup.micro_batch_size,
        "MAX_LENGTH": setup.max_length,
        "LR": setup.lr,
        "TOTAL_EPOCHS": 1,
        "STRATEGY": strategy,
        "N_GPUS_PER_NODE": 1,
        "NNODES": 1,
        "JUDGE_CPU_DTYPE": "fp32",
        "OMP_NUM_THREADS": setup.threads,
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }
    return {key: str(value) for key, value in knobs.items()}


def launcher_settings(setup: Setup) -> list[str]:
    """The run's other settings, as key=value arguments of the launcher (the recipe config's keys)."""
    return [
        "data.truncation=error",
        f"trainer.total_training_steps={setup.steps}",
        f"optim.weight_decay={WEIGHT_DECAY}",
        f"optim.lr_warmup_steps_ratio={WARMUP_STEPS_RATIO}",
        f"optim.clip_grad={CLIP_GRAD}",
        f"optim.betas=[{ADAM_BETAS[0]},{ADAM_BETAS[1]}]",
        "optim.lr_scheduler=cosine",
        "bt.margin_mode=none",
        "trainer.save_freq=-1",
        "trainer.test_freq=-1",
        "model.enable_gradient_checkpointing=false",
        "trainer.logger=[console,file]",
        "trainer.device=cpu",
        "launch.export_dir=none",
    ]


def run_bt_trainer(setup: Setup, strategy: str, train_file: Path, val_file: Path, work: Path) -> list[dict]:
    save_dir = work / f"bt_trainer_{strategy}"
    env = {**os.environ, **launcher_knobs(setup, strategy, train_file, val_file, save_dir)}
    command = ["bash", str(LAUNCHER), *launcher_settings(setup)]
    result = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{LAUNCHER.name} failed ({result.returncode}):\n{(result.stdout + result.stderr)[-3000:]}")
    return steps_from_metrics_file(save_dir / "launch" / "metrics.jsonl")


def steps_from_metrics_file(path: Path) -> list[dict]:
    """Per training step: time and token counts from verl's file logger (one JSON record per log call)."""
    steps = []
    for line in path.read_text().splitlines():
        data = json.loads(line)["data"]
        if "train/time(s)" in data:
            steps.append(
                {
                    "time_s": data["train/time(s)"],
                    "real_tokens": round(data["train/real_tokens"]),
                    "computed_tokens": round(data["train/computed_tokens"]),
                }
            )
    return steps


# --- methods 2 and 3: TRL ----------------------------------------------------------------------------


def import_trl():
    try:
        import trl
    except ImportError as err:
        raise SystemExit(
            "TRL is not installed: pip install -e '.[bench]' (the bench extra pins a TRL that "
            "changes nothing else in the stack)"
        ) from err
    return trl


class CountingCollator:
    """TRL's preference collator, recording each micro-batch's real tokens and computed positions."""

    def __init__(self, collator):
        self.collator = collator
        self.counts: list[tuple[int, int]] = []

    def __call__(self, examples):
        batch = self.collator(examples)
        mask = batch["attention_mask"]
        self.counts.append((int(mask.sum()), mask.numel()))
        return batch


def trl_config(setup: Setup, output_dir: Path, pad_to_multiple_of: int | None):
    return import_trl().RewardConfig(
        output_dir=str(output_dir),
        use_cpu=True,
        bf16=False,
        fp16=False,
        seed=1,
        model_init_kwargs={"dtype": "float32", "attn_implementation": "sdpa"},
        gradient_checkpointing=False,
        per_device_train_batch_size=setup.micro_batch_size,
        gradient_accumulation_steps=setup.batch_size // setup.micro_batch_size,
        max_steps=setup.steps,
        max_length=setup.max_length,
        pad_to_multiple_of=pad_to_multiple_of,
        optim="adamw_torch",
        learning_rate=setup.lr,
        weight_decay=WEIGHT_DECAY,
        adam_beta1=ADAM_BETAS[0],
        adam_beta2=ADAM_BETAS[1],
        max_grad_norm=CLIP_GRAD,
        lr_scheduler_type="cosine",
        warmup_steps=int(setup.steps * WARMUP_STEPS_RATIO),
        dataloader_num_workers=0,
        report_to="none",
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
    )


def run_trl(setup: Setup, train_file: Path, work: Path, pad_to_multiple_of: int | None) -> list[dict]:
    import torch
    from datasets import Dataset
    from torch.utils.data import SequentialSampler
    from transformers import TrainerCallback

    trl = import_trl()
    from trl.trainer.reward_trainer import DataCollatorForPreference

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.times: list[float] = []
            self.started = 0.0

        def on_step_begin(self, args, state, control, **kwargs):
            self.started = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.times.append(time.perf_counter() - self.started)

    class InOrderRewardTrainer(trl.RewardTrainer):
        """Reads the pairs in the dataset's order, which is our trainer's order."""

        def _get_train_sampler(self, train_dataset=None):
            return SequentialSampler(train_dataset if train_dataset is not None else self.train_dataset)

    torch.set_num_threads(setup.threads)
    config = trl_config(setup, work / "trl", pad_to_multiple_of)
    timer = StepTimer()
    collator = CountingCollator(
        DataCollatorForPreference(pad_token_id=pad_token_id(setup.base_model), pad_to_multiple_of=pad_to_multiple_of)
    )
    trainer = InOrderRewardTrainer(
        model=setup.base_model,
        args=config,
        data_collator=collator,
        train_dataset=Dataset.from_list(conversations_in_trainer_order(train_file)),
        callbacks=[timer],
    )
    trainer.train()
    return trl_steps(timer.times, collator.counts, config.gradient_accumulation_steps)


def pad_token_id(model_dir: str) -> int:
    """The pad token both trainers use: the tokenizer's (TRL would fall back to EOS; ours requires one)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if tokenizer.pad_token_id is None:
        raise SystemExit(f"{model_dir}: the tokenizer has no pad token")
    return tokenizer.pad_token_id


def trl_steps(times: list[float], counts: list[tuple[int, int]], micro_batches_per_step: int) -> list[dict]:
    if len(counts) != len(times) * micro_batches_per_step:
        raise RuntimeError(
            f"TRL collated {len(counts)} micro-batches for {len(times)} steps of {micro_batches_per_step}"
        )
    steps = []
    for index, seconds in enumerate(times):
        step_counts = counts[index * micro_batches_per_step : (index + 1) * micro_batches_per_step]
        steps.append(
            {
                "time_s": seconds,
                "real_tokens": sum(real for real, _ in step_counts),
                "computed_tokens": sum(computed for _, computed in step_counts),
            }
        )
    return steps


# --- results -----------------------------------------------------------------------------------------


def summarize(steps: list[dict], warmup_steps: int) -> dict:
    """Throughput over the timed steps; padding share over every step (it does not depend on timing)."""
    timed = steps[warmup_steps:]
    seconds = sum(step["time_s"] for step in timed)
    real, computed = (sum(step[key] for step in steps) for key in ("real_tokens", "computed_tokens"))
    return {
        "steps": len(steps),
        "timed_steps": len(timed),
        "s_per_step": round(seconds / len(timed), 4),
        "real_tokens_per_s": round(sum(step["real_tokens"] for step in timed) / seconds, 2),
        "processed_tokens_per_s": round(sum(step["computed_tokens"] for step in timed) / seconds, 2),
        "padding_share": round(1.0 - real / computed, 4),
        "per_step": steps,
    }


def require_same_pairs(results: dict[str, dict]) -> None:
    """Every method computed the same real tokens at every step: the same pairs, tokenized alike."""
    reference = [step["real_tokens"] for step in results["trl"]["per_step"]]
    for name, result in results.items():
        tokens = [step["real_tokens"] for step in result["per_step"]]
        if tokens != reference:
            raise RuntimeError(f"{name} computed real tokens per step {tokens}, trl {reference}: not the same pairs")


def add_ratios_to_trl(results: dict[str, dict]) -> None:
    trl_speed = results["trl"]["real_tokens_per_s"]
    for result in results.values():
        result["real_tokens_per_s_vs_trl"] = round(result["real_tokens_per_s"] / trl_speed, 3)


def report(results: dict[str, dict], setup: Setup, trl_version: str) -> str:
    headers = [
        "method",
        "steps (timed)",
        "s / step",
        "real tokens/s",
        "processed tokens/s",
        "padding share",
        "real tokens/s vs TRL",
    ]
    rows = [
        [
            f"{name}: {METHODS[name]}",
            f"{r['steps']} ({r['timed_steps']})",
            f"{r['s_per_step']:.2f}",
            f"{r['real_tokens_per_s']:.0f}",
            f"{r['processed_tokens_per_s']:.0f}",
            f"{r['padding_share']:.1%}",
            f"{r['real_tokens_per_s_vs_trl']:.2f}x",
        ]
        for name, r in results.items()
    ]
    return (
        f"## Bradley-Terry training throughput: our trainer vs TRL {trl_version} RewardTrainer\n\n"
        f"{Path(setup.base_model).name}, fp32, {setup.threads} threads; {setup.pairs} pairs of the offline BT "
        f"train set, {setup.batch_size} pairs per step in micro-batches of {setup.micro_batch_size}, "
        f"max_length {setup.max_length}, first {setup.warmup_steps} step(s) not timed.\n\n"
        + markdown_table(headers, rows)
    )


def measure(setup: Setup, data_dir: Path) -> dict[str, dict]:
    runs = {}
    with tempfile.TemporaryDirectory(prefix="bench_bt_") as work_dir:
        work = Path(work_dir)
        train_file, val_file = write_subsets(data_dir, setup, work)
        require_within_max_length(setup, train_file)
        for name, strategy in LAUNCHER_STRATEGIES.items():
            runs[name] = run_bt_trainer(setup, strategy, train_file, val_file, work)
        runs["trl"] = run_trl(setup, train_file, work, pad_to_multiple_of=None)
        runs["pad_to_max_length"] = run_trl(setup, train_file, work, pad_to_multiple_of=setup.max_length)
    results = {name: summarize(steps, setup.warmup_steps) for name, steps in runs.items()}
    require_same_pairs(results)
    add_ratios_to_trl(results)
    return results


def parse_setup(args: argparse.Namespace) -> Setup:
    sizes = SMOKE if args.smoke else DEFAULTS
    sizes = {key: default if getattr(args, key) is None else getattr(args, key) for key, default in sizes.items()}
    setup = Setup(base_model=str(args.base_model), lr=args.lr, threads=args.threads, **sizes)
    if setup.batch_size % setup.micro_batch_size or setup.warmup_steps >= setup.steps:
        raise SystemExit("--batch-size must be a multiple of --micro-batch-size, and --warmup-steps below --steps")
    return setup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--base-model", required=True, type=Path, help="HF causal LM directory (a 1-label head is added)"
    )
    parser.add_argument(
        "--data", required=True, type=Path, help="data_prep output holding bradley_terry/{train,val}.parquet"
    )
    parser.add_argument("--smoke", action="store_true", help=f"small sizes for a quick check: {SMOKE}")
    for key, default in DEFAULTS.items():
        parser.add_argument(
            f"--{key.replace('_', '-')}", type=int, help=f"default {default} ({SMOKE[key]} with --smoke)"
        )
    parser.add_argument("--lr", type=float, default=2e-5, help="peak learning rate")
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="OMP_NUM_THREADS of every method")
    parser.add_argument("--name", default="bt_throughput", help="name of the result files")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR, help="where the result files go")
    args = parser.parse_args()

    setup = parse_setup(args)
    trl_version = import_trl().__version__
    load_before = os.getloadavg()
    results = measure(setup, args.data)
    config = {
        **asdict(setup),
        "pairs": setup.pairs,
        "data": str(args.data),
        "dtype": "fp32",
        "trl": trl_version,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "methods": METHODS,
    }
    paths = write_results(
        args.name, {"config": config, "results": results}, report(results, setup, trl_version), args.results_dir
    )
    for name, result in results.items():
        print(name, {key: value for key, value in result.items() if key != "per_step"})
    print(f"wrote {paths[0]} and {paths[1]}")


if __name__ == "__main__":
    main()
