"""Keep the GRPO prompts a judge can still learn from: `python -m evaluation.hard_prompts MODEL DATA OUT`.

GRPO learns only from a group whose rewards differ: where every sampled answer earns the same reward, each
advantage is zero, and the prompt spends a rollout for nothing. A warm-started judge earns the same reward on
many of its prompts (all right, or all wrong the same way), so many of a step's groups teach nothing while the
rest move it. verl 0.6.1's trainer cannot skip them as it samples (DAPO's `filter_groups` lives in verl's recipe
folder, not in the package), so this does it once, before training: it samples `--samples` answers per prompt
from MODEL (the warm start) as the rollout does (evaluation.sampling: chat template, `--temperature`, at most
`--max-new-tokens`), scores them with the recipe's reward (judge_core.grpo_rewards, `--reward`), and writes the
prompts whose rewards differ to OUT, every column as it was. It prints how many prompts were kept, overall and
per `extra_info.subset` where the file has one. A run draws only steps x train batch prompts: `--prompts N` samples
N of the file's prompts, drawn at random (`--seed`), instead of all of them.

DATA is a GRPO judge parquet as verl reads it (`data_prep offline`'s grpo/pointwise or grpo/pairwise): `prompt`
(the messages) and `reward_model.ground_truth`. Run it on the train split only; validation stays whole.
"""

from __future__ import annotations

import collections
import dataclasses
import random
import statistics
from pathlib import Path

from judge_core import grpo_rewards
from judge_core.settings import REQUIRED, option, parse_configs
from judge_models.config import BACKEND_CHOICES

from .sampling import sample_completions

REWARDS = {
    "pointwise": grpo_rewards.compute_pointwise_score,
    "pointwise-recall": grpo_rewards.compute_pointwise_recall_score,
    "pairwise": grpo_rewards.compute_pairwise_score,
}


@dataclasses.dataclass
class HardPromptsConfig:
    model: str = option(
        REQUIRED, "the judge to sample (Hugging Face format): the GRPO run's starting model", positional=True
    )
    data: str = option(REQUIRED, "GRPO judge parquet: prompt, reward_model.ground_truth", positional=True)
    out: str = option(REQUIRED, "parquet of the prompts whose sampled answers earn different rewards", positional=True)
    reward: str = option(REQUIRED, "the recipe's reward (judge_core/grpo_rewards.py)", choices=tuple(REWARDS))
    samples: int = option(4, "answers sampled per prompt: the rollout's n")
    temperature: float = option(1.0, "sampling temperature: the rollout's")
    max_new_tokens: int = option(64, "longest answer, in tokens: the rollout's max_response_length")
    seed: int = option(1, "seed of the sampling, and of the draw of --prompts")
    prompts: int = option(0, "how many of the file's prompts to sample, drawn at random; 0: every prompt")
    backend: str = option(
        "auto", "sampling engine: vllm, transformers, or auto (vllm where it can be imported)", choices=BACKEND_CHOICES
    )


@dataclasses.dataclass
class Prompt:
    row: int  # in the file
    messages: list[dict]
    ground_truth: str
    data_source: str
    subset: str


def read_prompts(path: Path) -> list[Prompt]:
    """The prompts of a GRPO parquet; a row without a prompt or a ground truth is an error naming the file and row."""
    import pyarrow.parquet as pq

    prompts = []
    for number, row in enumerate(pq.read_table(path).to_pylist()):
        ground_truth = (row.get("reward_model") or {}).get("ground_truth")
        missing = [
            name
            for name, value in (("prompt", row.get("prompt")), ("reward_model.ground_truth", ground_truth))
            if not value
        ]
        if missing:
            raise ValueError(f"{path}: row {number} has no {', '.join(missing)}")
        subset = (row.get("extra_info") or {}).get("subset") or "-"
        prompts.append(Prompt(number, row["prompt"], ground_truth, row.get("data_source") or "", subset))
    return prompts


def drawn(prompts: list[Prompt], count: int, seed: int) -> list[Prompt]:
    """`count` of the prompts drawn at random, in file order; every prompt when `count` is 0."""
    if not 0 <= count <= len(prompts):
        raise ValueError(f"--prompts {count}: 0 (every prompt) or at most the file's {len(prompts)}")
    if not count:
        return prompts
    return sorted(random.Random(seed).sample(prompts, count), key=lambda prompt: prompt.row)


def group_rewards(prompts: list[Prompt], answers: list[list[str]], reward: str, path: Path) -> list[list[float]]:
    """Each prompt's answers' rewards; a ground truth the reward cannot read is an error naming the file and row."""
    compute = REWARDS[reward]
    groups = []
    for prompt, group in zip(prompts, answers, strict=True):
        try:
            groups.append([compute(prompt.data_source, text, prompt.ground_truth)["score"] for text in group])
        except ValueError as err:
            raise ValueError(f"{path}: row {prompt.row}: {err}") from None
    return groups


def disagreeing(groups: list[list[float]]) -> list[int]:
    """The rows whose rewards differ: the groups with a nonzero advantage."""
    return [row for row, rewards in enumerate(groups) if len(set(rewards)) > 1]


def report(
    prompts: list[Prompt], groups: list[list[float]], kept: list[int], in_file: int, config: HardPromptsConfig
) -> list[str]:
    kept_set = set(kept)
    subsets = collections.defaultdict(lambda: [0, 0])
    for index, prompt in enumerate(prompts):
        subsets[prompt.subset][0] += 1
        subsets[prompt.subset][1] += index in kept_set
    rewards = [reward for group in groups for reward in group]
    sampled = f"{len(prompts)} prompts" if len(prompts) == in_file else f"{len(prompts)} of {in_file} prompts (drawn)"
    lines = [
        f"{sampled}, {config.samples} answers each (temperature {config.temperature}, at most "
        f"{config.max_new_tokens} tokens, seed {config.seed}): mean reward {statistics.fmean(rewards):.3f}; "
        f"kept {len(kept)} whose rewards differ, left out {len(prompts) - len(kept)} whose answers all earn one reward",
        f"{'subset':<12}  {'prompts':>7}  {'kept':>5}",
    ]
    lines += [f"{name:<12}  {total:>7}  {count:>5}" for name, (total, count) in sorted(subsets.items())]
    return lines


def main(argv: list[str] | None = None) -> None:
    (config,) = parse_configs("python -m evaluation.hard_prompts", __doc__, [HardPromptsConfig], argv)
    if config.samples < 2:
        raise SystemExit(f"hard_prompts: --samples {config.samples}: one answer has no other to differ from")
    import pyarrow.parquet as pq

    try:
        in_file = read_prompts(Path(config.data))
        prompts = drawn(in_file, config.prompts, config.seed)
        answers = sample_completions(
            config.model,
            [p.messages for p in prompts],
            config.samples,
            config.temperature,
            config.max_new_tokens,
            config.seed,
            config.backend,
        )
        groups = group_rewards(prompts, answers, config.reward, Path(config.data))
    except (OSError, ValueError) as err:
        raise SystemExit(f"hard_prompts: {err}") from None
    kept = disagreeing(groups)
    if not kept:
        raise SystemExit(f"hard_prompts: every prompt's {config.samples} answers earn one reward: nothing to keep")
    Path(config.out).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pq.read_table(config.data).take([prompts[index].row for index in kept]), config.out)
    print("\n".join(report(prompts, groups, kept, len(in_file), config)))
    print(config.out)


if __name__ == "__main__":
    main()
