"""The recipes on verl's FSDP SFT trainer, under torchrun: SFT (verl's trainer itself), Bradley-Terry
(training.bt_trainer) and multi-aspect (training.attribute_trainer), the two scalar-head subclasses of
training.scalar_head_trainer; then an export of the final checkpoint that reads the values the training used."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, ListConfig

from judge_core.protocol.judge_spec import PROMPT_FORMATS
from training.attributes import check_names, score_weights
from training.launch.checks import VERL_LOGGERS, Checker
from training.launch.device import FLASH_ATTENTION_MISSING, removes_padding, training_dtype
from training.launch.recipe import NO_EXPORT, Command, Given, KeyNames, export_command

# sft_trainer.yaml's trainer.seed, which verl 0.6.1's SFT trainer never reads (its sampler's seed is 0).
VERL_SFT_SEED = 1


def torchrun_argv(config: DictConfig) -> list[str]:
    """torchrun for trainer.nnodes x trainer.n_gpus_per_node processes; several nodes meet at launch.master_addr."""
    processes = f"--nproc_per_node={config.trainer.n_gpus_per_node}"
    if config.trainer.nnodes == 1:
        return ["torchrun", "--standalone", "--nnodes=1", processes]
    launch = config.launch
    return [
        "torchrun",
        f"--nnodes={config.trainer.nnodes}",
        f"--node_rank={launch.node_rank}",
        processes,
        f"--master_addr={launch.master_addr}",
        f"--master_port={launch.master_port}",
    ]


def train_command(config: DictConfig, snapshot_dir: Path, module: str) -> Command:
    """The trainer reads the launch's config snapshot, nothing else."""
    snapshot = snapshot_dir.resolve()
    argv = [*torchrun_argv(config), "-m", module, "--config-path", str(snapshot), "--config-name", "config"]
    return Command("train", [*argv, f"hydra.run.dir={snapshot / 'hydra'}"])


def export_wanted(config: DictConfig) -> bool:
    """Node 0 exports, unless launch.export_dir is `none`."""
    return config.launch.export_dir != NO_EXPORT and config.launch.node_rank == 0


def export(config: DictConfig, kind: str, recipe: str) -> Command:
    """The export of an FSDP SFT trainer's run, in the dtype of its device."""
    trainer = config.trainer
    return export_command(
        kind, recipe, trainer.default_local_dir, config.launch.export_dir, training_dtype(trainer.device),
        config.model.partial_pretrain, config.data.train_files,
    )  # fmt: skip


def check_sft_trainer(check: Checker) -> None:
    """The settings every recipe on verl's FSDP SFT trainer reads."""
    check.model("model.partial_pretrain")
    check.existing_file("data.train_files")
    check.existing_file("data.val_files")
    check.nonempty("trainer.default_local_dir", "trainer.project_name", "trainer.experiment_name")
    check.integer("data.train_batch_size", 1)
    check.integer("data.micro_batch_size_per_gpu", 1)
    check.integer("data.max_length", 8)
    check.choice("data.truncation", ("left", "right", "error"))
    check.number("optim.lr")
    check.integer("trainer.total_epochs", 1)
    check.optional_integer("trainer.total_training_steps", 1)
    check.choice("model.strategy", ("fsdp", "fsdp2"))
    check.boolean("model.enable_gradient_checkpointing")
    check.frequency("trainer.save_freq")
    check.frequency("trainer.test_freq")
    check.choice_list("trainer.logger", VERL_LOGGERS)
    check_torchrun(check)
    if check.value("launch.export_dir") in (None, ""):
        check.fail("launch.export_dir", f"must be a folder, or {NO_EXPORT} for no export")


def check_torchrun(check: Checker) -> None:
    nodes = check.integer("trainer.nnodes", 1)
    check.integer("trainer.n_gpus_per_node", 1)
    check.integer("launch.node_rank", 0)
    if nodes > 1:
        if not check.value("launch.master_addr"):
            check.fail("launch.master_addr", f"must be set when {check.key_names('trainer.nnodes')} > 1")
        if check.value("launch.node_rank") >= nodes:
            check.fail("launch.node_rank", f"must be < {check.key_names('trainer.nnodes')} = {nodes}")
        check.integer("launch.master_port", 1)


def check_batch_split(check: Checker, data_parallel_ranks: int) -> None:
    micro = check.value("data.micro_batch_size_per_gpu")
    check.multiple_of(
        "data.train_batch_size",
        data_parallel_ranks * micro,
        f"data-parallel ranks ({data_parallel_ranks}) x {check.key_names('data.micro_batch_size_per_gpu')} ({micro})",
    )


def world_size(config: DictConfig) -> int:
    return config.trainer.nnodes * config.trainer.n_gpus_per_node


@dataclass(frozen=True)
class SftRecipe:
    """verl's FSDP SFT trainer on multi-turn `messages`; exported as a generative judge."""

    name: str = "sft"
    config_name: str = "sft"

    def device_overlay(self, device: str) -> dict:
        if device == "cpu":  # one process per machine; no flash-attn, hence no padding removal nor sequence parallelism
            return {"trainer.n_gpus_per_node": 1, "ulysses_sequence_parallel_size": 1, "use_remove_padding": False}
        return {"use_remove_padding": removes_padding(device)}

    def prepare(self, config: DictConfig, key_names: KeyNames, given: Given) -> list[str]:
        return []

    def validate(self, config: DictConfig, key_names: KeyNames) -> None:
        check = Checker(config, key_names)
        check_sft_trainer(check)
        check.choice("launch.prompt_format", PROMPT_FORMATS)
        if check.value("trainer.seed") != VERL_SFT_SEED:
            check.fail(
                "trainer.seed",
                f"verl 0.6.1's SFT trainer does not read it (its data order is fixed), so this run would repeat the "
                f"one with {VERL_SFT_SEED}; for another order, train on a shuffled copy of the file: "
                f"python -m data_prep shuffle TRAIN_FILE COPY --seed N",
            )
        parallel = check.integer("ulysses_sequence_parallel_size", 1)
        remove_padding = check.boolean("use_remove_padding")
        if not removes_padding(config.trainer.device):
            why = "this is CPU mode" if config.trainer.device == "cpu" else FLASH_ATTENTION_MISSING
            if parallel > 1:
                check.fail("ulysses_sequence_parallel_size", f"sequence parallelism needs flash-attn on a GPU: {why}")
            if remove_padding:
                check.fail("use_remove_padding", f"padding removal needs flash-attn on a GPU: {why}; use false")
        if parallel > 1 and not remove_padding:
            check.fail("ulysses_sequence_parallel_size", "sequence parallelism needs use_remove_padding=true")
        if world_size(config) % parallel:
            processes = f"{key_names('trainer.nnodes')} x {key_names('trainer.n_gpus_per_node')}"
            check.fail(
                "ulysses_sequence_parallel_size", f"must divide the processes, {processes} = {world_size(config)}"
            )
        check_batch_split(check, world_size(config) // parallel)

    def commands(self, config: DictConfig, snapshot_dir: Path) -> list[Command]:
        commands = [train_command(config, snapshot_dir, "verl.trainer.fsdp_sft_trainer")]
        if export_wanted(config):
            command = export(config, "causal-lm", self.name)
            commands.append(Command(command.name, [*command.argv, "--prompt-format", config.launch.prompt_format]))
        return commands


def check_scalar_head_trainer(check: Checker) -> None:
    """The settings the scalar-head trainers (Bradley-Terry, multi-aspect) read beyond verl's SFT ones."""
    check_sft_trainer(check)
    check.number("optim.weight_decay")
    check.number("optim.lr_warmup_steps_ratio", 0, 1)
    check.number("optim.clip_grad")
    check.choice("optim.lr_scheduler", ("cosine", "wsd"))


def scalar_export(config: DictConfig, kind: str, recipe: str, options: list[str]) -> Command:
    """The export of a scalar-head run: it reads the validation file as the training tokenized it."""
    command = export(config, kind, recipe)
    data = config.data
    tokenization = ["--max-length", str(data.max_length), "--truncation", data.truncation]
    return Command(command.name, [*command.argv, "--val-file", str(data.val_files), *tokenization, *options])


class ScalarHeadRecipe:
    """What the recipes on training.scalar_head_trainer's trainers share."""

    def device_overlay(self, device: str) -> dict:
        return {"trainer.n_gpus_per_node": 1} if device == "cpu" else {}  # CPU: one process uses every core

    def prepare(self, config: DictConfig, key_names: KeyNames, given: Given) -> list[str]:
        return []


@dataclass(frozen=True)
class BradleyTerryRecipe(ScalarHeadRecipe):
    """training.bt_trainer on preference pairs; exported as a scalar judge calibrated on the validation pairs."""

    name: str = "bradley-terry"
    config_name: str = "bradley_terry"

    def validate(self, config: DictConfig, key_names: KeyNames) -> None:
        check = Checker(config, key_names)
        check_scalar_head_trainer(check)
        check.choice("bt.margin_mode", ("none", "scaled", "offset"))
        check.boolean("bt.packing")
        check.optional_integer("bt.max_tokens_per_forward", 2)
        check_batch_split(check, world_size(config))

    def commands(self, config: DictConfig, snapshot_dir: Path) -> list[Command]:
        commands = [train_command(config, snapshot_dir, "training.bt_trainer")]
        if export_wanted(config):
            commands.append(scalar_export(config, "scalar", self.name, []))
        return commands


def weights_option(weights: DictConfig | None) -> str | None:
    """attributes.weights as the export's --attribute-weights: name=weight,..."""
    return None if weights is None else ",".join(f"{name}={weight}" for name, weight in weights.items())


@dataclass(frozen=True)
class AttributeRecipe(ScalarHeadRecipe):
    """training.attribute_trainer on rated conversations; exported as a scalar judge with one output per
    attribute, its weights and its validation MSE / Pearson r per attribute."""

    name: str = "multi-aspect"
    config_name: str = "attributes"

    def validate(self, config: DictConfig, key_names: KeyNames) -> None:
        check = Checker(config, key_names)
        check_scalar_head_trainer(check)
        names = check.value("attributes.names")
        try:
            names = check_names(list(names) if isinstance(names, ListConfig) else names)
        except ValueError as err:
            check.fail("attributes.names", str(err))
        weights = check.value("attributes.weights")
        if weights is not None and not isinstance(weights, DictConfig):
            check.fail("attributes.weights", "must be a mapping {name: weight, ...} or null")
        try:
            score_weights(names, weights_option(weights))
        except ValueError as err:
            hint = "" if weights else " (the default weights are HelpSteer2's; give attributes.weights)"
            check.fail("attributes.weights", f"{err}{hint}")
        check_batch_split(check, world_size(config))

    def commands(self, config: DictConfig, snapshot_dir: Path) -> list[Command]:
        commands = [train_command(config, snapshot_dir, "training.attribute_trainer")]
        if export_wanted(config):
            weights = weights_option(config.attributes.weights)
            options = [] if weights is None else ["--attribute-weights", weights]
            commands.append(scalar_export(config, "attributes", self.name, options))
        return commands
