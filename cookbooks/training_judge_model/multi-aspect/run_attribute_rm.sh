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
STRATEGY=${STRATEGY:-fsdp2}  # fsdp | fsdp2
N_GPUS_PER_NODE=${N_GPUS_PER_NODE:-8}  # processes per node (GPUs; CPU mode: 1)
NNODES=${NNODES:-1}  # nodes; > 1 needs MASTER_ADDR and NODE_RANK (and a SAVE_DIR all nodes share)
NODE_RANK=${NODE_RANK:-0}  # this node's rank (several nodes)
MASTER_ADDR=${MASTER_ADDR:-}  # address of node 0 (several nodes)
MASTER_PORT=${MASTER_PORT:-29500}  # rendezvous port on node 0 (several nodes)

exec python -m training.launch multi-aspect "$0" \
    model.partial_pretrain="$MODEL_PATH" data.train_files="$TRAIN_FILE" data.val_files="$VAL_FILE" \
    trainer.default_local_dir="$SAVE_DIR" data.train_batch_size="$TRAIN_BATCH_SIZE" \
    data.micro_batch_size_per_gpu="$MICRO_BATCH_SIZE" data.max_length="$MAX_LENGTH" optim.lr="$LR" \
    trainer.total_epochs="$TOTAL_EPOCHS" model.strategy="$STRATEGY" trainer.n_gpus_per_node="$N_GPUS_PER_NODE" \
    trainer.nnodes="$NNODES" launch.node_rank="$NODE_RANK" launch.master_addr="$MASTER_ADDR" \
    launch.master_port="$MASTER_PORT" \
    "$@"
