#!/usr/bin/env bash
# GRPO pairwise judge: picks the better of two responses as <think>..</think><better>A|B</better>; the
# reward (judge_core/grpo_rewards.py, compute_pairwise_score) is 1 for the right letter.
#
#   cd cookbooks/training_judge_model/grpo && bash pairwise/run_pairwise.sh [--dry-run] [--config FILE.yaml] [--help] [key=value ...]
#
# Defaults are the GPU recipe's (Qwen3-8B, 8 GPUs, vLLM); without a GPU it runs in CPU mode (1 process, HF
# rollouts). Laptop run: configs/cpu_tiny.yaml. Every other setting: training/configs/grpo_pairwise.yaml,
# changed with key=value. The recipe: ../README.md.
set -euo pipefail

TRAIN_FILE=${TRAIN_FILE:-./data/grpo/pairwise/train.parquet}  # verl RL parquet (python -m data_prep ... --out ./data)
VAL_FILE=${VAL_FILE:-./data/grpo/pairwise/val.parquet}  # validation RL parquet
SAVE_DIR=${SAVE_DIR:-./checkpoints/grpo/pairwise}  # checkpoints, export (hf/), config snapshot and log
# MODEL_PATH, Ray, GPUs, batch sizes, lengths, epochs, save and test frequency: the knobs every GRPO launcher
# shares, in ../grpo_knobs.sh with GRPO_ARGUMENTS, the config key each sets (--help lists them all).
# shellcheck source=../grpo_knobs.sh
source "$(dirname "$0")/../grpo_knobs.sh"

exec python -m training.launch grpo-pairwise "$0" \
    "${GRPO_ARGUMENTS[@]}" \
    "$@"
