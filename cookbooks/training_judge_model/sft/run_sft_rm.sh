#!/usr/bin/env bash
# SFT of a judge model: verl's FSDP SFT trainer on multi-turn `messages` parquet, loss on assistant turns, then
# exported to ${SAVE_DIR}/hf (an HF causal LM with judge.json, kind generative). A run started again with the
# same SAVE_DIR resumes.
#
#   cd cookbooks/training_judge_model/sft && bash run_sft_rm.sh [--dry-run] [--config FILE.yaml] [--help] [key=value ...]
#
# Defaults are the GPU recipe's (Qwen3-14B, 8 GPUs, sequence parallel 8); without a GPU it runs in CPU mode.
# Laptop run: configs/cpu_smollm2.yaml. Every other setting: training/configs/sft.yaml, changed with key=value.
# The recipe: README.md next to this script.
set -euo pipefail

MODEL_PATH=${MODEL_PATH:-./models/Qwen3-14B}  # base model: HF directory or hub id
TRAIN_FILE=${TRAIN_FILE:-./data/sft/train.parquet}  # training parquet with a messages column
VAL_FILE=${VAL_FILE:-./data/sft/val.parquet}  # validation parquet with a messages column
SAVE_DIR=${SAVE_DIR:-./checkpoints/sft}  # checkpoints, export, config snapshot and log
TRAIN_BATCH_SIZE=${TRAIN_BATCH_SIZE:-96}  # global batch size (sequences per optimizer step)
MICRO_BATCH_SIZE=${MICRO_BATCH_SIZE:-12}  # sequences per forward per GPU
MAX_LENGTH=${MAX_LENGTH:-4096}  # maximum sequence length in tokens
SP_SIZE=${SP_SIZE:-8}  # Ulysses sequence parallel size (CPU mode: 1)
TOTAL_EPOCHS=${TOTAL_EPOCHS:-1}  # training epochs
N_GPUS_PER_NODE=${N_GPUS_PER_NODE:-8}  # processes per node (GPUs; CPU mode: 1)
NNODES=${NNODES:-1}  # nodes; > 1 needs MASTER_ADDR and NODE_RANK (and a SAVE_DIR all nodes share)
NODE_RANK=${NODE_RANK:-0}  # this node's rank (several nodes)
MASTER_ADDR=${MASTER_ADDR:-}  # address of node 0 (several nodes)
MASTER_PORT=${MASTER_PORT:-29500}  # rendezvous port on node 0 (several nodes)

exec python -m training.launch sft "$0" \
    model.partial_pretrain="$MODEL_PATH" data.train_files="$TRAIN_FILE" data.val_files="$VAL_FILE" \
    trainer.default_local_dir="$SAVE_DIR" data.train_batch_size="$TRAIN_BATCH_SIZE" \
    data.micro_batch_size_per_gpu="$MICRO_BATCH_SIZE" data.max_length="$MAX_LENGTH" \
    ulysses_sequence_parallel_size="$SP_SIZE" trainer.total_epochs="$TOTAL_EPOCHS" \
    trainer.n_gpus_per_node="$N_GPUS_PER_NODE" trainer.nnodes="$NNODES" launch.node_rank="$NODE_RANK" \
    launch.master_addr="$MASTER_ADDR" launch.master_port="$MASTER_PORT" \
    "$@"
