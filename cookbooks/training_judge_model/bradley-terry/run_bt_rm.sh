#!/usr/bin/env bash
# Bradley-Terry judge: a scalar reward model trained on preference pairs (loss -log sigmoid(r_chosen - r_rejected))
# by training.bt_trainer, verl's FSDP SFT trainer with a 1-label scoring head.
#
#   bash cookbooks/training_judge_model/bradley-terry/run_bt_rm.sh [--dry-run] [--config FILE] [hydra.key=value ...]
#
# Defaults are the GPU recipe's (Qwen3-8B, 8 GPUs). Without a GPU the launcher runs in CPU mode; see
# configs/cpu_smollm2.env for a laptop-sized run. A finished run is exported to EXPORT_DIR (an HF
# sequence-classification model with judge.json); a run started again with the same SAVE_DIR resumes from
# its latest checkpoint.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common/launcher.sh"
launcher_init "$@"

knob MODEL_PATH           ./models/Qwen3-8B                  "base model: HF directory or hub id (a scoring head is added)"
knob TRAIN_FILE           ./data/bradley_terry/train.parquet "training pairs: chosen, rejected (JSON message lists), optional margin"
knob VAL_FILE             ./data/bradley_terry/val.parquet   "validation pairs, same columns"
knob SAVE_DIR             ./checkpoints/bradley-terry        "checkpoints, config snapshot and log"
knob TRAIN_BATCH_SIZE     256                                "global batch size (pairs per optimizer step)"
knob MICRO_BATCH_SIZE     1                                  "pairs per forward per process (verl: data.micro_batch_size_per_gpu)"
knob MAX_LENGTH           4096                               "maximum tokens per sequence"
knob TRUNCATION           left                               "longer sequences: left (keeps the end, where the reward is read) | right | error"
knob LR                   2e-6                               "peak learning rate"
knob TOTAL_EPOCHS         3                                  "training epochs (the LR schedule spans them all)"
knob TOTAL_TRAINING_STEPS ""                                 "stop after this many steps (empty: all epochs)"
knob STRATEGY             fsdp2                              "fsdp | fsdp2"
knob WEIGHT_DECAY         0.001                              "AdamW weight decay"
knob WARMUP_STEPS_RATIO   0.03                               "share of the schedule's steps spent warming up (0-1)"
knob CLIP_GRAD            2.0                                "gradient norm clip"
knob LR_SCHEDULER         cosine                             "cosine | wsd"
knob MARGIN_MODE          none                               "data margin in the loss: none | scaled (-m*logsig(d)) | offset (-logsig(d-m))"
torchrun_knobs 8
knob SAVE_FREQ            -1                                 "checkpoint every N steps (-1: at the end only)"
knob TEST_FREQ            -1                                 "validate every N steps (-1: at the end only)"
knob GRADIENT_CHECKPOINTING true                             "recompute activations to save memory: true | false"
knob LOGGER               "[console]"                        "verl trainer.logger, e.g. [console,tensorboard,wandb]"
knob PROJECT_NAME         judge-bt                           "tracking project name"
knob EXPERIMENT_NAME      "$(basename "$SAVE_DIR")"          "tracking experiment name"
knob EXPORT_DIR           "$SAVE_DIR/hf"                     "where the final model is exported (none: no export)"
knobs_done

validate_sft_trainer_knobs
require_number WEIGHT_DECAY
require_number WARMUP_STEPS_RATIO 0 1
require_number CLIP_GRAD
require_choice LR_SCHEDULER cosine wsd
require_choice MARGIN_MODE none scaled offset
read -r -a torchrun <<< "$(torchrun_command)"
require_divisible "$TRAIN_BATCH_SIZE" "$((NNODES * N_GPUS_PER_NODE * MICRO_BATCH_SIZE))" \
    "TRAIN_BATCH_SIZE vs processes (NNODES * N_GPUS_PER_NODE) * MICRO_BATCH_SIZE"

mapfile -t shared_overrides < <(sft_trainer_overrides)
launch "${torchrun[@]}" -m training.bt_trainer "${shared_overrides[@]}" \
    optim.weight_decay="$WEIGHT_DECAY" \
    optim.lr_warmup_steps_ratio="$WARMUP_STEPS_RATIO" \
    optim.clip_grad="$CLIP_GRAD" \
    optim.lr_scheduler="$LR_SCHEDULER" \
    bt.margin_mode="$MARGIN_MODE" \
    "${HYDRA_OVERRIDES[@]}"

if [[ "$EXPORT_DIR" != none && "$NODE_RANK" == 0 ]]; then
    launch_then python -m training.export scalar "$SAVE_DIR" "$EXPORT_DIR" \
        --val-file "$VAL_FILE" --max-length "$MAX_LENGTH" --truncation "$TRUNCATION" --dtype "$(training_dtype)" \
        --recipe bradley-terry --base-model "$MODEL_PATH" --train-file "$TRAIN_FILE"
fi
