"""The SFT and Bradley-Terry launchers' --dry-run and input validation, and a dry run of every config file
under cookbooks/ (bash only: nothing is trained here)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.launcher_helpers import BT_LAUNCHER, RECIPES, SFT_LAUNCHER, run_launcher

# Every config file's command sits on a comment line of the form `# bash <launcher> ... --config <the file>`.
COMMAND_LINE = re.compile(r"^#\s*(bash\s+\S+\.sh\b.*--config\s+\S+.*)$")
CONFIG_FILES = sorted(RECIPES.glob("**/configs/*.env"))


@pytest.fixture
def inputs(tmp_path) -> dict[str, str]:
    """Placeholder model folder and data files: a dry run only checks that they exist."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    for name in ("train.parquet", "val.parquet"):
        (tmp_path / name).touch()
    return {
        "MODEL_PATH": str(model),
        "TRAIN_FILE": str(tmp_path / "train.parquet"),
        "VAL_FILE": str(tmp_path / "val.parquet"),
        "SAVE_DIR": str(tmp_path / "run"),
    }


@pytest.mark.parametrize(
    "launcher, module", [(SFT_LAUNCHER, "verl.trainer.fsdp_sft_trainer"), (BT_LAUNCHER, "training.bt_trainer")]
)
def test_dry_run_prints_the_commands_and_starts_nothing(inputs, launcher, module):
    result = run_launcher(launcher, "--dry-run", "trainer.seed=7", MICRO_BATCH_SIZE=3, TRAIN_BATCH_SIZE=6, **inputs)
    assert result.returncode == 0, result.stderr
    train, export = result.stdout.strip().splitlines()
    assert train.startswith("torchrun --standalone") and f"-m {module}" in train
    assert "data.micro_batch_size_per_gpu=3" in train and "trainer.device=cpu" in train
    assert train.endswith("trainer.seed=7")
    assert "training.export" in export and f"{inputs['SAVE_DIR']}/hf" in export
    assert "dry run: inputs are valid; nothing was started" in result.stderr
    assert not Path(inputs["SAVE_DIR"]).exists()


def test_bt_dry_run_carries_the_recipe_defaults(inputs):
    result = run_launcher(BT_LAUNCHER, "--dry-run", **inputs)
    assert result.returncode == 0, result.stderr
    train = shlex.split(result.stdout.splitlines()[0])
    expected = [
        "data.train_batch_size=256",
        "data.micro_batch_size_per_gpu=1",
        "data.max_length=4096",
        "optim.lr=2e-6",
        "trainer.total_epochs=3",
        "model.strategy=fsdp2",
        "optim.weight_decay=0.001",
        "optim.lr_warmup_steps_ratio=0.03",
        "optim.clip_grad=2.0",
        "optim.lr_scheduler=cosine",
        "trainer.logger=[console]",
    ]
    assert set(expected) <= set(train)


def test_sft_dry_run_carries_the_recipe_defaults(inputs):
    result = run_launcher(SFT_LAUNCHER, "--dry-run", **inputs)
    assert result.returncode == 0, result.stderr
    train = shlex.split(result.stdout.splitlines()[0])
    expected = [
        "data.train_batch_size=96",
        "data.micro_batch_size_per_gpu=12",
        "data.max_length=4096",
        "data.truncation=right",
        "data.multiturn.enable=true",
        "data.multiturn.messages_key=messages",
        "trainer.total_epochs=1",
    ]
    assert set(expected) <= set(train)


BAD_KNOBS = [
    ("TRAIN_BATCH_SIZE", "abc", "TRAIN_BATCH_SIZE must be an integer"),
    ("MICRO_BATCH_SIZE", "0", "MICRO_BATCH_SIZE must be >= 1"),
    ("MAX_LENGTH", "-5", "MAX_LENGTH must be an integer"),
    ("LR", "fast", "LR must be a non-negative number"),
    ("TOTAL_EPOCHS", "0", "TOTAL_EPOCHS must be >= 1"),
    ("TOTAL_TRAINING_STEPS", "x", "TOTAL_TRAINING_STEPS must be an integer"),
    ("STRATEGY", "ddp", "STRATEGY must be one of: fsdp fsdp2"),
    ("SAVE_FREQ", "0", "SAVE_FREQ must be -1 or an integer >= 1"),
    ("TEST_FREQ", "often", "TEST_FREQ must be -1 or an integer >= 1"),
    ("GRADIENT_CHECKPOINTING", "yes", "GRADIENT_CHECKPOINTING must be one of: true false"),
    ("LOGGER", "[console,tensorbord]", "LOGGER: 'tensorbord' is not one of"),
    ("N_GPUS_PER_NODE", "two", "N_GPUS_PER_NODE must be an integer"),
    ("NNODES", "2", "MASTER_ADDR must be set when NNODES > 1"),
    ("DEVICE", "tpu", "DEVICE must be one of: auto cuda cpu"),
    ("MODEL_PATH", "./no/such/model", "MODEL_PATH: './no/such/model' is not a model directory"),
    ("TRAIN_FILE", "/no/such/train.parquet", "TRAIN_FILE: file '/no/such/train.parquet' does not exist"),
    ("VAL_FILE", "/no/such/val.parquet", "VAL_FILE: file '/no/such/val.parquet' does not exist"),
    ("TRAIN_BATCH_SIZE", "10", "TRAIN_BATCH_SIZE vs"),
]
BT_ONLY = [
    ("TRUNCATION", "middle", "TRUNCATION must be one of: left right error"),
    ("WEIGHT_DECAY", "-1", "WEIGHT_DECAY must be a non-negative number"),
    ("WARMUP_STEPS_RATIO", "1.5", "WARMUP_STEPS_RATIO must be <= 1"),
    ("CLIP_GRAD", "max", "CLIP_GRAD must be a non-negative number"),
    ("LR_SCHEDULER", "linear", "LR_SCHEDULER must be one of: cosine wsd"),
    ("MARGIN_MODE", "hinge", "MARGIN_MODE must be one of: none scaled offset"),
]
SFT_ONLY = [
    ("TRUNCATION", "middle", "TRUNCATION must be one of: left right error"),
    ("SP_SIZE", "2", "SP_SIZE=2: sequence parallelism needs flash-attn"),
]


@pytest.mark.parametrize(
    "launcher, knob, value, message",
    [(SFT_LAUNCHER, *case) for case in BAD_KNOBS + SFT_ONLY] + [(BT_LAUNCHER, *case) for case in BAD_KNOBS + BT_ONLY],
)
def test_a_bad_knob_is_named_before_anything_starts(inputs, launcher, knob, value, message):
    knobs = {**inputs, "TRAIN_BATCH_SIZE": 8, "MICRO_BATCH_SIZE": 4, knob: value}
    result = run_launcher(launcher, "--dry-run", **knobs)
    assert result.returncode == 2
    assert message in result.stderr
    assert "torchrun" not in result.stdout


def test_help_lists_every_knob_with_its_default():
    result = run_launcher(BT_LAUNCHER, "--help")
    assert result.returncode == 0
    for knob, default in (
        ("TRAIN_BATCH_SIZE", "256"),
        ("MICRO_BATCH_SIZE", "1"),
        ("LR", "2e-6"),
        ("WEIGHT_DECAY", "0.001"),
        ("MARGIN_MODE", "none"),
        ("MASTER_PORT", "29500"),
    ):
        assert re.search(rf"^\s+{knob}\s+{re.escape(default)}\s", result.stdout, flags=re.MULTILINE), knob


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
    assert {"sft", "bradley-terry"} <= {config.parent.parent.name for config in CONFIG_FILES}


@pytest.mark.parametrize("config", CONFIG_FILES, ids=lambda path: str(path.relative_to(RECIPES)))
def test_every_config_file_dry_runs(config, inputs):
    """The config's own knobs are validated by its launcher; model and data paths point at placeholders,
    since they exist only after the data and model preparation the config's header describes."""
    command, folder = config_command(config)
    assert (folder / command[command.index("--config") + 1]).resolve() == config.resolve()
    result = run_launcher(folder / command[1], *command[2:], "--dry-run", cwd=folder, **inputs)
    assert result.returncode == 0, result.stderr
    assert "dry run: inputs are valid" in result.stderr
