#!/usr/bin/env bash
# The one-command demo (`make demo`), offline, on a CPU:
#   offline data -> SmolLM2-135M-Instruct -> a Bradley-Terry judge trained with verl (a few minutes)
#   -> the judge server -> rewards through JudgeRewardSystem -> RewardBench2-style evaluation on the
#   held-out offline set.
#
#   bash cookbooks/demo/run_demo.sh [key=value ...]
#
# Knobs: DEMO_DIR (./runs/demo), BASE_MODEL (smollm2 | tiny: a wiring check in seconds, not a judge),
# BT_CONFIG (the BT recipe's laptop config). Arguments are settings of the BT training, passed to its launcher
# (e.g. trainer.total_training_steps=2); so are the BT knobs set in the environment.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

DEMO_DIR="${DEMO_DIR:-./runs/demo}"
BASE_MODEL="${BASE_MODEL:-smollm2}"
BT_CONFIG="${BT_CONFIG:-cookbooks/training_judge_model/bradley-terry/configs/cpu_smollm2.yaml}"
DATA_DIR="$DEMO_DIR/data"
MODEL_DIR="$DEMO_DIR/models/$BASE_MODEL"
JUDGE_DIR="$DEMO_DIR/bt/hf"
started=$SECONDS

step() {
    echo
    echo "=== [$(( (SECONDS - started) / 60 ))m$(( (SECONDS - started) % 60 ))s] $*"
}

# What to run next, in a new shell: the commands' modules are installed in the environment that ran this demo
# (`make setup`'s .venv), which such a shell has to enter first. tests/test_environment.py runs these lines.
next_commands() {
    local venv
    venv="$(python -c 'import sys; print(sys.prefix)')"
    echo "next, in a new shell at the repository root: enter the environment that ran this demo,"
    echo "    source ${venv#"$PWD"/}/bin/activate"
    echo "then serve the judge, or evaluate it in process:"
    echo "    python -m serving --model $JUDGE_DIR --port 8888"
    echo "    python -m evaluation --model $JUDGE_DIR --data $DATA_DIR/eval/test.parquet --out $DEMO_DIR/eval-local"
}

step "1/6 offline data -> $DATA_DIR"
python -m data_prep offline --out "$DATA_DIR"

step "2/6 base model -> $MODEL_DIR"
if [[ -f "$MODEL_DIR/config.json" ]]; then
    echo "already there"
else
    python -m data_prep base-model "$BASE_MODEL" --out "$MODEL_DIR"
fi

step "3/6 train a Bradley-Terry judge with verl ($BT_CONFIG) -> $DEMO_DIR/bt"
rm -rf "$DEMO_DIR/bt"
bash cookbooks/training_judge_model/bradley-terry/run_bt_rm.sh --config "$BT_CONFIG" \
    model.partial_pretrain="$MODEL_DIR" data.train_files="$DATA_DIR/bradley_terry/train.parquet" \
    data.val_files="$DATA_DIR/bradley_terry/val.parquet" trainer.default_local_dir="$DEMO_DIR/bt" "$@"

step "4/6 serve the judge: python -m serving --model $JUDGE_DIR"
port="$(python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
url="http://127.0.0.1:$port"
python -m serving --model "$JUDGE_DIR" --model-id "bt-$BASE_MODEL-demo" --port "$port" > "$DEMO_DIR/server.log" 2>&1 &
server_pid=$!
trap 'kill "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null || true' EXIT
for _ in $(seq 600); do
    curl -sf "$url/health" > /dev/null && break
    kill -0 "$server_pid" 2>/dev/null || { cat "$DEMO_DIR/server.log"; exit 1; }
    sleep 0.2
done
curl -sf "$url/health"
echo

step "5/6 rewards through JudgeRewardSystem (JUDGE_MODEL_URL=$url)"
JUDGE_MODEL_URL="$url" python cookbooks/demo/score_samples.py --data "$DATA_DIR/eval/test.parquet"

step "6/6 RewardBench2-style evaluation on the held-out offline set"
python -m evaluation --judge-url "$url" --data "$DATA_DIR/eval/test.parquet" --out "$DEMO_DIR/eval"

step "done in $(( (SECONDS - started) / 60 )) min"
echo "checkpoints:   $DEMO_DIR/bt (training log: $DEMO_DIR/bt/launch/train.log)"
echo "judge model:   $JUDGE_DIR"
echo "evaluation:    $DEMO_DIR/eval/report.md, $DEMO_DIR/eval/chart.png"
next_commands
