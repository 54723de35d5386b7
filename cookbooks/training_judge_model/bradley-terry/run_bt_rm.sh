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
STRATEGY=${STRATEGY:-fsdp2}  # fsdp | fsdp2
N_GPUS_PER_NODE=${N_GPUS_PER_NODE:-8}  # processes per node (GPUs; CPU mode: 1)
NNODES=${NNODES:-1}  # nodes; > 1 needs MASTER_ADDR and NODE_RANK (and a SAVE_DIR all nodes share)
NODE_RANK=${NODE_RANK:-0}  # this node's rank (several nodes)
MASTER_ADDR=${MASTER_ADDR:-}  # address of node 0 (several nodes)
MASTER_PORT=${MASTER_PORT:-29500}  # rendezvous port on node 0 (several nodes)

exec python -m training.launch bradley-terry "$0" \
    model.partial_pretrain="$MODEL_PATH" data.train_files="$TRAIN_FILE" data.val_files="$VAL_FILE" \
    trainer.default_local_dir="$SAVE_DIR" data.train_batch_size="$TRAIN_BATCH_SIZE" \
    data.micro_batch_size_per_gpu="$MICRO_BATCH_SIZE" data.max_length="$MAX_LENGTH" optim.lr="$LR" \
    trainer.total_epochs="$TOTAL_EPOCHS" model.strategy="$STRATEGY" trainer.n_gpus_per_node="$N_GPUS_PER_NODE" \
    trainer.nnodes="$NNODES" launch.node_rank="$NODE_RANK" launch.master_addr="$MASTER_ADDR" \
    launch.master_port="$MASTER_PORT" \
    "$@"
