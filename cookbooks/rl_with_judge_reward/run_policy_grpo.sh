#!/usr/bin/env bash
# GRPO of a POLICY whose reward is a running judge server (judge_rewards/verl_reward.py: batched HTTP, cache,
# retries, circuit breaker, rule fallback; each reward says whether the judge or the rules gave it).
#   bash cookbooks/rl_with_judge_reward/run_policy_grpo.sh [--dry-run] [--config FILE.yaml] [--help] [key=value ...]
# Serve a judge first (python -m serving --model JUDGE_DIR); its GET /health is checked before anything starts.
# JUDGE_MODEL_API_KEY (optional) is read from the environment, never printed or saved. Defaults: the GPU recipe's
# (Qwen3-8B, 8 GPUs, vLLM); CPU mode without a GPU. Laptop runs: configs/cpu_smollm2.yaml, configs/cpu_tiny.yaml;
# every other setting: training/configs/policy_grpo.yaml. See README.md.
set -euo pipefail

TRAIN_FILE=${TRAIN_FILE:-./data/policy/train.parquet}  # the policy's questions (python -m data_prep offline --out ./data)
VAL_FILE=${VAL_FILE:-./data/policy/val.parquet}  # validation questions
SAVE_DIR=${SAVE_DIR:-./checkpoints/grpo/policy}  # checkpoints, export (hf/), config snapshot and log
# MODEL_PATH, Ray, GPUs, batch sizes, lengths, epochs, save and test frequency: the knobs of the GRPO judge
# recipe, in ../training_judge_model/grpo/grpo_knobs.sh with GRPO_ARGUMENTS, the config key each sets (--help
# lists them all).
# shellcheck source=../training_judge_model/grpo/grpo_knobs.sh
source "$(dirname "$0")/../training_judge_model/grpo/grpo_knobs.sh"

# The judge server and how the reward asks it:
JUDGE_MODEL_URL=${JUDGE_MODEL_URL:-}  # judge server base URL, e.g. http://judge-host:8888 (required; must answer GET /health)
REWARD_MANAGER=${REWARD_MANAGER:-batch}  # batch: a step's answers go to the judge in one call | naive: one call per answer
JUDGE_MAX_BATCH_SIZE=${JUDGE_MAX_BATCH_SIZE:-16}  # most answers in one POST /batch_judge
JUDGE_MAX_CONCURRENT=${JUDGE_MAX_CONCURRENT:-32}  # most HTTP requests to the judge in flight at once
JUDGE_TIMEOUT=${JUDGE_TIMEOUT:-30}  # seconds one HTTP attempt to the judge may take
JUDGE_MAX_RETRIES=${JUDGE_MAX_RETRIES:-3}  # retries of a failed batch (timeouts, connection errors, 429, 5xx)
JUDGE_FALLBACK_TO_RULE=${JUDGE_FALLBACK_TO_RULE:-true}  # true: the rules score what the judge cannot | false: the step fails
JUDGE_REWARD_SPEC=${JUDGE_REWARD_SPEC:-null}  # a reward spec YAML: judges and rules mixed, routed (null: the judge alone)
ROLLOUT_DATA_DIR=${ROLLOUT_DATA_DIR:-null}  # every step's answers with their reward and its source, as JSONL (null: off)

exec python -m training.launch policy-grpo "$0" \
    "${GRPO_ARGUMENTS[@]}" \
    custom_reward_function.reward_kwargs.judge_url="$JUDGE_MODEL_URL" \
    reward_model.reward_manager="$REWARD_MANAGER" \
    custom_reward_function.reward_kwargs.max_batch_size="$JUDGE_MAX_BATCH_SIZE" \
    custom_reward_function.reward_kwargs.max_concurrent_requests="$JUDGE_MAX_CONCURRENT" \
    custom_reward_function.reward_kwargs.timeout="$JUDGE_TIMEOUT" \
    custom_reward_function.reward_kwargs.max_retries="$JUDGE_MAX_RETRIES" \
    custom_reward_function.reward_kwargs.fallback_to_rule="$JUDGE_FALLBACK_TO_RULE" \
    custom_reward_function.reward_kwargs.reward_spec="$JUDGE_REWARD_SPEC" \
    trainer.rollout_data_dir="$ROLLOUT_DATA_DIR" \
    "$@"
