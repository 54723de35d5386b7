"""The reward client: the adapter that turns an RL trainer's reward() calls into batched judge requests
(JudgeRewardSystem), its HTTP client, circuit breaker and reward-health figures, and the hooks of verl, TRL and
OpenRLHF. What it speaks (templates, parsers, the wire format, rules) is judge_core's.

The adapter's names are exported lazily, so that importing one hook module loads only what it uses."""

_ADAPTER_EXPORTS = {
    "JudgeRewardSystem": "judge_rewards.judge_reward_adapter",
    "BaseJudgeReward": "judge_rewards.judge_reward_adapter",
    "MultiCritiqueJudge": "judge_rewards.judge_reward_adapter",
    "create_judge_reward": "judge_rewards.judge_reward_adapter",
    "JudgeUnavailableError": "judge_rewards.judge_client",
    "JudgeItem": "judge_core.protocol.judge_api",
    "JudgeResult": "judge_rewards.judge_client",
    "JudgeRewardConfig": "judge_rewards.reward_config",
    "ConfigError": "judge_rewards.reward_config",
}

__all__ = sorted(_ADAPTER_EXPORTS)


def __getattr__(name: str):
    if name in _ADAPTER_EXPORTS:
        import importlib

        return getattr(importlib.import_module(_ADAPTER_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
