#!/usr/bin/env bash
# Bradley-Terry judge: a scalar reward model trained on preference pairs (loss -log sigmoid(r_chosen - r_rejected))
# by training.bt_trainer, verl's FSDP SFT trainer with a 1-label scoring head, then exported to
# ${SAVE_DIR}/hf (an HF sequence-classification model with judge.json). A run started again with the
# same SAVE_DIR resumes from its latest checkpoint.
#
#   bash cookbooks/training_judge_model/bradley-terry/run_bt_rm.sh [--dry-run] [--config FILE.yaml] [--help] [key=value ...]
#
# Defaults are the GPU recipe's (Qwen3-8B, 8 GPUs); without a GPU it runs in CPU mode. Laptop run:
# configs/cpu_smollm2.yaml. Every other setting: training/configs/bradley_terry.yaml, changed with key=value.
# The recipe: README.md next to this script.
set -euo pipefail

MODEL_PATH=${MODEL_PATH:-./models/Qwen3-8B}  # base model: HF directory or hub id (a scoring head is added)
TRAIN_FILE=${TRAIN_FILE:-./data/bradley_terry/train.parquet}  # training pairs: chosen, rejected (JSON message lists), optional margin
VAL_FILE=${VAL_FILE:-./data/bradley_terry/val.parquet}  # validation pairs, same columns
SAVE_DIR=${SAVE_DIR:-./checkpoints/bradley-terry}  # checkpoints, export, config snapshot and log
TRAIN_BATCH_SIZE=${TRAIN_BATCH_SIZE:-256}  # global batch size (pairs per optimizer step)
MICRO_BATCH_SIZE=${MICRO_BATCH_SIZE:-1}  # pairs per forward per process (packed: tokens per forward = this x 2 x MAX_LENGTH)
MAX_LENGTH=${MAX_LENGTH:-4096}  # maximum tokens per sequence
LR=${LR:-2e-6}  # peak learning rate
TOTAL_EPOCHS=${TOTAL_EPOCHS:-3}  # training epochs (the LR schedule spans them all)
# STRATEGY and the nodes and GPUs to train on: the knobs both scalar-head judges share, in
# ../scalar_head_knobs.sh with SCALAR_HEAD_ARGUMENTS, the config key each knob sets (--help lists them all).
# shellcheck source=../scalar_head_knobs.sh
source "$(dirname "$0")/../scalar_head_knobs.sh"

exec python -m training.launch bradley-terry "$0" \
    "${SCALAR_HEAD_ARGUMENTS[@]}" \
    "$@"
