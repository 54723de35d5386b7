"""Judge rewards: the judge prompt templates and parsers, GRPO reward functions, rule rewards and the
client-side reward adapter that turns an RL trainer's reward() calls into batched judge requests.

The adapter's names are exported lazily, so that `import judge_rewards.protocol.templates` stays free of httpx."""

_ADAPTER_EXPORTS = {
    "JudgeRewardSystem": "judge_reward_adapter",
    "BaseJudgeReward": "judge_reward_adapter",
    "MultiCritiqueJudge": "judge_reward_adapter",
    "create_judge_reward": "judge_reward_adapter",
    "JudgeUnavailableError": "judge_client",
    "JudgeItem": "protocol.judge_api",
    "JudgeResult": "judge_client",
    "JudgeRewardConfig": "reward_config",
    "ConfigError": "reward_config",
}

__all__ = sorted(_ADAPTER_EXPORTS)


def __getattr__(name: str):
    if name in _ADAPTER_EXPORTS:
        import importlib

        return getattr(importlib.import_module(f".{_ADAPTER_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
