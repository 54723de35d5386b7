"""The SFT, Bradley-Terry and multi-aspect launchers: their Python core (final config, checks, precedence,
commands) in process, and through bash their --help, --dry-run, refusals and every config file under cookbooks/
(nothing is trained)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.conftest import REPO_ROOT
from tests.launcher_helpers import (
    ATTRIBUTE_LAUNCHER,
    BT_LAUNCHER,
    RECIPES,
    SFT_LAUNCHER,
    composed,
    launch_in_process,
    placeholder_inputs,
    pretend_flash_attention,
    run_launcher,
)
from tests.support.readme_blocks import readme_command
from training.launch.core import launch_environment
from training.launch.recipe import LaunchError
from training.launch.script import read_launcher_script

LAUNCHERS = {"sft": SFT_LAUNCHER, "bradley-terry": BT_LAUNCHER, "multi-aspect": ATTRIBUTE_LAUNCHER}
# Every config file's command sits on a comment line of the form `# bash <launcher> ... --config <the file>`.
COMMAND_LINE = re.compile(r"^#\s*(bash\s+\S+\.sh\b.*--config\s+\S+.*)$")
CONFIG_FILES = sorted(RECIPES.glob("**/configs/*.yaml"))  # the judge-training recipes, GRPO included


@pytest.fixture
def inputs(tmp_path) -> dict[str, str]:
    return placeholder_inputs(tmp_path)


def write_config(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def refusal(launcher: Path, *args: str, **knobs) -> str:
    """The message a launcher's dry run stops with (each caller checks its text)."""
    try:
        launch_in_process(launcher, "--dry-run", *args, **knobs)
    except LaunchError as error:
        return str(error)
    pytest.fail(f"{launcher.name} did not refuse")


# --- through bash: what a user runs ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "launcher, module",
    [
        (SFT_LAUNCHER, "verl.trainer.fsdp_sft_trainer"),
        (BT_LAUNCHER, "training.bt_trainer"),
        (ATTRIBUTE_LAUNCHER, "training.attribute_trainer"),
    ],
)
def test_dry_run_prints_the_commands_and_the_settings_and_starts_nothing(inputs, launcher, module):
    result = run_launcher(launcher, "--dry-run", "optim.lr=1e-5", MICRO_BATCH_SIZE=3, TRAIN_BATCH_SIZE=6, **inputs)
    assert result.returncode == 0, result.stderr
    train, export, blank, title, *settings = result.stdout.strip().splitlines()
    snapshot = Path(inputs["SAVE_DIR"]) / "launch"
    assert train.startswith("torchrun --standalone --nnodes=1 --nproc_per_node=1") and f"-m {module}" in train
    assert f"--config-path {snapshot} --config-name config" in train
    assert "training.export" in export and f"{inputs['SAVE_DIR']}/hf" in export and "--dtype fp32" in export
    assert re.search(
        r"^\s+MICRO_BATCH_SIZE\s+data\.micro_batch_size_per_gpu\s+3\s+environment$", "\n".join(settings), re.M
    )
    assert "CPU mode" in result.stderr and "dry run: the config is valid; nothing was started" in result.stderr
    assert not Path(inputs["SAVE_DIR"]).exists()


def test_a_bad_setting_exits_2_before_anything_starts(inputs):
    result = run_launcher(BT_LAUNCHER, "data.train_batch_size=7", **inputs, MICRO_BATCH_SIZE=2)
    assert result.returncode == 2
    assert "data.train_batch_size (TRAIN_BATCH_SIZE) = 7: must be a multiple of" in result.stderr
    assert "torchrun" not in result.stdout and not Path(inputs["SAVE_DIR"]).exists()


def test_help_lists_every_knob_with_its_default_and_key():
    result = run_launcher(BT_LAUNCHER, "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Bradley-Terry judge: a scalar reward model")  # the script's header
    assert_help_lists_the_knobs(BT_LAUNCHER, result.stdout)


@pytest.mark.parametrize("launcher", [SFT_LAUNCHER, ATTRIBUTE_LAUNCHER])
def test_in_process_help_lists_every_knob_with_its_default_and_key(launcher, capsys):
    assert launch_in_process(launcher, "--help") == 0
    assert_help_lists_the_knobs(launcher, capsys.readouterr().out)


def assert_help_lists_the_knobs(launcher: Path, text: str) -> None:
    for knob in read_launcher_script(launcher).knobs:
        default = re.escape(knob.default or "(empty)")
        assert re.search(rf"^\s+{knob.name}\s+{default}\s+{re.escape(knob.key)}\s", text, re.M), knob.name
    assert "Precedence" in text and "--config FILE" in text and "--dry-run" in text


def test_help_lists_the_seeds_knobs_with_the_seeds_defaults():
    seed = {
        SFT_LAUNCHER: {"MODEL_PATH": "./models/Qwen3-14B", "TRAIN_BATCH_SIZE": "96", "MICRO_BATCH_SIZE": "12",
                       "MAX_LENGTH": "4096", "SP_SIZE": "8", "TOTAL_EPOCHS": "1"},
        BT_LAUNCHER: {"MODEL_PATH": "./models/Qwen3-8B", "TRAIN_BATCH_SIZE": "256", "MICRO_BATCH_SIZE": "1",
                      "MAX_LENGTH": "4096", "LR": "2e-6", "TOTAL_EPOCHS": "3", "STRATEGY": "fsdp2"},
    }  # fmt: skip
    for launcher, defaults in seed.items():
        knobs = {knob.name: knob.default for knob in read_launcher_script(launcher).knobs}
        assert defaults.items() <= knobs.items(), launcher.name


def config_command(config: Path) -> tuple[list[str], Path]:
    """The command a config file documents, and the folder it runs from (the repository root, or the
    recipe folder when the launcher path is relative to it)."""
    for line in config.read_text().splitlines():
        if not line.startswith("#"):
            break
        match = COMMAND_LINE.match(line)
        if match:
            command = shlex.split(match.group(1))
            for folder in (REPO_ROOT, config.parent.parent):
                if (folder / command[1]).is_file():
                    return command, folder
            pytest.fail(f"{config}: launcher {command[1]} not found from the repository root or {config.parent.parent}")
    pytest.fail(f"{config}: no leading comment line `# bash <launcher> ... --config <file>`")


def test_there_is_a_laptop_config_per_recipe():
    assert set(LAUNCHERS) <= {config.parent.parent.name for config in CONFIG_FILES}


@pytest.mark.parametrize("config", CONFIG_FILES, ids=lambda path: str(path.relative_to(RECIPES)))
def test_every_config_file_dry_runs(config, inputs, monkeypatch, capsys):
    """The command the config documents, from the folder it documents, through the launcher's Python core; the
    config's own settings are checked, model and data paths point at placeholders, since they exist only after
    the data and model preparation the config's header describes."""
    command, folder = config_command(config)
    assert (folder / command[command.index("--config") + 1]).resolve() == config.resolve()
    monkeypatch.chdir(folder)
    assert launch_in_process(folder / command[1], *command[2:], "--dry-run", **inputs) == 0
    assert "dry run: the config is valid" in capsys.readouterr().err


# --- the core, in process -------------------------------------------------------------------------------


def test_bt_defaults_come_from_the_script_and_the_recipe_yaml(inputs):
    config = composed(BT_LAUNCHER, **inputs).config
    expected = {
        "data.train_batch_size": 256,
        "data.micro_batch_size_per_gpu": 1,
        "data.max_length": 4096,
        "data.truncation": "left",
        "optim.lr": 2e-6,
        "trainer.total_epochs": 3,
        "model.strategy": "fsdp2",
        "optim.weight_decay": 0.001,
        "optim.lr_warmup_steps_ratio": 0.03,
        "optim.clip_grad": 2.0,
        "optim.lr_scheduler": "cosine",
        "trainer.logger": ["console"],
        "trainer.experiment_name": "run",
        "trainer.device": "cpu",
        "trainer.n_gpus_per_node": 1,
        "bt.margin_mode": "none",
        "bt.packing": True,
        "bt.max_tokens_per_forward": None,
        "launch.export_dir": f"{inputs['SAVE_DIR']}/hf",
    }
    assert {key: _select(config, key) for key in expected} == expected


def test_attribute_defaults_come_from_the_script_and_the_recipe_yaml(inputs):
    config = composed(ATTRIBUTE_LAUNCHER, **inputs).config
    expected = {
        "data.train_batch_size": 256,
        "data.micro_batch_size_per_gpu": 2,
        "data.max_length": 4096,
        "data.truncation": "left",
        "optim.lr": 2e-6,
        "optim.lr_scheduler": "cosine",
        "trainer.total_epochs": 2,
        "trainer.project_name": "judge-attributes",
        "trainer.device": "cpu",
        "trainer.n_gpus_per_node": 1,
        "model.strategy": "fsdp2",
        "attributes.names": ["helpfulness", "correctness", "coherence", "complexity", "verbosity"],
        "attributes.weights": None,
        "launch.export_dir": f"{inputs['SAVE_DIR']}/hf",
    }
    assert {key: _select(config, key) for key in expected} == expected


def test_sft_defaults_come_from_the_script_and_the_recipe_yaml(inputs):
    config = composed(SFT_LAUNCHER, **inputs).config
    expected = {
        "data.train_batch_size": 96,
        "data.micro_batch_size_per_gpu": 12,
        "data.max_length": 4096,
        "data.truncation": "right",
        "data.multiturn.enable": True,
        "data.multiturn.messages_key": "messages",
        "trainer.total_epochs": 1,
        "ulysses_sequence_parallel_size": 1,  # CPU mode; the script's 8 is the GPU default
        "use_remove_padding": False,
        "trainer.device": "cpu",
    }
    assert {key: _select(config, key) for key in expected} == expected


def test_the_sft_export_records_the_judge_template_the_demonstrations_teach(inputs, capsys):
    assert launch_in_process(SFT_LAUNCHER, "--dry-run", "launch.prompt_format=pairwise", **inputs) == 0
    export_line = capsys.readouterr().out.splitlines()[1]
    assert export_line.startswith("python -m training.export causal-lm")
    assert export_line.endswith("--prompt-format pairwise")
    assert launch_in_process(SFT_LAUNCHER, "--dry-run", **inputs) == 0
    assert capsys.readouterr().out.splitlines()[1].endswith("--prompt-format pointwise")
    assert "launch.prompt_format" in refusal(SFT_LAUNCHER, "launch.prompt_format=listwise", **inputs)


def test_the_gpu_defaults_apply_with_trainer_device_cuda(inputs, monkeypatch):
    pretend_flash_attention(monkeypatch, installed=True)
    config = composed(SFT_LAUNCHER, "trainer.device=cuda", **inputs).config
    assert (config.ulysses_sequence_parallel_size, config.use_remove_padding, config.trainer.n_gpus_per_node) == (
        8,
        True,
        8,
    )


def test_a_gpu_without_flash_attention_keeps_the_padding_and_gets_the_sdpa_site(inputs, monkeypatch, capsys):
    pretend_flash_attention(monkeypatch, installed=False)
    assert "sequence parallelism needs flash-attn on a GPU: flash-attn is not installed here" in refusal(
        SFT_LAUNCHER, "trainer.device=cuda", **inputs
    )
    padding = refusal(SFT_LAUNCHER, "trainer.device=cuda", "use_remove_padding=true", **inputs, SP_SIZE=1)
    assert "use_remove_padding = true: padding removal needs flash-attn on a GPU: flash-attn is not" in padding
    composition = composed(SFT_LAUNCHER, "trainer.device=cuda", **inputs, SP_SIZE=1)
    assert composition.config.use_remove_padding is False
    assert composition.sources["use_remove_padding"] == "cuda default"
    site = launch_environment(composition, Path("snapshot"))["PYTHONPATH"].split(os.pathsep)[0]
    assert site == str(REPO_ROOT / "training" / "sdpa_site")
    assert launch_in_process(SFT_LAUNCHER, "--dry-run", "trainer.device=cuda", **inputs, SP_SIZE=1) == 0
    assert "no flash-attn here: sdpa attention, padding kept" in capsys.readouterr().err


def test_cpu_defaults_give_way_to_the_config_file_the_environment_and_the_command_line(inputs, tmp_path):
    config_file = write_config(tmp_path / "two.yaml", "trainer:\n  n_gpus_per_node: 2\n")
    cases = {
        "--config": composed(SFT_LAUNCHER, "--config", config_file, **inputs),
        "environment": composed(SFT_LAUNCHER, **inputs, N_GPUS_PER_NODE=2),
        "command line": composed(SFT_LAUNCHER, "trainer.n_gpus_per_node=2", **inputs),
        "cpu default": composed(SFT_LAUNCHER, **inputs),
    }
    processes = {name: case.config.trainer.n_gpus_per_node for name, case in cases.items()}
    assert processes == {"--config": 2, "environment": 2, "command line": 2, "cpu default": 1}
    assert cases["cpu default"].sources["trainer.n_gpus_per_node"] == "cpu default"


def _select(config, key):
    value = OmegaConf.select(config, key)
    return OmegaConf.to_container(value) if OmegaConf.is_config(value) else value


BAD_KNOBS = [
    ("TRAIN_BATCH_SIZE", "abc", "data.train_batch_size (TRAIN_BATCH_SIZE) = abc: must be an integer >= 1"),
    ("MICRO_BATCH_SIZE", "0", "data.micro_batch_size_per_gpu (MICRO_BATCH_SIZE) = 0: must be an integer >= 1"),
    ("MAX_LENGTH", "-5", "data.max_length (MAX_LENGTH) = -5: must be an integer >= 8"),
    ("TOTAL_EPOCHS", "0", "trainer.total_epochs (TOTAL_EPOCHS) = 0: must be an integer >= 1"),
    ("N_GPUS_PER_NODE", "two", "trainer.n_gpus_per_node (N_GPUS_PER_NODE) = two: must be an integer >= 1"),
    ("NNODES", "2", "launch.master_addr (MASTER_ADDR) = '': must be set when trainer.nnodes (NNODES) > 1"),
    ("MODEL_PATH", "./no/such/model", "model.partial_pretrain (MODEL_PATH) = ./no/such/model: not a model folder"),
    ("TRAIN_FILE", "/no/such/train.parquet", "data.train_files (TRAIN_FILE) = /no/such/train.parquet: no such file"),
    ("VAL_FILE", "/no/such/val.parquet", "data.val_files (VAL_FILE) = /no/such/val.parquet: no such file"),
    ("TRAIN_BATCH_SIZE", "10", "data.train_batch_size (TRAIN_BATCH_SIZE) = 10: must be a multiple of data-parallel"),
]
SCALAR_HEAD_KNOBS = [
    ("LR", "fast", "optim.lr (LR) = fast: must be a number >= 0"),
    ("STRATEGY", "ddp", "model.strategy (STRATEGY) = ddp: must be one of: fsdp, fsdp2"),
]
SFT_ONLY_KNOBS = [
    ("SP_SIZE", "2", "ulysses_sequence_parallel_size (SP_SIZE) = 2: sequence parallelism needs flash-attn"),
]


@pytest.mark.parametrize(
    "launcher, knob, value, message",
    [(SFT_LAUNCHER, *case) for case in BAD_KNOBS + SFT_ONLY_KNOBS]
    + [(launcher, *case) for launcher in (BT_LAUNCHER, ATTRIBUTE_LAUNCHER) for case in BAD_KNOBS + SCALAR_HEAD_KNOBS],
)
def test_a_bad_knob_is_named_with_its_config_key(inputs, launcher, knob, value, message):
    assert message in refusal(launcher, **{**inputs, "TRAIN_BATCH_SIZE": 8, "MICRO_BATCH_SIZE": 4, knob: value})


BAD_SETTINGS = [
    ("trainer.total_training_steps=x", "trainer.total_training_steps = x: must be an integer >= 1"),
    ("trainer.save_freq=0", "trainer.save_freq = 0: must be -1 or an integer >= 1"),
    ("trainer.test_freq=often", "trainer.test_freq = often: must be -1 or an integer >= 1"),
    ("model.enable_gradient_checkpointing=yes", "model.enable_gradient_checkpointing = yes: must be true or false"),
    ("trainer.logger=[console,tensorbord]", "trainer.logger = [console,tensorbord]: 'tensorbord' is not one of"),
    ("trainer.device=tpu", "trainer.device = tpu: must be one of auto, cuda, cpu"),
    ("data.truncation=middle", "data.truncation = middle: must be one of: left, right, error"),
    ("launch.export_dir=", "launch.export_dir = '': must be a folder, or none for no export"),
    ("trainer.project_name=", "trainer.project_name = '': must not be empty"),
]
SCALAR_HEAD_SETTINGS = [
    ("optim.weight_decay=-1", "optim.weight_decay = -1: must be a number >= 0"),
    ("optim.lr_warmup_steps_ratio=1.5", "optim.lr_warmup_steps_ratio = 1.5: must be a number between 0 and 1"),
    ("optim.clip_grad=max", "optim.clip_grad = max: must be a number >= 0"),
    ("optim.lr_scheduler=linear", "optim.lr_scheduler = linear: must be one of: cosine, wsd"),
]
BT_ONLY_SETTINGS = [
    ("bt.margin_mode=hinge", "bt.margin_mode = hinge: must be one of: none, scaled, offset"),
    ("bt.packing=maybe", "bt.packing = maybe: must be true or false"),
    ("bt.max_tokens_per_forward=1", "bt.max_tokens_per_forward = 1: must be an integer >= 2"),
]
SFT_ONLY_SETTINGS = [
    ("model.strategy=ddp", "model.strategy = ddp: must be one of: fsdp, fsdp2"),
    ("optim.lr=fast", "optim.lr = fast: must be a number >= 0"),
    # verl 0.6.1's SFT trainer never reads trainer.seed: a second seed would silently repeat the first run
    ("trainer.seed=2", "trainer.seed = 2: verl 0.6.1's SFT trainer does not read it"),
]


@pytest.mark.parametrize(
    "launcher, override, message",
    [(SFT_LAUNCHER, *case) for case in BAD_SETTINGS + SFT_ONLY_SETTINGS]
    + [(BT_LAUNCHER, *case) for case in BAD_SETTINGS + SCALAR_HEAD_SETTINGS + BT_ONLY_SETTINGS]
    + [(ATTRIBUTE_LAUNCHER, *case) for case in BAD_SETTINGS + SCALAR_HEAD_SETTINGS],
)
def test_a_bad_setting_is_named(inputs, launcher, override, message):
    assert message in refusal(launcher, override, **inputs, TRAIN_BATCH_SIZE=8, MICRO_BATCH_SIZE=4)


def test_a_node_rank_beyond_the_nodes_is_refused(inputs):
    message = refusal(BT_LAUNCHER, **inputs, NNODES=2, MASTER_ADDR="10.0.0.1", NODE_RANK=2)
    assert "launch.node_rank (NODE_RANK) = 2: must be < trainer.nnodes (NNODES) = 2" in message


@pytest.mark.parametrize("launcher", [SFT_LAUNCHER, BT_LAUNCHER])
def test_train_batch_size_7_is_refused_from_the_knob_the_override_and_the_config_file(inputs, launcher, tmp_path):
    config_file = write_config(tmp_path / "batch.yaml", "data:\n  train_batch_size: 7\n")
    messages = {
        refusal(launcher, **inputs, MICRO_BATCH_SIZE=2, TRAIN_BATCH_SIZE=7),
        refusal(launcher, "data.train_batch_size=7", **inputs, MICRO_BATCH_SIZE=2),
        refusal(launcher, "--config", config_file, **inputs, MICRO_BATCH_SIZE=2),
    }
    assert len(messages) == 1
    assert messages.pop().startswith("data.train_batch_size (TRAIN_BATCH_SIZE) = 7: must be a multiple of")


def test_an_override_of_max_length_reaches_the_trainer_and_the_export(inputs, capsys):
    assert launch_in_process(BT_LAUNCHER, "--dry-run", "data.max_length=512", **inputs) == 0
    train, export = capsys.readouterr().out.splitlines()[:2]
    assert "--max-length 512" in export
    config = composed(BT_LAUNCHER, "data.max_length=512", **inputs)
    assert config.config.data.max_length == 512 and config.sources["data.max_length"] == "command line"


def test_an_environment_knob_overriding_the_config_file_is_named_and_wins(inputs, tmp_path, capsys):
    config_file = write_config(tmp_path / "lr.yaml", "optim:\n  lr: 2e-5\n")
    assert launch_in_process(BT_LAUNCHER, "--dry-run", "--config", config_file, LR="9", **inputs) == 0
    output = capsys.readouterr()
    assert f"LR=9 (environment) overrides optim.lr: 2e-05 from {config_file}" in output.err
    assert re.search(r"^\s+LR\s+optim\.lr\s+9\s+environment$", output.out, re.M)


def test_the_config_file_beats_an_unset_knobs_default_silently(inputs, tmp_path, capsys):
    config_file = write_config(tmp_path / "lr.yaml", "optim:\n  lr: 2e-5\n")
    composition = composed(BT_LAUNCHER, "--config", config_file, **inputs)
    assert composition.config.optim.lr == 2e-5 and composition.sources["optim.lr"] == f"--config {config_file}"
    assert composition.notes == []


def test_an_unknown_key_in_the_config_file_is_refused_naming_it(inputs, tmp_path):
    config_file = write_config(tmp_path / "typo.yaml", "optim:\n  learning_rate: 2e-5\n")
    message = refusal(BT_LAUNCHER, "--config", config_file, **inputs)
    assert message.startswith(f"--config {config_file}: optim.learning_rate is not a setting of this recipe")


def test_an_unknown_key_on_the_command_line_is_refused_naming_it(inputs):
    assert "data.train_batch_sise=8" in refusal(BT_LAUNCHER, "data.train_batch_sise=8", **inputs)


def test_config_file_values_are_read_as_yaml(inputs, tmp_path):
    """Quotes delimit a string and a `#` starts a comment: neither ends up in the value."""
    config_file = write_config(
        tmp_path / "quoted.yaml",
        "trainer:\n  project_name: \"judge bt\"  # quoted, with a comment\n  experiment_name: 'x'\n"
        "data:\n  max_length: 512 # an inline comment\n",
    )
    config = composed(BT_LAUNCHER, "--config", config_file, **inputs).config
    assert (config.trainer.project_name, config.trainer.experiment_name, config.data.max_length) == (
        "judge bt",
        "x",
        512,
    )


def test_a_config_file_that_is_not_a_mapping_is_refused(inputs, tmp_path):
    config_file = write_config(tmp_path / "list.yaml", "- a\n- b\n")
    assert "expected a YAML mapping of config keys" in refusal(BT_LAUNCHER, "--config", config_file, **inputs)


def test_a_missing_config_file_is_refused(inputs, tmp_path):
    assert f"--config {tmp_path}/none.yaml: no such file" in refusal(
        BT_LAUNCHER, "--config", f"{tmp_path}/none.yaml", **inputs
    )


def test_a_multi_node_run_gets_the_rendezvous_and_only_node_0_exports(inputs, capsys):
    knobs = {**inputs, "NNODES": 2, "MASTER_ADDR": "10.0.0.1", "NODE_RANK": 1, "MICRO_BATCH_SIZE": 2}
    assert launch_in_process(BT_LAUNCHER, "--dry-run", "trainer.device=cuda", **knobs) == 0
    commands = capsys.readouterr().out.split("\n\n")[0].splitlines()
    assert commands == [commands[0]]  # node 1: no export
    assert commands[0].startswith(
        "torchrun --nnodes=2 --node_rank=1 --nproc_per_node=8 --master_addr=10.0.0.1 --master_port=29500 -m"
    )


def export_words(argv: list[str]) -> tuple[list[str], dict[str, str | None]]:
    """A `python -m training.export` command line as its kind and folders, and its options (in any order)."""
    words, positional, options, index = argv[argv.index("training.export") + 1 :], [], {}, 0
    while index < len(words):
        if words[index].startswith("--"):
            value = words[index + 1] if index + 1 < len(words) and not words[index + 1].startswith("--") else None
            options[words[index]] = value
            index += 1 if value is None else 2
        else:
            positional.append(words[index])
            index += 1
    return positional, options


def gpu_export(launcher: Path, inputs: dict[str, str], monkeypatch, capsys) -> list[str]:
    """The export command a launcher runs at the end of a GPU run (its dry run prints it)."""
    pretend_flash_attention(monkeypatch, installed=True)
    assert launch_in_process(launcher, "--dry-run", "trainer.device=cuda", **inputs) == 0
    [export] = [line for line in capsys.readouterr().out.splitlines() if " -m training.export " in line]
    return shlex.split(export)


def test_the_bradley_terry_readmes_export_is_what_the_launcher_runs(inputs, monkeypatch, capsys):
    """The recipe README's export template, its variables the run's, is the launcher's export of a GPU run."""
    shown = readme_command(
        "cookbooks/training_judge_model/bradley-terry/README.md",
        "python -m training.export scalar $SAVE_DIR",
        {f"${name}": value for name, value in inputs.items()},
    )
    assert export_words(gpu_export(BT_LAUNCHER, inputs, monkeypatch, capsys)) == export_words(shown)


def test_the_sft_readmes_export_is_what_the_launcher_runs(inputs, monkeypatch, capsys):
    """The recipe README's export template, its variables the run's, is the launcher's export of a GPU run."""
    shown = readme_command(
        "cookbooks/training_judge_model/sft/README.md",
        "python -m training.export causal-lm $SAVE_DIR",
        {f"${name}": value for name, value in inputs.items()},
    )
    assert export_words(gpu_export(SFT_LAUNCHER, inputs, monkeypatch, capsys)) == export_words(shown)


def test_export_dir_none_runs_no_export_and_the_gpu_export_is_bf16(inputs, capsys, monkeypatch):
    pretend_flash_attention(monkeypatch, installed=True)
    assert launch_in_process(SFT_LAUNCHER, "--dry-run", "launch.export_dir=none", **inputs, MICRO_BATCH_SIZE=2) == 0
    assert "training.export" not in capsys.readouterr().out
    assert launch_in_process(SFT_LAUNCHER, "--dry-run", "trainer.device=cuda", **inputs) == 0
    assert "--dtype bf16" in capsys.readouterr().out


def test_the_trainer_config_has_no_launcher_section(inputs):
    from training.launch.config import trainer_config

    config = trainer_config(composed(BT_LAUNCHER, **inputs).config)
    assert "launch" not in config and config.trainer.experiment_name == "run"


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--verbose"], "unknown option --verbose"),
        (["max_length"], "unexpected argument 'max_length'"),
        (["--config"], "--config needs a value"),
        (["data.max_length=1,2"], "is a sweep"),
    ],
)
def test_bad_arguments_are_refused(inputs, arguments, message):
    assert message in refusal(BT_LAUNCHER, *arguments, **inputs)


@pytest.mark.parametrize(
    "line, message",
    [
        ("LR=2e-6  # no ${...}", "line 3: expected a knob line"),
        ("echo hi", "line 3: expected a knob line"),
    ],
)
def test_a_launcher_script_out_of_format_is_refused_naming_the_line(tmp_path, line, message):
    script = tmp_path / "run_x.sh"
    script.write_text(f'#!/usr/bin/env bash\nset -euo pipefail\n{line}\nexec python -m training.launch sft "$0" "$@"\n')
    with pytest.raises(LaunchError, match=re.escape(message)):
        read_launcher_script(script)


def test_every_knob_line_must_reach_the_command(tmp_path):
    script = tmp_path / "run_x.sh"
    script.write_text(
        "#!/usr/bin/env bash\nLR=${LR:-1}  # rate\nEPOCHS=${EPOCHS:-1}  # epochs\n"
        'exec python -m training.launch sft "$0" optim.lr="$LR" "$@"\n'
    )
    with pytest.raises(LaunchError, match="knobs EPOCHS are declared but not passed"):
        read_launcher_script(script)


def write_family(tmp_path: Path, knobs_file: str, launcher_lines: str = "") -> Path:
    """A launcher family as the GRPO and scalar-head ones: family/knobs.sh and family/member/run_x.sh, which sets
    its own knob, sources the knobs file and passes its argument array."""
    (tmp_path / "family" / "member").mkdir(parents=True)
    (tmp_path / "family" / "knobs.sh").write_text(knobs_file)
    script = tmp_path / "family" / "member" / "run_x.sh"
    script.write_text(
        "#!/usr/bin/env bash\n# run_x: a member\nset -euo pipefail\n\n"
        "TRAIN_FILE=${TRAIN_FILE:-./train.parquet}  # its data\n"
        f'source "$(dirname "$0")/../knobs.sh"\n{launcher_lines}\n'
        'exec python -m training.launch sft "$0" \\\n    "${SHARED_ARGUMENTS[@]}" optim.lr="$LR" \\\n    "$@"\n'
    )
    return script


SHARED_KNOBS = (
    "# shellcheck shell=bash\n# the family's knobs\nMODEL_PATH=${MODEL_PATH:-./model}  # base model\n\n"
    'SHARED_ARGUMENTS=(  # their keys\n    model.partial_pretrain="$MODEL_PATH"\n'
    '    data.train_files="$TRAIN_FILE"\n)\n'
)


def test_a_sourced_knobs_file_gives_its_knobs_and_bash_passes_what_the_core_reads(tmp_path):
    script = write_family(tmp_path, SHARED_KNOBS, "LR=${LR:-1e-5}  # rate")
    launcher = read_launcher_script(script)
    assert launcher.header == ["run_x: a member"] and launcher.recipe == "sft"
    assert launcher.sourced == [script.parent / "../knobs.sh"]
    assert [(knob.name, knob.default, knob.key) for knob in launcher.knobs] == [
        ("MODEL_PATH", "./model", "model.partial_pretrain"),
        ("TRAIN_FILE", "./train.parquet", "data.train_files"),
        ("LR", "1e-5", "optim.lr"),
    ]
    # bash runs the same command: a stand-in python prints the arguments it is given
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$@"\n')
    (bin_dir / "python").chmod(0o755)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "LR": "3e-4"}
    result = subprocess.run(["bash", str(script), "--dry-run"], env=env, capture_output=True, text=True, check=True)
    expected = ["model.partial_pretrain=./model", "data.train_files=./train.parquet", "optim.lr=3e-4"]
    assert result.stdout.splitlines() == ["-m", "training.launch", "sft", str(script), *expected, "--dry-run"]


@pytest.mark.parametrize(
    "knobs_file, launcher_lines, message",
    [
        (SHARED_KNOBS.replace("SHARED_ARGUMENTS=(", "OTHER_ARGUMENTS=("), "LR=${LR:-1}  # rate", "names no argument"),
        (SHARED_KNOBS, "MODEL_PATH=${MODEL_PATH:-./other}  # again\nLR=${LR:-1}  # rate", "declared a second time"),
        (SHARED_KNOBS.replace(")\n", ""), "LR=${LR:-1}  # rate", "knobs.sh line 5: the argument array"),
        (SHARED_KNOBS + 'exec python -m training.launch sft "$0" "$@"\n', "LR=${LR:-1}  # rate", "knobs.sh line 9"),
    ],
)
def test_a_knobs_file_out_of_format_is_refused(tmp_path, knobs_file, launcher_lines, message):
    with pytest.raises(LaunchError, match=re.escape(message)):
        read_launcher_script(write_family(tmp_path, knobs_file, launcher_lines))
