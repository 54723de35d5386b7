"""Benchmark 10: verl 0.6.1's padded forwards in CPU mode, as verl computes them and with the shortcuts of
training/padded_forwards.py (issue 26: the generative recipes' time on a CPU), on the pairwise recipe's shapes.

    python -m benchmarks.bench_padded_forwards --model runs/demo/models/smollm2 --data runs/demo/data \\
        --name padded_forwards_smollm2
    python -m benchmarks.bench_padded_forwards --model DIR --data DIR --smoke --results-dir /tmp/r   # a quick check

Four stages, each run by verl's own function and by the CPU-mode one on the same batch:
- sft step: a micro batch of --micro-batch (8) rows of <data>/sft_judge_pairwise/train.parquet, built by verl's
  MultiTurnSFTDataset right-padded to --sft-max-length (216, the pairwise warm start's), loss and backward
  (FSDPSFTTrainer._compute_loss_and_backward);
- actor step: --micro-batch prompts of <data>/grpo/pairwise/train.parquet, built by verl's RLHFDataset left-padded
  to --max-prompt-length (192, the pairwise GRPO config's), each followed by a response of 24-48 random tokens
  right-padded to --max-response-length (64): log-probabilities and entropy, and the backward of their sum
  (DataParallelPPOActor._forward_micro_batch);
- generation: --rollout-prompts (32) of those prompts through the CPU HF rollout (training/hf_rollout.py), greedy,
  --max-response-length new tokens each (no stop token, so that both generate as many), with and without the
  unused left padding;
- validation generation: --val-prompts (96) prompts of <data>/grpo/pairwise/val.parquet, as generation, in one
  generate() call (verl's HFRollout: the whole val set is one batch) and in the CPU rollout's chunks of at most
  rollout.max_num_batched_tokens (8192) tokens, both without the unused left padding.
--stages picks some of them.
Fresh rows every repetition, the same for both methods; 5 repetitions, the stages and methods interleaved and
the methods' order rotated. Reported: seconds per stage, median (min-max), the ratio of medians, and how far the
shortcut's result is from verl's (loss, log-probabilities; generated tokens: identical in generation, and in
validation generation where no near tie rounds another way under HFRollout's bf16 autocast in a batch of another
shape).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.common import (
    RESULTS_DIR,
    RunLog,
    add_ratios,
    chosen_sizes,
    exit_on_sigterm,
    load_averages,
    markdown_table,
    median_and_range,
    rotated,
    summarize_runs,
    write_results,
)

VERL, SHORTCUT = "verl 0.6.1", "shortcut"
STAGES = ("sft step", "actor step", "generation", "validation generation")
DEFAULTS = {"repetitions": 5, "micro_batch": 8, "rollout_prompts": 32, "val_prompts": 96}
SMOKE = {"repetitions": 1, "micro_batch": 2, "rollout_prompts": 2, "val_prompts": 16}


class Stages:
    """The model, verl's functions and the patched ones, and the batches of each repetition."""

    def __init__(self, args, size: dict):
        import torch
        import torch.distributed as dist
        from omegaconf import OmegaConf
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.args, self.size = args, size
        self.functions = _verl_and_patched_functions()
        if not dist.is_initialized():
            dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0, world_size=1)
        self.tokenizer = AutoTokenizer.from_pretrained(args.model)
        self.model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32, attn_implementation="sdpa")
        actor_config = OmegaConf.create(
            {
                "use_remove_padding": False,
                "use_fused_kernels": False,
                "use_torch_compile": False,
                "ulysses_sequence_parallel_size": 1,
                "entropy_from_logits_with_chunking": False,
                "entropy_checkpointing": False,
                "fsdp_config": {"dtype": "float32"},
            }
        )
        from verl.workers.actor.dp_actor import DataParallelPPOActor

        self.actor = DataParallelPPOActor(actor_config, self.model, actor_optimizer=None)
        self.sft_trainer = _SFTTrainerView(self.model)
        self.sft_rows = _sft_dataset(self.tokenizer, args.data / "sft_judge_pairwise" / "train.parquet", args)
        self.prompts = _prompt_dataset(self.tokenizer, args.data / "grpo" / "pairwise" / "train.parquet", args)
        self.val_prompts = _prompt_dataset(self.tokenizer, args.data / "grpo" / "pairwise" / "val.parquet", args)
        self.rollout = _rollout(args)

    def batches(self, repetition: int) -> dict:
        import torch

        count = self.size["micro_batch"]
        sft = _rows(self.sft_rows, repetition, count)
        prompts = _rows(self.prompts, repetition, count)
        generator = torch.Generator().manual_seed(self.args.seed * 1000 + repetition)
        width = self.args.max_response_length
        lengths = torch.randint(24, 49, (count,), generator=generator).clamp(max=width)
        responses = torch.randint(3, self.tokenizer.vocab_size, (count, width), generator=generator)
        response_mask = (torch.arange(width)[None, :] < lengths[:, None]).long()
        responses = responses * response_mask
        mask = torch.cat([prompts["attention_mask"], response_mask], dim=1)
        from verl.utils.model import compute_position_id_with_mask

        actor = {
            "input_ids": torch.cat([prompts["input_ids"], responses], dim=1),
            "attention_mask": mask,
            "position_ids": compute_position_id_with_mask(mask),
            "responses": responses,
        }
        generation = _rows(self.prompts, repetition, self.size["rollout_prompts"])
        validation = _rows(self.val_prompts, repetition, self.size["val_prompts"])
        return {"sft step": sft, "actor step": actor, "generation": generation, "validation generation": validation}

    def run(self, stage: str, method: str, batch: dict) -> tuple[float, object]:
        """Seconds the stage took, and its result (to compare the methods)."""
        start = time.perf_counter()
        if stage == "sft step":
            loss = self.functions["sft"][method](self.sft_trainer, dict(batch), n_micro_batches=1)
            result = loss.item()
        elif stage == "actor step":
            entropy, log_probs = self.functions["actor"][method](
                self.actor, batch, temperature=1.0, calculate_entropy=True
            )
            ((log_probs + entropy) * batch["attention_mask"][:, -log_probs.shape[1] :]).sum().backward()
            result = log_probs.detach()
        elif stage == "generation":
            result = self._generate(method, batch)
        else:
            result = self._generate_validation(method, batch)
        seconds = time.perf_counter() - start
        self.model.zero_grad(set_to_none=True)
        return seconds, result

    def _generate(self, method: str, batch: dict):
        from verl import DataProto

        module = self.rollout.module
        trimmed = module.generate
        if method == VERL:
            module.generate = trimmed.__wrapped__  # the rollout without the trimming: verl's HFRollout, fixed
        try:
            output = self.rollout.generate_sequences(
                DataProto.from_dict(
                    tensors=dict(batch),
                    meta_info={"eos_token_id": -1, "pad_token_id": self.tokenizer.pad_token_id, "do_sample": False},
                )
            )
        finally:
            module.generate = trimmed
        return output.batch["responses"]

    def _generate_validation(self, method: str, batch: dict):
        """verl: the whole batch in one generate() call; the shortcut: the rollout's own chunks. Counts the calls
        (`validation_calls`)."""
        rollout = self.rollout
        generate_part = rollout._generate_minibatch
        parts = []
        rollout._generate_minibatch = lambda part: parts.append(len(part)) or generate_part(part)
        if method == VERL:
            rollout.sequences_per_generate = len
        try:
            return self._generate(SHORTCUT, batch)
        finally:
            for name in ("_generate_minibatch", "sequences_per_generate"):
                rollout.__dict__.pop(name, None)
            self.validation_calls = len(parts)


class _SFTTrainerView:
    """The attributes of verl's FSDPSFTTrainer that its micro-batch loss reads, on an unwrapped model."""

    def __init__(self, model):
        from types import SimpleNamespace

        self.use_remove_padding = False
        self.device_name = "cpu"
        self.fsdp_model = self.model = model
        self.config = SimpleNamespace(ulysses_sequence_parallel_size=1, data=SimpleNamespace(balance_dp_token=False))


def _verl_and_patched_functions() -> dict:
    """verl's functions in CPU mode as it was without the shortcuts (every other fix installed: fp32, the
    device functions), and the same functions with them."""
    from training import cpu_compat

    shortcuts = (cpu_compat._sft_loss_over_trained_tokens, cpu_compat._actor_head_on_responses_only)
    fixes = {module: [fix for fix in fixes if fix not in shortcuts] for module, fixes in cpu_compat.PATCHES.items()}
    cpu_compat.install(fixes)
    import verl.trainer.fsdp_sft_trainer as sft
    import verl.workers.actor.dp_actor as dp_actor

    verl_sft, verl_actor = (
        sft.FSDPSFTTrainer._compute_loss_and_backward,
        dp_actor.DataParallelPPOActor._forward_micro_batch,
    )
    cpu_compat._sft_loss_over_trained_tokens(sft)
    cpu_compat._actor_head_on_responses_only(dp_actor)
    return {
        "sft": {VERL: verl_sft, SHORTCUT: sft.FSDPSFTTrainer._compute_loss_and_backward},
        "actor": {VERL: verl_actor, SHORTCUT: dp_actor.DataParallelPPOActor._forward_micro_batch},
    }


def _sft_dataset(tokenizer, path: Path, args):
    from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset

    return MultiTurnSFTDataset(str(path), tokenizer, {"max_length": args.sft_max_length, "truncation": "error"})


def _prompt_dataset(tokenizer, path: Path, args):
    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import RLHFDataset

    config = OmegaConf.create(
        {"max_prompt_length": args.max_prompt_length, "truncation": "error", "filter_overlong_prompts": False}
    )
    return RLHFDataset(str(path), tokenizer, config)


def _rollout(args):
    from verl.workers.config import HFModelConfig, RolloutConfig

    from training.hf_rollout import CPUHFRollout

    config = RolloutConfig(
        name="hf",
        prompt_length=args.max_prompt_length,
        response_length=args.max_response_length,
        do_sample=False,
    )
    return CPUHFRollout(config, HFModelConfig(path=str(args.model)), None)


def _rows(dataset, repetition: int, count: int) -> dict:
    """The repetition's `count` rows of a verl dataset (the next ones, wrapping round), stacked into a batch."""
    import torch

    rows = [dataset[(repetition * count + row) % len(dataset)] for row in range(count)]
    keys = ("input_ids", "attention_mask", "position_ids", "loss_mask")
    return {key: torch.stack([row[key] for row in rows]) for key in keys if key in rows[0]}


def measure(stages: Stages, size: dict, chosen: Sequence[str] = STAGES) -> dict:
    log = RunLog()
    runs = {(stage, method): [] for stage in chosen for method in (VERL, SHORTCUT)}
    largest_difference = {stage: 0.0 for stage in chosen}
    order = [VERL, SHORTCUT]
    for repetition in range(size["repetitions"]):
        batches = stages.batches(repetition)
        for stage in chosen:
            results = {}
            for method in rotated(order, repetition):
                stamp = log.start(repetition)
                seconds, results[method] = stages.run(stage, method, batches[stage])
                calls = {"calls": stages.validation_calls} if stage == "validation generation" else {}
                runs[(stage, method)].append({**stamp, "seconds": round(seconds, 3), **calls})
            largest_difference[stage] = max(largest_difference[stage], _difference(results[VERL], results[SHORTCUT]))
    summary = {}
    for stage in chosen:
        methods = {method: summarize_runs(runs[(stage, method)], ["seconds"]) for method in order}
        add_ratios(methods, "seconds", VERL, "verl")
        summary[stage] = {"methods": methods, "largest_difference": largest_difference[stage]}
    return summary


def _difference(verl_result, shortcut_result) -> float:
    import torch

    if isinstance(verl_result, float):
        return abs(verl_result - shortcut_result)
    if verl_result.dtype == torch.long:  # generated tokens: the count of differing ones
        return float((verl_result != shortcut_result).sum())
    return float((verl_result - shortcut_result).abs().max())


def report(results: dict, config: dict) -> str:
    measures = {
        "sft step": "loss",
        "actor step": "log-probability",
        "generation": "generated tokens differing",
        "validation generation": "generated tokens differing",
    }
    rows = [
        [
            stage,
            median_and_range(result["methods"][VERL]["seconds"], 2),
            median_and_range(result["methods"][SHORTCUT]["seconds"], 2),
            f"{result['methods'][SHORTCUT]['seconds_vs_verl']:.2f}x",
            f"{measures[stage]}: {result['largest_difference']:.1e}",
        ]
        for stage, result in results.items()
    ]
    runs = [run for result in results.values() for method in result["methods"].values() for run in method["runs"]]
    return (
        "## verl's padded forwards on a CPU, as verl computes them and with the shortcuts\n\n"
        f"{config['model']}, fp32; micro batches of {config['micro_batch']} (SFT right-padded to "
        f"{config['sft_max_length']}, prompts left-padded to {config['max_prompt_length']}, responses to "
        f"{config['max_response_length']}); generation of {config['rollout_prompts']} prompts, greedy, "
        f"{config['max_response_length']} new tokens; validation generation of {config['val_prompts']} val prompts "
        f"the same way; {config['repetitions_done']} repetitions, interleaved.\n\n"
        + markdown_table(
            [
                "stage",
                "verl 0.6.1 s: median (min-max)",
                "shortcut s",
                "shortcut / verl (medians)",
                "largest difference",
            ],
            rows,
        )
        + f"\n\n{load_averages(runs)}\n"
    )


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True, help="an HF causal LM (e.g. SmolLM2-135M-Instruct)")
    parser.add_argument("--data", type=Path, required=True, help="`python -m data_prep offline`'s output folder")
    parser.add_argument("--smoke", action="store_true", help=f"small sizes for a quick check: {SMOKE}")
    parser.add_argument("--repetitions", type=int, help=f"runs of every stage (default {DEFAULTS['repetitions']})")
    parser.add_argument(
        "--micro-batch", type=int, help=f"rows per SFT and actor step (default {DEFAULTS['micro_batch']})"
    )
    parser.add_argument(
        "--rollout-prompts", type=int, help=f"prompts generated (default {DEFAULTS['rollout_prompts']})"
    )
    parser.add_argument("--val-prompts", type=int, help=f"val prompts generated (default {DEFAULTS['val_prompts']})")
    parser.add_argument("--stages", nargs="+", choices=STAGES, default=list(STAGES), help="the stages to run")
    parser.add_argument("--sft-max-length", type=int, default=216, help="SFT padding length (data.max_length)")
    parser.add_argument("--max-prompt-length", type=int, default=192, help="prompt padding length")
    parser.add_argument("--max-response-length", type=int, default=64, help="response padding and new tokens")
    parser.add_argument("--seed", type=int, default=0, help="seed of the responses")
    parser.add_argument("--name", default="padded_forwards", help="name of the result files")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR, help="where the result files go")
    args = parser.parse_args()
    size = chosen_sizes(args, DEFAULTS, SMOKE)
    if min(size.values()) < 1:
        raise SystemExit("--repetitions, --micro-batch, --rollout-prompts and --val-prompts must be positive")
    results = measure(Stages(args, size), size, args.stages)
    config = {
        "model": str(args.model),
        "data": str(args.data),
        **size,
        "sft_max_length": args.sft_max_length,
        "max_prompt_length": args.max_prompt_length,
        "max_response_length": args.max_response_length,
        "repetitions_done": size["repetitions"],
        "seed": args.seed,
    }
    paths = write_results(args.name, {"config": config, "results": results}, report(results, config), args.results_dir)
    for stage, result in results.items():
        print(f"{stage}: shortcut / verl seconds (medians) {result['methods'][SHORTCUT]['seconds_vs_verl']:.2f}x")
    print(f"wrote {paths[0]} and {paths[1]}")


if __name__ == "__main__":
    main()
