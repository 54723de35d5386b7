# Shared launcher library of the training recipes. Source it from a recipe script; it defines:
#
#   launcher_init "$@"            parses --dry-run / --config FILE / --help (the other arguments are Hydra
#                                 overrides, HYDRA_OVERRIDES, appended to the trainer command), loads the
#                                 config file and resolves DEVICE; call it before declaring knobs
#   knob NAME DEFAULT "help"      a setting read from the environment (${NAME:-DEFAULT}), listed by --help
#                                 and saved in the config snapshot
#   knobs_done                    after the last knob: answers --help
#   require_* NAME ...            input validation; every failure names the knob and the bad value
#   torchrun_knobs GPU_DEFAULT    declares N_GPUS_PER_NODE (GPU_DEFAULT; 1 in CPU mode), NNODES, NODE_RANK,
#                                 MASTER_ADDR, MASTER_PORT
#   require_torchrun_knobs        validates those knobs (call it before "$(torchrun_command)")
#   torchrun_command              the torchrun prefix for NNODES / N_GPUS_PER_NODE / rendezvous knobs
#   training_dtype                bf16 on GPUs; in CPU mode JUDGE_CPU_DTYPE (fp32 unless asked otherwise)
#   launch CMD...                 prints the command; with --dry-run stops there, else saves the config
#                                 snapshot to $SAVE_DIR/launch/ and runs CMD with its output teed to
#                                 $SAVE_DIR/launch/train.log (verl's tensorboard / file loggers write under
#                                 $SAVE_DIR too, unless TENSORBOARD_DIR / VERL_FILE_LOGGER_PATH say otherwise)
#   launch_then CMD...            a further step after `launch` succeeded (an export, say): printed too,
#                                 appended to the snapshot's command.sh, teed to the same log
#   make_absolute NAME...         turns relative path knobs into absolute ones (for processes that do not
#                                 start in this directory, such as Ray jobs)
#   validate_sft_trainer_knobs,   the validation and the Hydra overrides (one a line) of the knobs that the
#   sft_trainer_overrides         SFT and BT recipes both hand to verl's FSDP SFT trainer
#
# A recipe may also source this file through a shared script of its own (grpo/common/grpo.sh): --help and
# the log name the script that was run.
#
# Device: DEVICE=auto (default) picks cuda when an NVIDIA device node exists, else cpu. CPU mode puts
# training/cpu_site on PYTHONPATH so that every process verl starts gets the CPU fixes of
# training/cpu_compat.py (gloo, sdpa, fp32, the HF rollout).

set -euo pipefail

LAUNCHER_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$LAUNCHER_DIR/../../.." && pwd)"
CPU_SITE_DIR="$REPO_ROOT/training/cpu_site"
RECIPE_PATH="${BASH_SOURCE[-1]}"
RECIPE_SCRIPT="$(basename "$RECIPE_PATH")"

KNOB_NAMES=()
declare -A KNOB_HELP=()
declare -A KNOB_DEFAULT=()
HYDRA_OVERRIDES=()
DRY_RUN=0
WANT_HELP=0

die() {
    echo "[$RECIPE_SCRIPT] error: $*" >&2
    exit 2
}

note() {
    echo "[$RECIPE_SCRIPT] $*" >&2
}

knob() {
    local name="$1" default="$2" help="${3:-}"
    KNOB_NAMES+=("$name")
    KNOB_HELP[$name]="$help"
    KNOB_DEFAULT[$name]="$default"
    if [[ -z "${!name:-}" ]]; then
        printf -v "$name" '%s' "$default"
    fi
    export "${name?}"
}

print_help() {
    sed -n '2,/^$/s/^# \{0,1\}//p' "$RECIPE_PATH"
    echo "Options: --dry-run (validate and print the command), --config FILE (KEY=VALUE lines; the"
    echo "environment wins over the file), --help. Other arguments are Hydra overrides for the trainer."
    echo
    echo "Knobs (environment variables), with defaults:"
    local name
    for name in "${KNOB_NAMES[@]}"; do
        printf '  %-24s %-34s %s\n' "$name" "${KNOB_DEFAULT[$name]:-(empty)}" "${KNOB_HELP[$name]}"
    done
}

# KEY=VALUE lines of a config file, each applied only where the environment does not set KEY already.
load_config_file() {
    local file="$1" line key value number=0
    [[ -f "$file" ]] || die "--config $file: no such file"
    while IFS= read -r line || [[ -n "$line" ]]; do
        number=$((number + 1))
        [[ "$line" =~ ^[[:space:]]*(#|$) ]] && continue
        [[ "$line" =~ ^[[:space:]]*([A-Z_][A-Z0-9_]*)=(.*)$ ]] || die "$file line $number: expected KEY=VALUE, got: $line"
        key="${BASH_REMATCH[1]}"
        value="${BASH_REMATCH[2]}"
        value="${value%\"}"; value="${value#\"}"
        if [[ -z "${!key:-}" ]]; then
            printf -v "$key" '%s' "$value"
            export "${key?}"
        fi
    done < "$file"
}

launcher_init() {
    while [[ $# -gt 0 ]]; do
        case "$1" in
            --dry-run) DRY_RUN=1 ;;
            --config) [[ $# -ge 2 ]] || die "--config needs a file"; load_config_file "$2"; shift ;;
            --config=*) load_config_file "${1#--config=}" ;;
            -h|--help) WANT_HELP=1 ;;
            --*) die "unknown option $1 (Hydra overrides look like key=value)" ;;
            *=*) HYDRA_OVERRIDES+=("$1") ;;
            *) die "unexpected argument '$1' (Hydra overrides look like key=value)" ;;
        esac
        shift
    done
    knob DEVICE auto "auto: cuda if an NVIDIA GPU is present, else cpu (CPU mode)"
    resolve_device
}

knobs_done() {
    if (( WANT_HELP )); then
        print_help
        exit 0
    fi
}

has_nvidia_gpu() {
    compgen -G "/dev/nvidia[0-9]*" >/dev/null
}

resolve_device() {
    require_choice DEVICE auto cuda cpu
    if [[ "$DEVICE" == auto ]]; then
        if has_nvidia_gpu; then DEVICE=cuda; else DEVICE=cpu; fi
    fi
    if [[ "$DEVICE" == cpu ]]; then
        has_nvidia_gpu && die "DEVICE=cpu on a machine with a GPU is not supported; use DEVICE=cuda"
        export PYTHONPATH="$CPU_SITE_DIR${PYTHONPATH:+:$PYTHONPATH}"
        export JUDGE_CPU_DTYPE="${JUDGE_CPU_DTYPE:-fp32}"
        note "CPU mode (gloo, sdpa, ${JUDGE_CPU_DTYPE}); fixes from training/cpu_compat.py"
    fi
}

# Hydra overrides every verl trainer needs for the resolved device.
device_overrides() {
    echo "trainer.device=$DEVICE"
}

is_cpu() {
    [[ "$DEVICE" == cpu ]]
}

require_int() {  # NAME [MIN]
    local name="$1" min="${2:-0}" value="${!1}"
    [[ "$value" =~ ^[0-9]+$ ]] || die "$name must be an integer, got '$value'"
    (( value >= min )) || die "$name must be >= $min, got $value"
}

require_number() {  # NAME [MIN [MAX]]: a non-negative decimal or scientific number, within [MIN, MAX]
    local name="$1" min="${2:-}" max="${3:-}" value="${!1}"
    [[ "$value" =~ ^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$ ]] || die "$name must be a non-negative number, got '$value'"
    if [[ -n "$min" ]] && ! awk -v v="$value" -v m="$min" 'BEGIN { exit !(v + 0 >= m + 0) }'; then
        die "$name must be >= $min, got $value"
    fi
    if [[ -n "$max" ]] && ! awk -v v="$value" -v m="$max" 'BEGIN { exit !(v + 0 <= m + 0) }'; then
        die "$name must be <= $max, got $value"
    fi
}

require_freq() {  # NAME: every N steps (N >= 1), or -1 for never / only at the end
    local value="${!1}"
    [[ "$value" == -1 || ( "$value" =~ ^[0-9]+$ && "$value" -ge 1 ) ]] || die "$1 must be -1 or an integer >= 1, got '$value'"
}

require_nonempty() {  # NAME...
    local name
    for name in "$@"; do [[ -n "${!name}" ]] || die "$name must not be empty"; done
}

require_list() {  # NAME CHOICE...: "[a,b]" or "a,b", each item one of the choices
    local name="$1" value="${!1}" item choice found list
    shift
    local items="${value#[}"
    items="${items%]}"
    [[ -n "${items// /}" ]] || die "$name must list at least one of: $*; got '$value'"
    IFS=',' read -r -a list <<< "$items"
    for item in "${list[@]}"; do
        item="${item// /}"
        found=0
        for choice in "$@"; do [[ "$item" == "$choice" ]] && found=1; done
        (( found )) || die "$name: '$item' is not one of: $*"
    done
}

# The backends of verl's trainer.logger (verl.utils.tracking.Tracking.supported_backend).
VERL_LOGGERS=(console tensorboard wandb mlflow swanlab vemlp_wandb clearml trackio file)

require_choice() {  # NAME CHOICE...
    local name="$1" value="${!1}" choice
    shift
    for choice in "$@"; do [[ "$value" == "$choice" ]] && return 0; done
    die "$name must be one of: $*; got '$value'"
}

require_file() {  # NAME: an existing file (a parquet path, typically)
    [[ -f "${!1}" ]] || die "$1: file '${!1}' does not exist"
}

require_model() {  # NAME: a local HF model directory, or a hub id (resolved by the trainer)
    local value="${!1}"
    if [[ "$value" == ./* || "$value" == /* || "$value" == ../* ]]; then
        [[ -f "$value/config.json" ]] || die "$1: '$value' is not a model directory (no config.json)"
    fi
}

require_divisible() {  # A B WHAT: A must be a multiple of B
    (( $1 % $2 == 0 )) || die "$3: $1 is not a multiple of $2"
}

make_absolute() {  # NAME...: path knobs relative to the current directory become absolute
    local name
    for name in "$@"; do
        [[ "${!name}" == /* ]] || printf -v "$name" '%s' "$PWD/${!name#./}"
    done
}

torchrun_knobs() {  # GPU_DEFAULT: processes per node on GPUs; CPU mode defaults to 1 (one process, all cores)
    local default_gpus="$1"
    is_cpu && default_gpus=1
    knob N_GPUS_PER_NODE "$default_gpus" "processes per node (GPUs; in CPU mode, CPU processes)"
    knob NNODES          1              "nodes; > 1 needs MASTER_ADDR and NODE_RANK (and a SAVE_DIR all nodes share)"
    knob NODE_RANK       0              "this node's rank (multi-node)"
    knob MASTER_ADDR     ""             "address of node 0 (multi-node)"
    knob MASTER_PORT     29500          "rendezvous port on node 0 (multi-node)"
}

training_dtype() {
    if is_cpu; then echo "$JUDGE_CPU_DTYPE"; else echo bf16; fi
}

require_torchrun_knobs() {  # call it in the script itself: a failure inside $(torchrun_command) cannot stop it
    require_int NNODES 1
    require_int N_GPUS_PER_NODE 1
    if (( NNODES > 1 )); then
        [[ -n "${MASTER_ADDR:-}" ]] || die "MASTER_ADDR must be set when NNODES > 1"
        require_int NODE_RANK 0
        (( NODE_RANK < NNODES )) || die "NODE_RANK must be < NNODES ($NNODES), got $NODE_RANK"
        require_int MASTER_PORT 1
    fi
}

torchrun_command() {
    require_torchrun_knobs
    if (( NNODES == 1 )); then
        echo torchrun --standalone --nnodes=1 --nproc_per_node="$N_GPUS_PER_NODE"
    else
        echo torchrun --nnodes="$NNODES" --node_rank="$NODE_RANK" --nproc_per_node="$N_GPUS_PER_NODE" \
            --master_addr="$MASTER_ADDR" --master_port="${MASTER_PORT:-29500}"
    fi
}

quote_command() {
    local out="" argument
    for argument in "$@"; do out+="$(printf '%q' "$argument") "; done
    echo "${out% }"
}

save_snapshot() {  # DIR COMMAND...
    local dir="$1" name
    shift
    mkdir -p "$dir"
    {
        echo "# $RECIPE_SCRIPT, $(date -u +%Y-%m-%dT%H:%M:%SZ), device $DEVICE"
        for name in "${KNOB_NAMES[@]}"; do printf '%s=%q\n' "$name" "${!name}"; done
    } > "$dir/knobs.env"
    {
        echo "#!/usr/bin/env bash"
        echo "set -euo pipefail"
        is_cpu && echo "export PYTHONPATH=$(printf '%q' "$PYTHONPATH") JUDGE_CPU_DTYPE=$JUDGE_CPU_DTYPE"
        quote_command "$@"
    } > "$dir/command.sh"
}

launch() {
    local snapshot_dir="$SAVE_DIR/launch"
    echo "$(quote_command "$@")"
    if (( DRY_RUN )); then
        note "dry run: inputs are valid; nothing was started"
        return 0
    fi
    save_snapshot "$snapshot_dir" "$@"
    export TENSORBOARD_DIR="${TENSORBOARD_DIR:-$SAVE_DIR/tensorboard}"
    export VERL_FILE_LOGGER_PATH="${VERL_FILE_LOGGER_PATH:-$snapshot_dir/metrics.jsonl}"
    note "config snapshot: $snapshot_dir/{knobs.env,command.sh}; log: $snapshot_dir/train.log"
    echo "===== $(date -u +%Y-%m-%dT%H:%M:%SZ) $RECIPE_SCRIPT" >> "$snapshot_dir/train.log"
    "$@" 2>&1 | tee -a "$snapshot_dir/train.log"
}

launch_then() {
    echo "$(quote_command "$@")"
    (( DRY_RUN )) && return 0
    quote_command "$@" >> "$SAVE_DIR/launch/command.sh"
    "$@" 2>&1 | tee -a "$SAVE_DIR/launch/train.log"
}

# --- verl's FSDP SFT trainer: what the SFT and Bradley-Terry recipes share -----------------------------

validate_sft_trainer_knobs() {  # the knobs both recipes hand to verl's FSDP SFT trainer
    require_model MODEL_PATH
    require_file TRAIN_FILE
    require_file VAL_FILE
    require_nonempty SAVE_DIR PROJECT_NAME EXPERIMENT_NAME
    require_int TRAIN_BATCH_SIZE 1
    require_int MICRO_BATCH_SIZE 1
    require_int MAX_LENGTH 8
    require_choice TRUNCATION left right error
    require_number LR
    require_int TOTAL_EPOCHS 1
    [[ -z "$TOTAL_TRAINING_STEPS" ]] || require_int TOTAL_TRAINING_STEPS 1
    require_choice STRATEGY fsdp fsdp2
    require_choice GRADIENT_CHECKPOINTING true false
    require_freq SAVE_FREQ
    require_freq TEST_FREQ
    require_list LOGGER "${VERL_LOGGERS[@]}"
    require_torchrun_knobs
}

sft_trainer_overrides() {  # one a line: the Hydra overrides both recipes give verl's FSDP SFT trainer
    printf '%s\n' \
        data.train_files="$TRAIN_FILE" \
        data.val_files="$VAL_FILE" \
        data.train_batch_size="$TRAIN_BATCH_SIZE" \
        data.micro_batch_size_per_gpu="$MICRO_BATCH_SIZE" \
        data.max_length="$MAX_LENGTH" \
        data.truncation="$TRUNCATION" \
        model.partial_pretrain="$MODEL_PATH" \
        model.strategy="$STRATEGY" \
        model.enable_gradient_checkpointing="$GRADIENT_CHECKPOINTING" \
        optim.lr="$LR" \
        trainer.default_local_dir="$SAVE_DIR" \
        trainer.project_name="$PROJECT_NAME" \
        trainer.experiment_name="$EXPERIMENT_NAME" \
        trainer.total_epochs="$TOTAL_EPOCHS" \
        trainer.save_freq="$SAVE_FREQ" \
        trainer.test_freq="$TEST_FREQ" \
        trainer.logger="$LOGGER" \
        trainer.nnodes="$NNODES" \
        trainer.n_gpus_per_node="$N_GPUS_PER_NODE" \
        "$(device_overrides)" \
        hydra.run.dir="$SAVE_DIR/launch/hydra"
    [[ -z "$TOTAL_TRAINING_STEPS" ]] || echo "trainer.total_training_steps=$TOTAL_TRAINING_STEPS"
}
