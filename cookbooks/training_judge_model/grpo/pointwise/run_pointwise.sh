#!/usr/bin/env bash
# GRPO pointwise judge: rates one response 0-4 as <think>..</think><score>N</score>; the reward
# (judge_core/grpo_rewards.py, compute_pointwise_score) falls with the distance from the label.
#
#   cd cookbooks/training_judge_model/grpo && bash pointwise/run_pointwise.sh [--dry-run] [--config FILE.yaml] [--help] [key=value ...]
#
# Defaults are the GPU recipe's (Qwen3-8B, 8 GPUs, vLLM); without a GPU it runs in CPU mode (1 process, HF
# rollouts). Laptop run: configs/cpu_tiny.yaml. Every other setting: training/configs/grpo_pointwise.yaml,
# changed with key=value. The recipe: ../README.md.
set -euo pipefail

TRAIN_FILE=${TRAIN_FILE:-./data/grpo/pointwise/train.parquet}  # verl RL parquet (python -m data_prep ... --out ./data)
VAL_FILE=${VAL_FILE:-./data/grpo/pointwise/val.parquet}  # validation RL parquet
SAVE_DIR=${SAVE_DIR:-./checkpoints/grpo/pointwise}  # checkpoints, export (hf/), config snapshot and log
# MODEL_PATH, Ray, GPUs, batch sizes, lengths, epochs, save and test frequency: the knobs every GRPO launcher
# shares, in ../grpo_knobs.sh with GRPO_ARGUMENTS, the config key each sets (--help lists them all).
# shellcheck source=../grpo_knobs.sh
source "$(dirname "$0")/../grpo_knobs.sh"

exec python -m training.launch grpo-pointwise "$0" \
    "${GRPO_ARGUMENTS[@]}" \
    "$@"
