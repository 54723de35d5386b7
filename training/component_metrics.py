"""verl 0.6.1's main_ppo, whose training metrics also carry a reward spec's components:
`python -m training.component_metrics <the arguments of python -m verl.trainer.main_ppo>`
(cookbooks/rl_with_judge_reward/run_policy_grpo.sh runs it).

A reward function's extra keys (a reward spec's `component/<name>`: judge_rewards/verl_reward.py) reach verl's
rollout dumps and its validation metrics, but its training metrics (`critic/score/mean`, ...) read the summed score
tensor only. verl offers no hook for more, so this runs main_ppo with a TaskRunner that, in its own process,
wraps the trainer's `compute_data_metrics`. Each training step's metrics then also have, per numeric extra key
`component/<key>` of the step's rows (NaN: a row the component did not score):

    reward/component/<key>/mean    the mean over the rows it scored
    reward/component/<key>/share   the share of the step's rows it scored (a component's value only)

e.g. `reward/component/judge/mean`, `reward/component/arithmetic/mean`, and each judge component's health figures
(`reward/component/judge/health_judge_rule_agreement/mean`). Nothing else changes: without component keys the
metrics are verl's own.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from pathlib import Path

import hydra
import numpy as np
import ray
import verl.trainer
from verl.trainer import main_ppo
from verl.trainer.ppo import ray_trainer

from judge_rewards.composed_reward import COMPONENT_PREFIX

METRIC_PREFIX = "reward/"


def component_metrics(non_tensor_batch: dict) -> dict[str, float]:
    """The mean and share of every numeric `component/...` column of a step's rows."""
    metrics = {}
    for key, column in non_tensor_batch.items():
        if not key.startswith(COMPONENT_PREFIX):
            continue
        try:
            values = np.asarray(column, dtype=float)
        except (TypeError, ValueError):  # a source column (judge, rule, ...)
            continue
        scored = ~np.isnan(values)
        metrics[f"{METRIC_PREFIX}{key}/mean"] = float(values[scored].mean()) if scored.any() else math.nan
        if "/" not in key.removeprefix(COMPONENT_PREFIX):  # a component's value, not one of its health figures
            metrics[f"{METRIC_PREFIX}{key}/share"] = float(scored.mean()) if values.size else math.nan
    return metrics


def with_component_metrics(compute_data_metrics: Callable) -> Callable:
    @functools.wraps(compute_data_metrics)
    def compute(batch, use_critic: bool = True) -> dict:
        return {**compute_data_metrics(batch=batch, use_critic=use_critic), **component_metrics(batch.non_tensor_batch)}

    return compute


class ComponentMetricsTaskRunner(main_ppo.TaskRunner):
    def run(self, config):
        # fit() looks compute_data_metrics up in ray_trainer's namespace at every step; this actor's process is
        # the one that trains, so the replacement holds for this run only.
        ray_trainer.compute_data_metrics = with_component_metrics(ray_trainer.compute_data_metrics)
        return super().run(config)


VERL_CONFIGS = str(Path(verl.trainer.__file__).parent / "config")  # main_ppo's own config_path


@hydra.main(config_path=VERL_CONFIGS, config_name="ppo_trainer", version_base=None)
def main(config) -> None:
    main_ppo.run_ppo(config, task_runner_class=ray.remote(num_cpus=1)(ComponentMetricsTaskRunner))


if __name__ == "__main__":
    main()
