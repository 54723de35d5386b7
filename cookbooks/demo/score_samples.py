"""Score a few held-out answers through JudgeRewardSystem, as an RL training loop would.

    JUDGE_MODEL_URL=http://127.0.0.1:8888 python cookbooks/demo/score_samples.py --data runs/demo/data/eval/test.parquet

For a few prompts of the RewardBench2-style eval file, the correct answer and one flawed answer are
scored from several threads at once (the adapter batches them into /batch_judge requests); then the
adapter's metrics are printed.
"""

from __future__ import annotations

import argparse
import concurrent.futures

import pandas as pd

from judge_rewards import JudgeRewardSystem

# The `reward.config` block of a training YAML, as in the judge integration guide.
REWARD_CONFIG = {
    "judge_url": "${JUDGE_MODEL_URL}",
    "use_cache": True,
    "cache_size": 5000,
    "max_batch_size": 16,
    "batch_timeout": 0.05,
    "max_concurrent_requests": 32,
    "timeout": 30.0,
    "fallback_to_rule": True,
    "max_retries": 3,
}


def sample_items(data_path: str, prompts: int) -> list[dict]:
    rows = pd.read_parquet(data_path).groupby("subset", sort=True).head(1).head(prompts)
    items = []
    for row in rows.itertuples():
        items.append({"prompt": row.prompt, "completion": row.chosen[0], "answer": None, "kind": "correct"})
        items.append({"prompt": row.prompt, "completion": row.rejected[0], "answer": None, "kind": "flawed"})
    return items


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="a parquet file in RewardBench2 schema")
    parser.add_argument("--prompts", type=int, default=5, help="prompts to sample, one per subset")
    args = parser.parse_args()

    items = sample_items(args.data, args.prompts)
    with JudgeRewardSystem(REWARD_CONFIG) as reward_system:
        with concurrent.futures.ThreadPoolExecutor(len(items)) as pool:
            results = list(pool.map(lambda item: reward_system.reward(item["prompt"], item["completion"]), items))
        for item, result in zip(items, results, strict=True):
            print(
                f"{result['reward']:.3f}  {result['source']:<6} {item['kind']:<8} "
                f"{item['prompt'][:50]!r} -> {item['completion'][:60]!r}"
            )
        metrics = reward_system.get_metrics()
    print(
        f"judge metrics: batched_fraction={metrics['batched_fraction']}, mean_batch_size={metrics['mean_batch_size']}, "
        f"latency p50={metrics['latency']['p50']}, error_rate={metrics['error_rate']}, "
        f"circuit={metrics['circuit_breaker']['state']}"
    )


if __name__ == "__main__":
    main()
