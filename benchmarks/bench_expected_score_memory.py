"""Benchmark 5: memory of a generative judge's expected scores on the transformers backend.

    python -m benchmarks.bench_expected_score_memory --base-model runs/demo/models/smollm2   # ~17 min here
    python -m benchmarks.bench_expected_score_memory --base-model DIR --smoke --results-dir /tmp/results

An expected score needs, at the step that writes the answer's value, the judge's probabilities of the value
tokens; which step that is is known only once the answer is parsed. Two ways to have them, the same model and
batch, greedy, every row generating exactly --new-tokens tokens:

- recorder: the server's way (judge_models.transformers_engine.CandidateRecorder): a forward hook reduces each step's
  raw logits to the candidate tokens' log-probabilities as they come.
- output_logits: what a transformers user writes: `generate(..., output_logits=True)`, which keeps every
  step's raw logits (steps x rows x vocabulary floats), then the log-softmax and the candidates' columns.

Each run is a fresh process: it loads the model, runs one short warm-up generation, resets its peak resident
memory (/proc/self/clear_refs) and measures the peak over the generation above the memory it had before, and
the generation's time. Both ways must give the same log-probabilities (checked). The runs alternate (A B A B
...), --repetitions of each; the results give median and range and the load average before each run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import (
    RESULTS_DIR,
    RunLog,
    add_ratios,
    exit_on_sigterm,
    load_averages,
    markdown_table,
    median_and_range,
    rotated,
    summarize_runs,
    write_results,
)

METHODS = ("recorder", "output_logits")
CANDIDATES = ("0", "1", "2", "3", "4")


def judge_prompts(tokenizer, rows: int) -> list[list[int]]:
    """Pointwise judge prompts of different lengths (the real template), as token ids."""
    from judge_core.protocol import templates

    prompts = []
    for row in range(rows):
        response = " ".join(["The answer explains each step of the sum and checks it."] * (1 + row % 4))
        messages = templates.pointwise_messages(f"What is {row} + {row}?", response)
        prompts.append(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True))
    return prompts


def resident_kib(field: str) -> int:
    line = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith(field))
    return int(line.split()[1])


def measure(method: str, model_dir: str, rows: int, new_tokens: int) -> dict:
    """One run in this process: peak memory above the start and time of one generation, and a checksum of the
    candidate log-probabilities."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from judge_models.transformers_engine import CandidateRecorder

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    candidates = [tokenizer.convert_tokens_to_ids(value) for value in CANDIDATES]
    batch = tokenizer.pad({"input_ids": judge_prompts(tokenizer, rows)}, return_tensors="pt")
    settings = {
        "do_sample": False,
        "pad_token_id": tokenizer.pad_token_id,
        "return_dict_in_generate": True,
        "max_new_tokens": new_tokens,
        "min_new_tokens": new_tokens,
    }
    with torch.inference_mode():
        model.generate(**batch, **{**settings, "max_new_tokens": 2, "min_new_tokens": 2})
        Path("/proc/self/clear_refs").write_text("5")
        before = resident_kib("VmRSS")
        start = time.perf_counter()
        if method == "recorder":
            with CandidateRecorder(model, candidates) as recorder:
                model.generate(**batch, **settings)
            logprobs = torch.tensor(recorder.logprobs())
        else:
            output = model.generate(**batch, **settings, output_logits=True)
            steps = [torch.log_softmax(step.float(), dim=-1)[:, candidates] for step in output.logits]
            logprobs = torch.stack(steps, dim=1)
        seconds = time.perf_counter() - start
        peak = resident_kib("VmHWM")
    return {
        "peak_above_start_mib": round((peak - before) / 1024, 1),
        "generate_s": round(seconds, 2),
        "logprobs_shape": list(logprobs.shape),
        "logprobs_sum": float(logprobs.double().sum()),
    }


def run_in_fresh_process(method: str, args) -> dict:
    command = [sys.executable, "-m", "benchmarks.bench_expected_score_memory", "--worker", method]
    command += ["--base-model", args.base_model, "--rows", str(args.rows), "--new-tokens", str(args.new_tokens)]
    finished = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(finished.stdout.strip().splitlines()[-1])


def compare(args) -> dict:
    log = RunLog()
    runs = {method: [] for method in METHODS}
    for repetition in range(args.repetitions):
        for method in rotated(METHODS, repetition):
            stamp = log.start(repetition)
            runs[method].append({"method": method, **stamp, **run_in_fresh_process(method, args)})
            print(method, runs[method][-1], flush=True)
    checksums = {
        (tuple(run["logprobs_shape"]), round(run["logprobs_sum"], 2)) for all_runs in runs.values() for run in all_runs
    }
    if len(checksums) != 1:
        raise SystemExit(f"the two ways gave different log-probabilities: {checksums}")
    keys = ("peak_above_start_mib", "generate_s")
    results = {method: summarize_runs(method_runs, keys) for method, method_runs in runs.items()}
    for key in keys:
        add_ratios(results, key, "output_logits")
    return results


def report(results: dict, args) -> str:
    vocabulary_floats = args.rows * args.new_tokens
    rows = [
        [
            method,
            median_and_range(results[method]["peak_above_start_mib"]),
            f"{results[method]['peak_above_start_mib_vs_output_logits']:.2f}x",
            median_and_range(results[method]["generate_s"], 2),
            f"{results[method]['generate_s_vs_output_logits']:.2f}x",
        ]
        for method in METHODS
    ]
    table = markdown_table(
        ["method", "peak memory above start, MiB", "vs output_logits", "generate, s", "vs output_logits"], rows
    )
    all_runs = [run for method in METHODS for run in results[method]["runs"]]
    return (
        f"# Expected-score memory: {args.rows} rows x {args.new_tokens} new tokens "
        f"({vocabulary_floats} vocabulary-sized logit rows), {Path(args.base_model).name}\n\n"
        f"{table}\n\nMedian (min-max) of {args.repetitions} runs each, alternating. {load_averages(all_runs)}\n"
    )


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-model", required=True, help="a causal LM directory (e.g. SmolLM2-135M-Instruct)")
    parser.add_argument("--rows", type=int, default=16, help="prompts generated together")
    parser.add_argument("--new-tokens", type=int, default=256, help="tokens every row generates")
    parser.add_argument("--repetitions", type=int, default=5, help="runs of each method, alternating")
    parser.add_argument("--name", default="expected_score_memory", help="result files' name")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument("--smoke", action="store_true", help="4 rows, 16 tokens, 2 repetitions: a quick check")
    parser.add_argument("--worker", choices=METHODS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(measure(args.worker, args.base_model, args.rows, args.new_tokens)))
        return
    if args.smoke:
        args.rows, args.new_tokens, args.repetitions = 4, 16, 2
    results = compare(args)
    settings = {"rows": args.rows, "new_tokens": args.new_tokens, "repetitions": args.repetitions}
    markdown = report(results, args)
    paths = write_results(args.name, {"settings": settings, "methods": results}, markdown, args.results_dir)
    print(markdown, *paths, sep="\n")


if __name__ == "__main__":
    main()
