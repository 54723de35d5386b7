# shellcheck shell=bash
# The knobs both scalar-head judges share (training/scalar_head_trainer.py), sourced by
# bradley-terry/run_bt_rm.sh and multi-aspect/run_attribute_rm.sh after their own knobs; not run by itself.
# SCALAR_HEAD_ARGUMENTS is the config key each knob of the two launchers sets: their command passes it as
# "${SCALAR_HEAD_ARGUMENTS[@]}". --help lists every knob.

STRATEGY=${STRATEGY:-fsdp2}  # fsdp | fsdp2
N_GPUS_PER_NODE=${N_GPUS_PER_NODE:-8}  # processes per node (GPUs; CPU mode: 1)
NNODES=${NNODES:-1}  # nodes; > 1 needs MASTER_ADDR and NODE_RANK (and a SAVE_DIR all nodes share)
NODE_RANK=${NODE_RANK:-0}  # this node's rank (several nodes)
MASTER_ADDR=${MASTER_ADDR:-}  # address of node 0 (several nodes)
MASTER_PORT=${MASTER_PORT:-29500}  # rendezvous port on node 0 (several nodes)

# shellcheck disable=SC2034  # used by the command of the launcher that sources this file
SCALAR_HEAD_ARGUMENTS=(
    model.partial_pretrain="$MODEL_PATH" data.train_files="$TRAIN_FILE" data.val_files="$VAL_FILE"
    trainer.default_local_dir="$SAVE_DIR" data.train_batch_size="$TRAIN_BATCH_SIZE"
    data.micro_batch_size_per_gpu="$MICRO_BATCH_SIZE" data.max_length="$MAX_LENGTH" optim.lr="$LR"
    trainer.total_epochs="$TOTAL_EPOCHS" model.strategy="$STRATEGY" trainer.n_gpus_per_node="$N_GPUS_PER_NODE"
    trainer.nnodes="$NNODES" launch.node_rank="$NODE_RANK" launch.master_addr="$MASTER_ADDR"
    launch.master_port="$MASTER_PORT"
)
