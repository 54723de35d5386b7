# The GRPO recipe, shared by pointwise/run_pointwise.sh and pairwise/run_pairwise.sh (judges) and
# cookbooks/rl_with_judge_reward/run_policy_grpo.sh (a policy whose reward is a judge server). A launcher
# sets GRPO_MODE (pointwise | pairwise | policy) and REWARD_FUNCTION and sources this file; it may also set
#   GRPO_REWARD_FILE     the file of REWARD_FUNCTION, relative to the repository (judge_rewards/grpo_rewards.py)
#   GRPO_REWARD_MANAGER  verl's reward manager that calls it (naive: one call per answer)
#   GRPO_DATA_DIR        the folder of the default TRAIN_FILE / VAL_FILE (./data/grpo/$GRPO_MODE)
#   GRPO_PROJECT_NAME    the default PROJECT_NAME (judge-grpo)
#   GRPO_EXPORT_FLAGS    an array of further export arguments (--prompt-format $GRPO_MODE: judge.json records
#                        the template the judge learned; --not-a-judge for a policy)
# and define hook functions: recipe_knobs (declares its own knobs), recipe_validate (checks them before
# anything starts, after the Ray mode is resolved), recipe_overrides (prints its trainer overrides, one a
# line; it runs in a subshell, so it must not fail). It runs verl's main_ppo with GRPO advantages, a KL
# loss to the reference model and no critic, on Ray, then exports the last actor checkpoint (EXPORT_DIR):
# a generative judge unless GRPO_EXPORT_FLAGS say otherwise.
#
# Where it runs (RAY_MODE):
#   auto (default)  a Ray job submitted to RAY_ADDRESS when a cluster answers there; when nothing answers
#                   and RAY_ADDRESS was not set (the default address), a private local Ray instance for
#                   this run instead, with a note saying so; when RAY_ADDRESS was set and nothing
#                   answers, an error
#   submit          always `ray job submit` to RAY_ADDRESS
#   local           always a private local Ray instance (ray.init(address="local")), single node

source "$(dirname "${BASH_SOURCE[0]}")/../../common/launcher.sh"

launcher_init "$@"
ray_address_was_set="${RAY_ADDRESS:+yes}"  # by the environment or --config, before the knob's default
GRPO_REWARD_FILE="${GRPO_REWARD_FILE:-judge_rewards/grpo_rewards.py}"
GRPO_REWARD_MANAGER="${GRPO_REWARD_MANAGER:-naive}"
GRPO_DATA_DIR="${GRPO_DATA_DIR:-./data/grpo/$GRPO_MODE}"
GRPO_PROJECT_NAME="${GRPO_PROJECT_NAME:-judge-grpo}"
[[ -v GRPO_EXPORT_FLAGS ]] || GRPO_EXPORT_FLAGS=(--prompt-format "$GRPO_MODE")

recipe_hook() {  # NAME: the launcher's hook function of that name, if it defines one
    if declare -F "$1" >/dev/null; then "$1"; fi
}

if is_cpu; then
    default_gpus=1 default_engine=hf default_tp=1
else
    default_gpus=8 default_engine=vllm default_tp=2
fi
knob MODEL_PATH          Qwen/Qwen3-8B                          "base model: HF directory or hub id"
knob TRAIN_FILE          "$GRPO_DATA_DIR/train.parquet"          "verl RL parquet (python -m data_prep ... --out ./data)"
knob VAL_FILE            "$GRPO_DATA_DIR/val.parquet"            "validation RL parquet"
knob SAVE_DIR            "./checkpoints/grpo/$GRPO_MODE"         "checkpoints, config snapshot and log"
knob RAY_ADDRESS         http://127.0.0.1:8265                  "Ray dashboard address jobs are submitted to"
knob RAY_MODE            auto                                   "auto: submit if a cluster answers at RAY_ADDRESS, else a local Ray (error if RAY_ADDRESS was set) | submit | local"
knob NNODES              1                                      "nodes of the Ray cluster (local mode: 1)"
knob N_GPUS_PER_NODE     "$default_gpus"                        "GPUs per node (CPU mode: worker processes)"
knob TRAIN_BATCH_SIZE    96                                     "prompts per step (each gets ROLLOUT_N answers)"
knob PPO_MINI_BATCH_SIZE 24                                     "prompts per optimizer update (divides TRAIN_BATCH_SIZE)"
knob MICRO_BATCH_SIZE    1                                      "answers per GPU per forward/backward of the update"
knob LOG_PROB_MICRO_BATCH_SIZE 2                                "answers per GPU per log-prob forward (old/ref policy)"
knob ROLLOUT_N           4                                      "answers sampled per prompt (the GRPO group)"
knob KL_LOSS_COEF        0.001                                  "weight of the low-variance KL loss to the reference"
knob LR                  1e-6                                   "actor learning rate"
knob MAX_PROMPT_LENGTH   4096                                   "longer prompts are filtered out"
knob MAX_RESPONSE_LENGTH 2048                                   "most tokens an answer may take"
knob TOTAL_EPOCHS        1                                      "epochs over TRAIN_FILE"
knob TOTAL_TRAINING_STEPS ""                                    "stop after this many steps (empty: all epochs)"
knob SAVE_FREQ           5                                      "checkpoint every N steps and at the end (-1: at the end only)"
knob TEST_FREQ           5                                      "validate every N steps and at the end (-1: at the end only)"
knob VAL_BEFORE_TRAIN    false                                  "validate once before training: true | false"
knob ROLLOUT_ENGINE      "$default_engine"                      "vllm | sglang on GPU; hf in CPU mode"
knob ROLLOUT_TP          "$default_tp"                          "tensor parallel size of the rollout engine"
knob GPU_MEMORY_UTILIZATION 0.6                                 "share of GPU memory vLLM/SGLang may take"
knob LORA_RANK           0                                      "LoRA rank; 0 trains all weights (LoRA: GPU only)"
knob LORA_ALPHA          32                                     "LoRA alpha (with LORA_RANK > 0)"
knob LORA_TARGET_MODULES all-linear                             "LoRA target modules (with LORA_RANK > 0)"
knob STRATEGY            fsdp2                                  "fsdp | fsdp2"
knob GRADIENT_CHECKPOINTING true                                "recompute activations to save memory: true | false"
knob OFFLOAD             false                                  "actor params and optimizer in CPU memory between phases"
knob LOGGER              "[console]"                            "verl trainer.logger, e.g. [console,tensorboard,wandb]"
knob PROJECT_NAME        "$GRPO_PROJECT_NAME"                   "tracking project name"
knob EXPERIMENT_NAME     "grpo-$GRPO_MODE"                      "tracking experiment name"
knob EXPORT_DIR          "$SAVE_DIR/hf"                         "where the trained model is exported (none: no export)"
recipe_hook recipe_knobs
knobs_done

# verl's PPO trainer reads a frequency of -1 as "never"; the recipes read it as "at the end only" (as verl's
# SFT trainer does), and the PPO trainer always saves and validates at the last step.
AT_THE_END_ONLY=2147483647

validate_knobs() {
    require_model MODEL_PATH
    require_file TRAIN_FILE
    require_file VAL_FILE
    require_nonempty SAVE_DIR PROJECT_NAME EXPERIMENT_NAME
    require_choice RAY_MODE auto submit local
    [[ "$RAY_ADDRESS" =~ ^https?://[^/[:space:]]+/?$ ]] \
        || die "RAY_ADDRESS must be a Ray dashboard address like http://127.0.0.1:8265, got '$RAY_ADDRESS'"
    local name
    for name in NNODES N_GPUS_PER_NODE TRAIN_BATCH_SIZE PPO_MINI_BATCH_SIZE MICRO_BATCH_SIZE \
                LOG_PROB_MICRO_BATCH_SIZE TOTAL_EPOCHS ROLLOUT_TP LORA_ALPHA; do
        require_int "$name" 1
    done
    require_int ROLLOUT_N 2  # a group of one answer has no relative advantage
    require_int MAX_PROMPT_LENGTH 16
    require_int MAX_RESPONSE_LENGTH 8
    require_int LORA_RANK 0
    [[ -z "$TOTAL_TRAINING_STEPS" ]] || require_int TOTAL_TRAINING_STEPS 1
    require_freq SAVE_FREQ
    require_freq TEST_FREQ
    require_number KL_LOSS_COEF
    require_number LR
    require_number GPU_MEMORY_UTILIZATION 0.05 1
    require_choice STRATEGY fsdp fsdp2
    for name in VAL_BEFORE_TRAIN GRADIENT_CHECKPOINTING OFFLOAD; do
        require_choice "$name" true false
    done
    [[ "$LOGGER" != *file* ]] \
        || die "LOGGER=$LOGGER: verl 0.6.1's file logger crashes on the PPO trainer's own tensor metrics (global_seqlen/*)"
    require_list LOGGER "${VERL_LOGGERS[@]}"
    validate_device_knobs
    if (( LORA_RANK > 0 )) && [[ "$EXPORT_DIR" != none ]]; then
        die "LORA_RANK=$LORA_RANK: the export merges full-weight checkpoints only; set EXPORT_DIR=none (verl" \
            "saves the adapter in PEFT format under \$SAVE_DIR/global_step_N/actor/lora_adapter/)"
    fi
    validate_batch_shapes
}

validate_device_knobs() {
    if is_cpu; then
        require_choice ROLLOUT_ENGINE hf
        (( LORA_RANK == 0 )) || die "LORA_RANK=$LORA_RANK: the CPU-mode HF rollout takes full weights only; use LORA_RANK=0"
        (( ROLLOUT_TP == 1 )) || die "ROLLOUT_TP=$ROLLOUT_TP: the CPU-mode HF rollout is not tensor parallel"
    else
        require_choice ROLLOUT_ENGINE vllm sglang
        require_divisible "$N_GPUS_PER_NODE" "$ROLLOUT_TP" "N_GPUS_PER_NODE vs ROLLOUT_TP"
    fi
}

validate_batch_shapes() {
    local world_size=$((NNODES * N_GPUS_PER_NODE))
    local answers_per_update=$((PPO_MINI_BATCH_SIZE * ROLLOUT_N))
    require_divisible "$TRAIN_BATCH_SIZE" "$PPO_MINI_BATCH_SIZE" "TRAIN_BATCH_SIZE vs PPO_MINI_BATCH_SIZE"
    require_divisible "$answers_per_update" "$world_size" \
        "answers per update (PPO_MINI_BATCH_SIZE * ROLLOUT_N) vs GPUs (NNODES * N_GPUS_PER_NODE)"
    require_divisible "$((answers_per_update / world_size))" "$MICRO_BATCH_SIZE" \
        "answers per GPU per update vs MICRO_BATCH_SIZE"
}

# --- where it runs -----------------------------------------------------------------------------------

resolve_ray_mode() {
    if [[ "$RAY_MODE" == auto ]]; then
        choose_ray_mode
    fi
    if [[ "$RAY_MODE" == submit ]]; then
        command -v ray >/dev/null || die "the ray CLI is not on PATH (activate the environment verl is installed in)"
    elif (( NNODES > 1 )); then
        die "NNODES=$NNODES needs a Ray cluster: start one and set RAY_ADDRESS (RAY_MODE=submit)"
    fi
}

choose_ray_mode() {
    if ray_cluster_answers; then
        RAY_MODE=submit
        note "a Ray cluster answers at $RAY_ADDRESS: submitting the training as a Ray job"
    elif [[ -z "$ray_address_was_set" ]]; then
        RAY_MODE=local
        note "no Ray cluster answers at $RAY_ADDRESS: starting a local Ray instance for this run" \
             "(start a cluster first, or set RAY_MODE=submit, to submit instead)"
    else
        die "RAY_ADDRESS=$RAY_ADDRESS: no Ray cluster answers there (ray status; or unset RAY_ADDRESS to run locally)"
    fi
}

# Any HTTP answer counts, 401 included: a cluster with token authentication answers that to a bare probe.
ray_cluster_answers() {
    python - "$RAY_ADDRESS" 2>/dev/null <<'PROBE'
import sys, urllib.error, urllib.request
try:
    urllib.request.urlopen(sys.argv[1].rstrip("/") + "/api/version", timeout=3)
except urllib.error.HTTPError:
    pass
PROBE
}

# `ray start` turns token authentication on when a token exists (~/.ray/auth_token, made by any earlier
# ray.init), but Ray's job CLI sends the token only when told to (seen with Ray 2.60).
ray_auth_env() {
    [[ -z "${RAY_AUTH_MODE:-}" ]] || return 0
    if [[ -n "${RAY_AUTH_TOKEN:-}" || -f "${RAY_AUTH_TOKEN_PATH:-$HOME/.ray/auth_token}" ]]; then
        echo RAY_AUTH_MODE=token
    fi
}

json_string() {
    local value="${1//\\/\\\\}"
    printf '"%s"' "${value//\"/\\\"}"
}

# A submitted job's processes start on the cluster, not from this shell: they get the environment here.
job_runtime_env() {
    local pythonpath="$REPO_ROOT"
    is_cpu && pythonpath="$CPU_SITE_DIR:$REPO_ROOT"
    local vars
    vars="$(json_string PYTHONPATH): $(json_string "$pythonpath")"
    is_cpu && vars+=", $(json_string JUDGE_CPU_DTYPE): $(json_string "$JUDGE_CPU_DTYPE")"
    echo "{\"env_vars\": {$vars}}"
}

ray_command_prefix() {
    if [[ "$RAY_MODE" == submit ]]; then
        printf '%s\n' env $(ray_auth_env) ray job submit --address "$RAY_ADDRESS" \
            --submission-id "judge-grpo-$GRPO_MODE-$(date -u +%Y%m%d-%H%M%S)" \
            --runtime-env-json "$(job_runtime_env)" --
    else
        # Loopback only: nothing outside this machine needs to reach a private instance.
        printf '%s\n' env -u RAY_ADDRESS RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 \
            PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}"
    fi
}

# --- the trainer command -----------------------------------------------------------------------------

frequency() {  # a SAVE_FREQ / TEST_FREQ value as verl's PPO trainer reads it
    if [[ "$1" == -1 ]]; then echo "$AT_THE_END_ONLY"; else echo "$1"; fi
}

torch_dtype() {  # fp32 | bf16 as torch names them
    if [[ "$(training_dtype)" == bf16 ]]; then echo bfloat16; else echo float32; fi
}

# What differs between CPU mode (HF rollout on gloo) and GPUs (vLLM or SGLang, padding removed).
rollout_overrides() {
    if is_cpu; then
        echo "actor_rollout_ref.rollout.name=hf"
        echo "actor_rollout_ref.rollout.load_format=hf"
        echo "actor_rollout_ref.model.use_remove_padding=false"
        echo "+actor_rollout_ref.model.override_config.attn_implementation=sdpa"
        echo "actor_rollout_ref.actor.fsdp_config.dtype=$(torch_dtype)"
        echo "actor_rollout_ref.ref.fsdp_config.dtype=$(torch_dtype)"
        echo "actor_rollout_ref.ref.fsdp_config.model_dtype=$(training_dtype)"
        echo "data.dataloader_num_workers=0"
    else
        echo "actor_rollout_ref.rollout.name=$ROLLOUT_ENGINE"
        echo "actor_rollout_ref.rollout.gpu_memory_utilization=$GPU_MEMORY_UTILIZATION"
        echo "actor_rollout_ref.model.use_remove_padding=true"
        echo "actor_rollout_ref.ref.fsdp_config.param_offload=true"
    fi
    # sync: the rollout engine lives inside the actor workers (hybrid engine), the mode of verl 0.6.1's
    # GRPO examples with vLLM 0.11; the CPU-mode HF rollout exists only in this mode.
    echo "actor_rollout_ref.rollout.mode=sync"
    echo "actor_rollout_ref.rollout.tensor_model_parallel_size=$ROLLOUT_TP"
}

lora_overrides() {
    (( LORA_RANK > 0 )) || return 0
    echo "actor_rollout_ref.model.lora_rank=$LORA_RANK"
    echo "actor_rollout_ref.model.lora_alpha=$LORA_ALPHA"
    echo "actor_rollout_ref.model.target_modules=$LORA_TARGET_MODULES"
}

# ray.init(address="local") starts a new instance even when a cluster runs on this machine. CPU mode
# declares the logical GPUs and the `cpu` resource that verl's placement groups ask for.
local_ray_overrides() {
    [[ "$RAY_MODE" == local ]] || return 0
    echo "+ray_kwargs.ray_init.address=local"
    # No dashboard: it would listen on RAY_ADDRESS's default port, where another launcher in auto mode would
    # take this private instance for a cluster and submit its job into it.
    echo "+ray_kwargs.ray_init.include_dashboard=false"
    is_cpu || return 0
    echo "+ray_kwargs.ray_init.num_gpus=$N_GPUS_PER_NODE"
    echo "+ray_kwargs.ray_init.resources={cpu:$N_GPUS_PER_NODE}"
    echo "ray_kwargs.ray_init.num_cpus=$((N_GPUS_PER_NODE + 3))"
}

main_ppo_command() {
    printf '%s\n' python -m verl.trainer.main_ppo \
        algorithm.adv_estimator=grpo \
        algorithm.use_kl_in_reward=false \
        data.train_files="$TRAIN_FILE" \
        data.val_files="$VAL_FILE" \
        data.train_batch_size="$TRAIN_BATCH_SIZE" \
        data.max_prompt_length="$MAX_PROMPT_LENGTH" \
        data.max_response_length="$MAX_RESPONSE_LENGTH" \
        data.filter_overlong_prompts=true \
        data.truncation=error \
        actor_rollout_ref.model.path="$MODEL_PATH" \
        actor_rollout_ref.model.enable_gradient_checkpointing="$GRADIENT_CHECKPOINTING" \
        actor_rollout_ref.actor.strategy="$STRATEGY" \
        actor_rollout_ref.ref.strategy="$STRATEGY" \
        actor_rollout_ref.actor.optim.lr="$LR" \
        actor_rollout_ref.actor.ppo_mini_batch_size="$PPO_MINI_BATCH_SIZE" \
        actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu="$MICRO_BATCH_SIZE" \
        actor_rollout_ref.actor.use_kl_loss=true \
        actor_rollout_ref.actor.kl_loss_coef="$KL_LOSS_COEF" \
        actor_rollout_ref.actor.kl_loss_type=low_var_kl \
        actor_rollout_ref.actor.entropy_coeff=0 \
        actor_rollout_ref.actor.fsdp_config.param_offload="$OFFLOAD" \
        actor_rollout_ref.actor.fsdp_config.optimizer_offload="$OFFLOAD" \
        actor_rollout_ref.rollout.n="$ROLLOUT_N" \
        actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu="$LOG_PROB_MICRO_BATCH_SIZE" \
        actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu="$LOG_PROB_MICRO_BATCH_SIZE" \
        reward_model.enable=false \
        reward_model.reward_manager="$GRPO_REWARD_MANAGER" \
        custom_reward_function.path="$REPO_ROOT/$GRPO_REWARD_FILE" \
        custom_reward_function.name="$REWARD_FUNCTION" \
        trainer.critic_warmup=0 \
        trainer.nnodes="$NNODES" \
        trainer.n_gpus_per_node="$N_GPUS_PER_NODE" \
        trainer.total_epochs="$TOTAL_EPOCHS" \
        ${TOTAL_TRAINING_STEPS:+trainer.total_training_steps="$TOTAL_TRAINING_STEPS"} \
        trainer.save_freq="$(frequency "$SAVE_FREQ")" \
        trainer.test_freq="$(frequency "$TEST_FREQ")" \
        trainer.val_before_train="$VAL_BEFORE_TRAIN" \
        trainer.default_local_dir="$SAVE_DIR" \
        trainer.logger="$LOGGER" \
        trainer.project_name="$PROJECT_NAME" \
        trainer.experiment_name="$EXPERIMENT_NAME" \
        "$(device_overrides)"
    rollout_overrides
    lora_overrides
    local_ray_overrides
    recipe_hook recipe_overrides
    printf '%s\n' hydra.run.dir="$SAVE_DIR/launch/hydra" "${HYDRA_OVERRIDES[@]}"
}

# --- run ---------------------------------------------------------------------------------------------

validate_knobs
resolve_ray_mode
recipe_hook recipe_validate
make_absolute TRAIN_FILE VAL_FILE SAVE_DIR
[[ -d "$MODEL_PATH" ]] && make_absolute MODEL_PATH
[[ "$EXPORT_DIR" == none ]] || make_absolute EXPORT_DIR

mapfile -t command < <(ray_command_prefix; main_ppo_command)
launch "${command[@]}"
if [[ "$EXPORT_DIR" != none ]]; then
    launch_then python -m training.export causal-lm "$SAVE_DIR" "$EXPORT_DIR" \
        --dtype "$(training_dtype)" --recipe "grpo-$GRPO_MODE" --base-model "$MODEL_PATH" --train-file "$TRAIN_FILE" \
        ${GRPO_EXPORT_FLAGS[@]+"${GRPO_EXPORT_FLAGS[@]}"}
fi
