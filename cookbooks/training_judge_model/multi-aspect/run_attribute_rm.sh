#!/usr/bin/env bash
# Multi-aspect judge: a regression head predicting each HelpSteer2 attribute (helpfulness, correctness, coherence,
# complexity, verbosity; 0..4) of a response, loss the mean squared error, trained by training.attribute_trainer
# (the scalar-head trainer base it shares with Bradley-Terry, on verl's FSDP SFT trainer), then exported to
# ${SAVE_DIR}/hf (an HF sequence-classification model with judge.json: attributes and score weights). A run
# started again with the same SAVE_DIR resumes from its latest checkpoint.
#
#   bash cookbooks/training_judge_model/multi-aspect/run_attribute_rm.sh [--dry-run] [--config FILE.yaml] [--help] [key=value ...]
#
# Defaults are the GPU recipe's (Qwen3-8B, 8 GPUs); without a GPU it runs in CPU mode. Laptop run:
# configs/cpu_smollm2.yaml. Every other setting: training/configs/attributes.yaml, changed with key=value.
# The recipe: README.md next to this script.
set -euo pipefail

MODEL_PATH=${MODEL_PATH:-./models/Qwen3-8B}  # base model: HF directory or hub id (a head with one output per attribute is added)
TRAIN_FILE=${TRAIN_FILE:-./data/attributes/train.parquet}  # training conversations: conversation (JSON message list), one 0..4 rating column per attribute
VAL_FILE=${VAL_FILE:-./data/attributes/val.parquet}  # validation conversations, same columns
SAVE_DIR=${SAVE_DIR:-./checkpoints/multi-aspect}  # checkpoints, export, config snapshot and log
TRAIN_BATCH_SIZE=${TRAIN_BATCH_SIZE:-256}  # global batch size (conversations per optimizer step)
MICRO_BATCH_SIZE=${MICRO_BATCH_SIZE:-2}  # conversations per forward per process
MAX_LENGTH=${MAX_LENGTH:-4096}  # maximum tokens per conversation
LR=${LR:-2e-6}  # peak learning rate
TOTAL_EPOCHS=${TOTAL_EPOCHS:-2}  # training epochs (the LR schedule spans them all)
# STRATEGY and the nodes and GPUs to train on: the knobs both scalar-head judges share, in
# ../scalar_head_knobs.sh with SCALAR_HEAD_ARGUMENTS, the config key each knob sets (--help lists them all).
# shellcheck source=../scalar_head_knobs.sh
source "$(dirname "$0")/../scalar_head_knobs.sh"

exec python -m training.launch multi-aspect "$0" \
    "${SCALAR_HEAD_ARGUMENTS[@]}" \
    "$@"
