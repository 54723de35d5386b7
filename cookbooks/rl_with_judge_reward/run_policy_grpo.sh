#!/usr/bin/env bash
# GRPO of a POLICY whose reward is a running judge server (judge_rewards/verl_reward.py: batched HTTP, cache,
# retries, circuit breaker, rule fallback; each reward says whether the judge or the rules gave it).
#   bash cookbooks/rl_with_judge_reward/run_policy_grpo.sh [--dry-run] [--config FILE.yaml] [--help] [key=value ...]
# Serve a judge first (python -m serving --model JUDGE_DIR); its GET /health is checked before anything starts.
# JUDGE_MODEL_API_KEY (optional) is read from the environment, never printed or saved. Defaults: the GPU recipe's
# (Qwen3-8B, 8 GPUs, vLLM); CPU mode without a GPU. Laptop runs: configs/cpu_smollm2.yaml, configs/cpu_tiny.yaml;
# every other setting: training/configs/policy_grpo.yaml. See README.md.
set -euo pipefail

MODEL_PATH=${MODEL_PATH:-Qwen/Qwen3-8B}  # base model: HF directory or hub id
TRAIN_FILE=${TRAIN_FILE:-./data/policy/train.parquet}  # the policy's questions (python -m data_prep offline --out ./data)
VAL_FILE=${VAL_FILE:-./data/policy/val.parquet}  # validation questions
SAVE_DIR=${SAVE_DIR:-./checkpoints/grpo/policy}  # checkpoints, export (hf/), config snapshot and log
RAY_ADDRESS=${RAY_ADDRESS:-http://127.0.0.1:8265}  # Ray dashboard a job is submitted to
RAY_MODE=${RAY_MODE:-auto}  # auto: submit if a cluster answers at RAY_ADDRESS, else a local Ray | submit | local
NNODES=${NNODES:-1}  # nodes of the Ray cluster (local Ray: 1)
N_GPUS_PER_NODE=${N_GPUS_PER_NODE:-8}  # GPUs per node (CPU mode: 1 worker process)
TRAIN_BATCH_SIZE=${TRAIN_BATCH_SIZE:-96}  # prompts per step (each gets ROLLOUT_N answers)
PPO_MINI_BATCH_SIZE=${PPO_MINI_BATCH_SIZE:-24}  # prompts per optimizer update (divides TRAIN_BATCH_SIZE)
MICRO_BATCH_SIZE=${MICRO_BATCH_SIZE:-1}  # answers per GPU per forward/backward of the update
ROLLOUT_N=${ROLLOUT_N:-4}  # answers sampled per prompt (the GRPO group)
KL_LOSS_COEF=${KL_LOSS_COEF:-0.001}  # weight of the low-variance KL loss to the reference model
LR=${LR:-1e-6}  # actor learning rate
MAX_PROMPT_LENGTH=${MAX_PROMPT_LENGTH:-4096}  # longer prompts are filtered out
MAX_RESPONSE_LENGTH=${MAX_RESPONSE_LENGTH:-2048}  # most tokens an answer may take
TOTAL_EPOCHS=${TOTAL_EPOCHS:-1}  # epochs over TRAIN_FILE
TOTAL_TRAINING_STEPS=${TOTAL_TRAINING_STEPS:-null}  # stop after this many steps (null: all epochs)
SAVE_FREQ=${SAVE_FREQ:-5}  # checkpoint every N steps and at the end (-1: at the end only)
TEST_FREQ=${TEST_FREQ:-5}  # validate every N steps and at the end (-1: at the end only)
JUDGE_MODEL_URL=${JUDGE_MODEL_URL:-}  # judge server base URL, e.g. http://judge-host:8888 (required; must answer GET /health)
REWARD_MANAGER=${REWARD_MANAGER:-batch}  # batch: a step's answers go to the judge in one call | naive: one call per answer
JUDGE_MAX_BATCH_SIZE=${JUDGE_MAX_BATCH_SIZE:-16}  # most answers in one POST /batch_judge
JUDGE_MAX_CONCURRENT=${JUDGE_MAX_CONCURRENT:-32}  # most HTTP requests to the judge in flight at once
JUDGE_TIMEOUT=${JUDGE_TIMEOUT:-30}  # seconds one HTTP attempt to the judge may take
JUDGE_MAX_RETRIES=${JUDGE_MAX_RETRIES:-3}  # retries of a failed batch (timeouts, connection errors, 429, 5xx)
JUDGE_FALLBACK_TO_RULE=${JUDGE_FALLBACK_TO_RULE:-true}  # true: the rules score what the judge cannot | false: the step fails
ROLLOUT_DATA_DIR=${ROLLOUT_DATA_DIR:-null}  # every step's answers with their reward and its source, as JSONL (null: off)

exec python -m training.launch policy-grpo "$0" \
    actor_rollout_ref.model.path="$MODEL_PATH" data.train_files="$TRAIN_FILE" data.val_files="$VAL_FILE" \
    trainer.default_local_dir="$SAVE_DIR" launch.ray_address="$RAY_ADDRESS" launch.ray_mode="$RAY_MODE" \
    trainer.nnodes="$NNODES" trainer.n_gpus_per_node="$N_GPUS_PER_NODE" data.train_batch_size="$TRAIN_BATCH_SIZE" \
    actor_rollout_ref.actor.ppo_mini_batch_size="$PPO_MINI_BATCH_SIZE" \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu="$MICRO_BATCH_SIZE" \
    actor_rollout_ref.rollout.n="$ROLLOUT_N" actor_rollout_ref.actor.kl_loss_coef="$KL_LOSS_COEF" \
    actor_rollout_ref.actor.optim.lr="$LR" data.max_prompt_length="$MAX_PROMPT_LENGTH" \
    data.max_response_length="$MAX_RESPONSE_LENGTH" trainer.total_epochs="$TOTAL_EPOCHS" \
    trainer.total_training_steps="$TOTAL_TRAINING_STEPS" trainer.save_freq="$SAVE_FREQ" \
    trainer.test_freq="$TEST_FREQ" custom_reward_function.reward_kwargs.judge_url="$JUDGE_MODEL_URL" \
    reward_model.reward_manager="$REWARD_MANAGER" \
    custom_reward_function.reward_kwargs.max_batch_size="$JUDGE_MAX_BATCH_SIZE" \
    custom_reward_function.reward_kwargs.max_concurrent_requests="$JUDGE_MAX_CONCURRENT" \
    custom_reward_function.reward_kwargs.timeout="$JUDGE_TIMEOUT" \
    custom_reward_function.reward_kwargs.max_retries="$JUDGE_MAX_RETRIES" \
    custom_reward_function.reward_kwargs.fallback_to_rule="$JUDGE_FALLBACK_TO_RULE" \
    trainer.rollout_data_dir="$ROLLOUT_DATA_DIR" \
    "$@"
