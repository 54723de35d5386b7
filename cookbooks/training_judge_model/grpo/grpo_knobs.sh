# shellcheck shell=bash
# The knobs every GRPO launcher shares, sourced by grpo/pointwise/run_pointwise.sh, grpo/pairwise/run_pairwise.sh
# and rl_with_judge_reward/run_policy_grpo.sh after they set their own TRAIN_FILE, VAL_FILE and SAVE_DIR; not run
# by itself. GRPO_ARGUMENTS is the config key each of these knobs sets: a launcher's command passes it as
# "${GRPO_ARGUMENTS[@]}". Defaults are the GPU recipe's (Qwen3-8B, 8 GPUs, vLLM); --help lists every knob.

MODEL_PATH=${MODEL_PATH:-Qwen/Qwen3-8B}  # base model: HF directory or hub id
RAY_ADDRESS=${RAY_ADDRESS:-http://127.0.0.1:8265}  # Ray dashboard a job is submitted to
RAY_MODE=${RAY_MODE:-auto}  # auto: submit if a cluster answers at RAY_ADDRESS, else a local Ray | submit | local
NNODES=${NNODES:-1}  # nodes of the Ray cluster (local Ray: 1)
N_GPUS_PER_NODE=${N_GPUS_PER_NODE:-8}  # GPUs per node (CPU mode: 1 worker process)
TRAIN_BATCH_SIZE=${TRAIN_BATCH_SIZE:-96}  # prompts per step (each gets ROLLOUT_N answers)
PPO_MINI_BATCH_SIZE=${PPO_MINI_BATCH_SIZE:-24}  # prompts per optimizer update (divides TRAIN_BATCH_SIZE)
MICRO_BATCH_SIZE=${MICRO_BATCH_SIZE:-1}  # answers per GPU per forward/backward of the update
ROLLOUT_N=${ROLLOUT_N:-4}  # answers sampled per prompt (the GRPO group)
KL_LOSS_COEF=${KL_LOSS_COEF:-0.001}  # weight of the low-variance KL loss to the reference model
LR=${LR:-1e-6}  # actor learning rate
MAX_PROMPT_LENGTH=${MAX_PROMPT_LENGTH:-4096}  # longer prompts are filtered out
MAX_RESPONSE_LENGTH=${MAX_RESPONSE_LENGTH:-2048}  # most tokens an answer may take
TOTAL_EPOCHS=${TOTAL_EPOCHS:-1}  # epochs over TRAIN_FILE
TOTAL_TRAINING_STEPS=${TOTAL_TRAINING_STEPS:-null}  # stop after this many steps (null: all epochs)
SAVE_FREQ=${SAVE_FREQ:-5}  # checkpoint every N steps and at the end (-1: at the end only)
TEST_FREQ=${TEST_FREQ:-5}  # validate every N steps and at the end (-1: at the end only)

# shellcheck disable=SC2034  # used by the command of the launcher that sources this file
GRPO_ARGUMENTS=(
    actor_rollout_ref.model.path="$MODEL_PATH" data.train_files="$TRAIN_FILE" data.val_files="$VAL_FILE"
    trainer.default_local_dir="$SAVE_DIR" launch.ray_address="$RAY_ADDRESS" launch.ray_mode="$RAY_MODE"
    trainer.nnodes="$NNODES" trainer.n_gpus_per_node="$N_GPUS_PER_NODE" data.train_batch_size="$TRAIN_BATCH_SIZE"
    actor_rollout_ref.actor.ppo_mini_batch_size="$PPO_MINI_BATCH_SIZE"
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu="$MICRO_BATCH_SIZE"
    actor_rollout_ref.rollout.n="$ROLLOUT_N" actor_rollout_ref.actor.kl_loss_coef="$KL_LOSS_COEF"
    actor_rollout_ref.actor.optim.lr="$LR" data.max_prompt_length="$MAX_PROMPT_LENGTH"
    data.max_response_length="$MAX_RESPONSE_LENGTH" trainer.total_epochs="$TOTAL_EPOCHS"
    trainer.total_training_steps="$TOTAL_TRAINING_STEPS" trainer.save_freq="$SAVE_FREQ"
    trainer.test_freq="$TEST_FREQ"
)
