#!/usr/bin/env bash
# SFT of a judge model: verl's FSDP SFT trainer on multi-turn `messages` parquet, loss on assistant turns.
#
#   cd cookbooks/training_judge_model/sft && bash run_sft_rm.sh [--dry-run] [--config FILE] [hydra.key=value ...]
#
# Defaults are the GPU recipe's (Qwen3-14B, 8 GPUs, sequence parallel 8). Without a GPU the launcher runs
# in CPU mode; see configs/cpu_smollm2.env for a laptop-sized run. A finished run is exported to EXPORT_DIR
# (an HF causal LM with judge.json, kind generative); a run started again with the same SAVE_DIR resumes.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common/launcher.sh"
launcher_init "$@"

if is_cpu; then default_sp=1; else default_sp=8; fi
knob MODEL_PATH          ./models/Qwen3-14B            "base model: HF directory or hub id"
knob TRAIN_FILE          ./data/sft/train.parquet      "training parquet with a messages column"
knob VAL_FILE            ./data/sft/val.parquet        "validation parquet with a messages column"
knob SAVE_DIR            ./checkpoints/sft             "checkpoints, config snapshot and log"
knob TRAIN_BATCH_SIZE    96                            "global batch size (sequences per optimizer step)"
knob MICRO_BATCH_SIZE    12                            "per-GPU micro batch (verl: data.micro_batch_size_per_gpu)"
knob MAX_LENGTH          4096                          "maximum sequence length in tokens"
knob TRUNCATION          right                         "what to do with longer sequences: right | left | error"
knob SP_SIZE             "$default_sp"                 "Ulysses sequence parallel size (GPU: 8; CPU: 1)"
knob TOTAL_EPOCHS        1                             "training epochs"
knob TOTAL_TRAINING_STEPS ""                           "stop after this many steps (the LR schedule still spans TOTAL_EPOCHS)"
knob LR                  1e-5                          "peak learning rate (cosine schedule, 10% warm-up)"
knob STRATEGY            fsdp2                         "fsdp | fsdp2"
torchrun_knobs 8
knob SAVE_FREQ           -1                            "checkpoint every N steps (-1: at the end only)"
knob TEST_FREQ           -1                            "validate every N steps (-1: at the end only)"
knob GRADIENT_CHECKPOINTING true                       "recompute activations to save memory: true | false"
knob LOGGER              "[console]"                   "verl trainer.logger, e.g. [console,tensorboard,wandb]"
knob PROJECT_NAME        judge-sft                     "tracking project name"
knob EXPERIMENT_NAME     "$(basename "$SAVE_DIR")"     "tracking experiment name"
knob EXPORT_DIR          "$SAVE_DIR/hf"                "where the final model is exported (none: no export)"
knobs_done

validate_sft_trainer_knobs
require_int SP_SIZE 1
is_cpu && (( SP_SIZE > 1 )) && die "SP_SIZE=$SP_SIZE: sequence parallelism needs flash-attn on GPUs; use SP_SIZE=1 on CPU"
world_size=$((NNODES * N_GPUS_PER_NODE))
require_divisible "$world_size" "$SP_SIZE" "processes (NNODES * N_GPUS_PER_NODE) vs SP_SIZE"
data_parallel=$((world_size / SP_SIZE))
require_divisible "$TRAIN_BATCH_SIZE" "$((data_parallel * MICRO_BATCH_SIZE))" \
    "TRAIN_BATCH_SIZE vs data-parallel ranks ($data_parallel) * MICRO_BATCH_SIZE"

remove_padding=false
(( SP_SIZE > 1 )) && remove_padding=true

read -r -a torchrun <<< "$(torchrun_command)"
mapfile -t shared_overrides < <(sft_trainer_overrides)
launch "${torchrun[@]}" -m verl.trainer.fsdp_sft_trainer "${shared_overrides[@]}" \
    data.multiturn.enable=true \
    data.multiturn.messages_key=messages \
    ulysses_sequence_parallel_size="$SP_SIZE" \
    use_remove_padding="$remove_padding" \
    "${HYDRA_OVERRIDES[@]}"

if [[ "$EXPORT_DIR" != none && "$NODE_RANK" == 0 ]]; then
    launch_then python -m training.export causal-lm "$SAVE_DIR" "$EXPORT_DIR" --dtype "$(training_dtype)" \
        --recipe sft --base-model "$MODEL_PATH" --train-file "$TRAIN_FILE"
fi
