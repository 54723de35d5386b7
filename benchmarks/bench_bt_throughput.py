"""Benchmark 3: Bradley-Terry training throughput: our trainer packed and padded, and TRL's RewardTrainer.

    python -m benchmarks.bench_bt_throughput --base-model models/smollm2                 # the measurement
    python -m benchmarks.bench_bt_throughput --base-model DIR --smoke                    # tiny model, 1-2 min
    python -m benchmarks.bench_bt_throughput --base-model models/smollm2 --data data     # pairs of a data_prep folder

(`python -m data_prep base-model smollm2 --out models/smollm2` makes the model, `python -m data_prep
base-model tiny --out DIR` the smoke model.) Three methods on the same machine, in one run:

- bt_packed: ours, through the real launcher (`run_bt_rm.sh`, verl's FSDP SFT trainer in CPU mode, one
  process, STRATEGY=fsdp as the CPU configs), with the recipe's default `bt.packing=true`: each pair's
  shared prompt once and both responses, several pairs per forward, no padding.
- bt_padded: the same with `bt.packing=false`: each step's pairs sorted by length into micro-batches, each
  cut to its own longest sequence (the trainer's batching before packing).
- trl: TRL's RewardTrainer (the `bench` extra), whose collator pads each micro-batch to its longest sequence.

The pairs: by default HelpSteer2-like conversations made up here (`helpsteer2_like_pairs`): long-tailed
prompt and response lengths, some prompts multi-turn. Its shape follows HelpSteer2's description (ShareGPT
prompts, a part of them multi-turn, responses of hundreds of words); its medians and spreads are assumptions
that look like that, not statistics computed from the dataset (none is available offline here). `--data DIR`
uses a data_prep folder's bradley_terry/train.parquet instead (e.g. `python -m data_prep helpsteer2`).

The same for all: base model with a fresh 1-label head, fp32, SDPA attention, no gradient checkpointing,
torch AdamW (betas 0.9/0.95, weight decay 0.001), LR with cosine schedule, gradient clip 2.0; the same pairs,
visited in the order our trainer's sampler visits them (TRL gets them in that order and reads them in
sequence); the same pairs per optimizer step, pairs per micro-batch (packing: its default token budget,
micro-batch x 2 x max_length), optimizer steps; OMP_NUM_THREADS threads. TRL tokenizes the conversations
itself; the benchmark checks that every method computed the same real tokens at every step (so the same
pairs, tokenized alike), and that our trainer counted the useful tokens it computes here.

A step's time runs from its start to the end of its optimizer step (verl: the trainer's train/time(s); TRL:
its on_step_begin to on_step_end callbacks), the batch already collated. The first --warmup-steps steps are
not timed; model loading, validation and checkpoints are outside every step. The figure of merit is useful
tokens per second: the tokens a pair needs computed (its prompt once and both responses) over the timed
steps' time, the same tokens for every method. Each method runs --repetitions times, interleaved (A B C A B
C ...), and the results give the median and the range; the 1-minute load average is recorded before every
run. Run it on an otherwise idle machine.
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

import numpy as np
import pandas as pd
from torch.utils.data import DistributedSampler

from benchmarks.common import (
    RESULTS_DIR,
    RunLog,
    add_ratios,
    exit_on_sigterm,
    markdown_table,
    summarize_runs,
    write_results,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
LAUNCHER = REPO_ROOT / "cookbooks" / "training_judge_model" / "bradley-terry" / "run_bt_rm.sh"
PACKING = {"bt_packed": True, "bt_padded": False}  # our trainer's methods: their bt.packing
METHODS = {
    "bt_packed": "ours: run_bt_rm.sh, bt.packing=true (each prompt once, pairs packed per forward, no padding)",
    "bt_padded": "ours, bt.packing=false (length-sorted micro-batches, each padded to its longest)",
    "trl": "TRL RewardTrainer (each micro-batch padded to its longest)",
}
STRATEGY = "fsdp"  # one process: FSDP1 leaves the model unsharded (the CPU configs' choice)
# Optimizer and schedule of training/configs/bradley_terry.yaml, given to both trainers (they hardly change a
# step's cost, but "the same training" should not differ in them).
WEIGHT_DECAY = 0.001
ADAM_BETAS = (0.9, 0.95)
WARMUP_STEPS_RATIO = 0.03
CLIP_GRAD = 2.0
DEFAULTS = {"steps": 5, "warmup_steps": 1, "batch_size": 8, "micro_batch_size": 4, "repetitions": 5}
SMOKE = {"steps": 2, "warmup_steps": 1, "batch_size": 4, "micro_batch_size": 2, "repetitions": 2}
SEED = 0
SUMMARY_KEYS = ("useful_tokens_per_s", "real_tokens_per_s", "s_per_step", "waste_share")

# HelpSteer2-like lengths, in words (about 1.3 tokens each with SmolLM2's tokenizer): log-normal medians and
# spreads (sigma of the log), clipped. Assumed, see the module's docstring.
PROMPT_WORDS = (50, 1.0, 3, 500)
RESPONSE_WORDS = (170, 0.6, 5, 600)
EARLIER_USER_WORDS = (30, 0.8, 2, 200)
EARLIER_ASSISTANT_WORDS = (120, 0.6, 5, 400)
MULTI_TURN_SHARE = 0.3  # prompts with 1-2 earlier exchanges
WORDS = (
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "with",
    "was",
    "on",
    "be",
    "by",
    "this",
    "are",
    "or",
    "from",
    "at",
    "which",
    "an",
    "have",
    "not",
    "they",
    "but",
    "one",
    "all",
    "their",
    "can",
    "has",
    "more",
    "if",
    "will",
    "about",
    "would",
    "there",
    "what",
    "so",
    "out",
    "up",
    "use",
    "its",
    "into",
    "time",
    "only",
    "new",
    "some",
    "could",
    "these",
    "two",
    "may",
    "first",
    "any",
    "like",
    "other",
    "than",
    "then",
    "now",
    "way",
    "people",
    "data",
    "model",
    "answer",
    "code",
    "example",
    "function",
    "value",
    "because",
    "however",
    "result",
    "question",
    "important",
    "different",
    "number",
    "system",
    "each",
    "following",
)


@dataclass(frozen=True)
class Setup:
    base_model: str
    steps: int
    warmup_steps: int
    batch_size: int  # pairs per optimizer step
    micro_batch_size: int  # pairs per micro-batch (2 sequences each); packing: sets its token budget
    max_length: int
    repetitions: int
    lr: float
    threads: int

    @property
    def pairs(self) -> int:
        return self.steps * self.batch_size


# --- data --------------------------------------------------------------------------------------------


def helpsteer2_like_pairs(count: int, seed: int = SEED) -> pd.DataFrame:
    """`count` pairs (chosen, rejected as JSON message lists, margin 1) with HelpSteer2-like lengths; both
    sides share the prompt and answer it with responses of independent lengths."""
    rng = np.random.default_rng(seed)

    def text(spec) -> str:
        median, sigma, low, high = spec
        length = int(np.clip(round(rng.lognormal(np.log(median), sigma)), low, high))
        return " ".join(rng.choice(WORDS, size=length))

    rows = []
    for _ in range(count):
        prompt = []
        if rng.random() < MULTI_TURN_SHARE:
            for _ in range(int(rng.integers(1, 3))):
                prompt += [
                    {"role": "user", "content": text(EARLIER_USER_WORDS)},
                    {"role": "assistant", "content": text(EARLIER_ASSISTANT_WORDS)},
                ]
        prompt.append({"role": "user", "content": text(PROMPT_WORDS)})
        chosen, rejected = (prompt + [{"role": "assistant", "content": text(RESPONSE_WORDS)}] for _ in range(2))
        rows.append({"chosen": json.dumps(chosen), "rejected": json.dumps(rejected), "margin": 1.0})
    return pd.DataFrame(rows)


def trainer_order(pairs: int) -> list[int]:
    """The order in which our trainer visits a file of `pairs` pairs on one process: the shuffle of its
    DistributedSampler (seed 0) in epoch 0."""
    sampler = DistributedSampler(range(pairs), num_replicas=1, rank=0, shuffle=True, drop_last=True)
    sampler.set_epoch(0)
    return list(sampler)


def write_pairs(data_dir: Path | None, pairs: int, micro_batch_size: int, work: Path) -> tuple[Path, Path]:
    """`pairs` training pairs (HelpSteer2-like, or the first of data_dir's), and one micro-batch of validation
    pairs (the launcher validates once at the end; nothing here times it)."""
    if data_dir is None:
        train, val = helpsteer2_like_pairs(pairs), helpsteer2_like_pairs(micro_batch_size, seed=SEED + 1)
    else:
        train = pd.read_parquet(data_dir / "bradley_terry" / "train.parquet")
        val = pd.read_parquet(data_dir / "bradley_terry" / "val.parquet")
        if len(train) < pairs:
            raise SystemExit(
                f"{data_dir}/bradley_terry/train.parquet has {len(train)} pairs, fewer than steps x batch = {pairs}"
            )
    paths = (work / "train.parquet", work / "val.parquet")
    train.head(pairs).to_parquet(paths[0])
    val.head(micro_batch_size).to_parquet(paths[1])
    return paths


def conversations_in_trainer_order(train_file: Path) -> list[dict]:
    rows = pd.read_parquet(train_file)
    return [
        {"chosen": json.loads(rows.chosen[i]), "rejected": json.loads(rows.rejected[i])}
        for i in trainer_order(len(rows))
    ]


def token_ids_in_trainer_order(base_model: str, train_file: Path) -> list[tuple[list[int], list[int]]]:
    """Each pair's (chosen, rejected) token ids as our trainer reads them, in its order."""
    from transformers import AutoTokenizer

    from judge_core.protocol.templates import conversation_token_ids

    tokenizer = AutoTokenizer.from_pretrained(base_model)
    pairs = conversations_in_trainer_order(train_file)
    ids = conversation_token_ids(tokenizer, [pair[side] for pair in pairs for side in ("chosen", "rejected")])
    return list(zip(ids[0::2], ids[1::2], strict=True))


def max_length_for(pairs: list[tuple[list[int], list[int]]], given: int | None) -> int:
    """The given max_length, checked to hold every sequence (our trainer would truncate a longer one and TRL
    drop its pair: the methods would differ in data); by default the longest sequence, rounded up to 64."""
    longest = max(len(ids) for pair in pairs for ids in pair)
    if given is None:
        return -(-longest // 64) * 64
    if longest > given:
        raise SystemExit(f"the longest sequence of the pairs has {longest} tokens, more than --max-length {given}")
    return given


def useful_tokens_per_step(pairs: list[tuple[list[int], list[int]]], batch_size: int) -> list[int]:
    """Per step, the tokens its pairs need computed: each prompt once and both responses."""
    from training.packing import useful_tokens

    per_pair = [useful_tokens(chosen, rejected) for chosen, rejected in pairs]
    return [sum(per_pair[start : start + batch_size]) for start in range(0, len(per_pair), batch_size)]


# --- our trainer, through its launcher ---------------------------------------------------------------


def launcher_knobs(setup: Setup, train_file: Path, val_file: Path, save_dir: Path) -> dict[str, str]:
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
        "STRATEGY": STRATEGY,
        "N_GPUS_PER_NODE": 1,
        "NNODES": 1,
        "JUDGE_CPU_DTYPE": "fp32",
        "OMP_NUM_THREADS": setup.threads,
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }
    return {key: str(value) for key, value in knobs.items()}


def launcher_settings(setup: Setup, packing: bool) -> list[str]:
    """The run's other settings, as key=value arguments of the launcher (the recipe config's keys)."""
    return [
        f"bt.packing={str(packing).lower()}",
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


def run_bt_trainer(setup: Setup, packing: bool, train_file: Path, val_file: Path, save_dir: Path) -> list[dict]:
    env = {**os.environ, **launcher_knobs(setup, train_file, val_file, save_dir)}
    command = ["bash", str(LAUNCHER), *launcher_settings(setup, packing)]
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
                    "useful_tokens": round(data["train/useful_tokens"]),
                    "computed_tokens": round(data["train/computed_tokens"]),
                }
            )
    return steps


# --- TRL ---------------------------------------------------------------------------------------------


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


def trl_config(setup: Setup, output_dir: Path):
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


def run_trl(setup: Setup, train_file: Path, output_dir: Path, useful: list[int]) -> list[dict]:
    """TRL's steps; `useful`: each step's useful tokens (TRL does not count them; the pairs decide them)."""
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
    config = trl_config(setup, output_dir)
    timer = StepTimer()
    collator = CountingCollator(DataCollatorForPreference(pad_token_id=pad_token_id(setup.base_model)))
    trainer = InOrderRewardTrainer(
        model=setup.base_model,
        args=config,
        data_collator=collator,
        train_dataset=Dataset.from_list(conversations_in_trainer_order(train_file)),
        callbacks=[timer],
    )
    trainer.train()
    return trl_steps(timer.times, collator.counts, config.gradient_accumulation_steps, useful)


def pad_token_id(model_dir: str) -> int:
    """The pad token both trainers use: the tokenizer's (TRL would fall back to EOS; ours requires one)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if tokenizer.pad_token_id is None:
        raise SystemExit(f"{model_dir}: the tokenizer has no pad token")
    return tokenizer.pad_token_id


def trl_steps(
    times: list[float], counts: list[tuple[int, int]], micro_batches_per_step: int, useful: list[int]
) -> list[dict]:
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
                "useful_tokens": useful[index],
                "computed_tokens": sum(computed for _, computed in step_counts),
            }
        )
    return steps


# --- results -----------------------------------------------------------------------------------------


def summarize_run(steps: list[dict], warmup_steps: int) -> dict:
    """One run: throughput over its timed steps; waste share (computed positions beyond the useful tokens:
    padding and repeated prompts) over every step, as it does not depend on timing."""
    timed = steps[warmup_steps:]
    seconds = sum(step["time_s"] for step in timed)
    return {
        "steps": len(steps),
        "timed_steps": len(timed),
        "s_per_step": round(seconds / len(timed), 4),
        **{
            f"{kind}_tokens_per_s": round(sum(step[f"{kind}_tokens"] for step in timed) / seconds, 2)
            for kind in ("useful", "real", "computed")
        },
        "waste_share": round(
            1.0 - sum(s["useful_tokens"] for s in steps) / sum(s["computed_tokens"] for s in steps), 4
        ),
        "per_step": steps,
    }


def require_same_tokens(runs: dict[str, list[dict]], useful: list[int]) -> None:
    """Every run computed the same real tokens at every step (the same pairs, tokenized alike), and our
    trainer counted each step's useful tokens as the pairs decide them; packed, it computed nothing else."""
    reference = [step["real_tokens"] for step in runs["trl"][0]["per_step"]]
    for name, method_runs in runs.items():
        for run in method_runs:
            tokens = [step["real_tokens"] for step in run["per_step"]]
            if tokens != reference:
                raise RuntimeError(
                    f"{name} computed real tokens per step {tokens}, trl {reference}: not the same pairs"
                )
            counted = [step["useful_tokens"] for step in run["per_step"]]
            if counted != useful:
                raise RuntimeError(f"{name} counted useful tokens per step {counted}, the pairs have {useful}")
    for run in runs["bt_packed"]:
        computed = [step["computed_tokens"] for step in run["per_step"]]
        if computed != useful:
            raise RuntimeError(f"bt_packed computed {computed} positions per step, not the useful tokens {useful}")


def report(results: dict[str, dict], setup: Setup, config: dict) -> str:
    headers = [
        "method",
        "useful tokens/s: median (min-max)",
        "s / step: median",
        "real tokens/s: median",
        "computed beyond useful (padding, repeated prompts)",
        "vs TRL",
        "vs padded",
    ]
    rows = []
    for name, r in results.items():
        useful = r["useful_tokens_per_s"]
        rows.append(
            [
                f"{name}: {METHODS[name]}",
                f"{useful['median']:.0f} ({useful['min']:.0f}-{useful['max']:.0f})",
                f"{r['s_per_step']['median']:.2f}",
                f"{r['real_tokens_per_s']['median']:.0f}",
                f"{r['waste_share']['median']:.1%}",
                f"{r['useful_tokens_per_s_vs_trl']:.2f}x",
                f"{r['useful_tokens_per_s_vs_bt_padded']:.2f}x",
            ]
        )
    loads = ", ".join(f"{name} {[run['load_average_1min'] for run in r['runs']]}" for name, r in results.items())
    return (
        f"## Bradley-Terry training throughput: packed and padded vs TRL {config['trl']} RewardTrainer\n\n"
        f"{Path(setup.base_model).name}, fp32, {setup.threads} threads; {setup.pairs} {config['pairs_source']} "
        f"pairs, {setup.batch_size} pairs per step, micro-batches of {setup.micro_batch_size} (packed: up to "
        f"{setup.micro_batch_size * 2 * setup.max_length} tokens per forward), max_length {setup.max_length}; "
        f"{setup.steps} steps, the first {setup.warmup_steps} not timed; {setup.repetitions} runs of each "
        f"method, interleaved. Useful tokens: each prompt once and both responses (the same for every method).\n\n"
        + markdown_table(headers, rows)
        + f"\n\n1-minute load average before each run: {loads}.\n"
    )


def measure(setup_args: dict, data_dir: Path | None) -> tuple[Setup, dict[str, dict]]:
    """The runs, interleaved: every repetition runs each method once, in METHODS' order."""
    runs: dict[str, list[dict]] = {name: [] for name in METHODS}
    with tempfile.TemporaryDirectory(prefix="bench_bt_") as work_dir:
        work = Path(work_dir)
        pairs = setup_args["steps"] * setup_args["batch_size"]
        train_file, val_file = write_pairs(data_dir, pairs, setup_args["micro_batch_size"], work)
        token_ids = token_ids_in_trainer_order(setup_args["base_model"], train_file)
        setup = Setup(**{**setup_args, "max_length": max_length_for(token_ids, setup_args["max_length"])})
        useful = useful_tokens_per_step(token_ids, setup.batch_size)
        log = RunLog()
        for repetition in range(setup.repetitions):
            for name in METHODS:
                stamp = log.start(repetition)
                output_dir = work / f"{name}_{repetition}"
                if name == "trl":
                    steps = run_trl(setup, train_file, output_dir, useful)
                else:
                    steps = run_bt_trainer(setup, PACKING[name], train_file, val_file, output_dir)
                runs[name].append({**stamp, **summarize_run(steps, setup.warmup_steps)})
    require_same_tokens(runs, useful)
    results = {name: summarize_runs(method_runs, SUMMARY_KEYS) for name, method_runs in runs.items()}
    for baseline in ("trl", "bt_padded"):
        add_ratios(results, "useful_tokens_per_s", baseline)
    return setup, results


def setup_arguments(args: argparse.Namespace) -> dict:
    sizes = SMOKE if args.smoke else DEFAULTS
    sizes = {key: default if getattr(args, key) is None else getattr(args, key) for key, default in sizes.items()}
    if sizes["batch_size"] % sizes["micro_batch_size"] or sizes["warmup_steps"] >= sizes["steps"]:
        raise SystemExit("--batch-size must be a multiple of --micro-batch-size, and --warmup-steps below --steps")
    return {
        "base_model": str(args.base_model),
        "max_length": args.max_length,
        "lr": args.lr,
        "threads": args.threads,
        **sizes,
    }


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--base-model", required=True, type=Path, help="HF causal LM directory (a 1-label head is added)"
    )
    parser.add_argument(
        "--data",
        type=Path,
        help="a data_prep folder with bradley_terry/{train,val}.parquet (default: HelpSteer2-like pairs)",
    )
    parser.add_argument("--smoke", action="store_true", help=f"small sizes for a quick check: {SMOKE}")
    for key, default in DEFAULTS.items():
        parser.add_argument(
            f"--{key.replace('_', '-')}", type=int, help=f"default {default} ({SMOKE[key]} with --smoke)"
        )
    parser.add_argument("--max-length", type=int, help="tokens per sequence (default: the longest, rounded up to 64)")
    parser.add_argument("--lr", type=float, default=2e-5, help="peak learning rate")
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="OMP_NUM_THREADS of every method")
    parser.add_argument("--name", default="bt_throughput", help="name of the result files")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR, help="where the result files go")
    args = parser.parse_args()

    setup_args = setup_arguments(args)
    trl_version = import_trl().__version__
    setup, results = measure(setup_args, args.data)
    config = {
        **asdict(setup),
        "pairs": setup.pairs,
        "pairs_source": "HelpSteer2-like (made up, see the benchmark's docstring)"
        if args.data is None
        else str(args.data / "bradley_terry" / "train.parquet"),
        "seed": SEED,
        "strategy": STRATEGY,
        "dtype": "fp32",
        "trl": trl_version,
        "methods": METHODS,
    }
    paths = write_results(
        args.name, {"config": config, "results": results}, report(results, setup, config), args.results_dir
    )
    for name, result in results.items():
        print(name, {key: value for key, value in result.items() if key != "runs"})
    print(f"wrote {paths[0]} and {paths[1]}")


if __name__ == "__main__":
    main()
