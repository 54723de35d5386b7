"""The contract between the launch core and each recipe.

The core (training/launch/core.py) turns a `run_*.sh` call into a final composed config and runs it:

    bash run_bt_rm.sh [--dry-run] [--config FILE.yaml] [key=value ...]
      -> python -m training.launch <recipe> <launcher script> <knob overrides> <the user's arguments>

Layers, lowest first (a later layer wins; the launch output names an environment knob that overrides a
value of the --config file):
  1. the recipe YAML (training/configs/<config_name>.yaml, composed by Hydra with verl's own config)
  2. the launcher's knobs whose environment variable is unset (the script's ${VAR:-default})
  3. `Recipe.device_overlay(device)`: device-dependent defaults (CPU mode)
  4. the --config FILE (YAML, merged by OmegaConf; an unknown key is an error)
  5. the launcher's knobs whose environment variable is set
  6. the user's key=value overrides
then `Recipe.prepare` (checks that need the outside world, may resolve settings such as the Ray mode),
`Recipe.validate` (every check on the final config), and `Recipe.commands`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from omegaconf import DictConfig


class LaunchError(Exception):
    """A run that cannot start; the message names the config key (and its knob, through `KeyNames`)."""


# The config key as a user knows it: "data.train_batch_size (TRAIN_BATCH_SIZE)" when a knob sets it.
KeyNames = Callable[[str], str]
# Whether the user gave the key's value (the environment, --config or an argument), not a default.
Given = Callable[[str], bool]


@dataclass(frozen=True)
class StartAgain:
    """A failure that comes before a command did anything, and that a busy machine causes: a failed start whose
    output holds `marker` is started again, up to `starts` in all."""

    marker: str
    cause: str  # what the launch says when it starts the command again
    starts: int


@dataclass(frozen=True)
class Command:
    """One process the launch runs, in order: training, then the export (which reads the training's config)."""

    name: str  # "train" | "export"
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)  # added to the launcher's environment
    start_again: StartAgain | None = None


NO_EXPORT = "none"  # launch.export_dir of a run that is not exported


def export_command(kind: str, recipe: str, save_dir, export_dir, dtype: str, base_model, train_file) -> Command:
    """`python -m training.export KIND SAVE_DIR EXPORT_DIR ...`: the final checkpoint with the values the training
    used (its dtype, base model and train file, recorded in the export)."""
    argv = ["python", "-m", "training.export", kind, save_dir, export_dir, "--dtype", dtype, "--recipe", recipe]
    argv += ["--base-model", base_model, "--train-file", train_file]
    return Command("export", [str(argument) for argument in argv])


class Recipe(Protocol):
    name: str  # in messages and the snapshot: "sft", "bradley-terry", "grpo-pointwise", "grpo-pairwise", "policy-grpo"
    config_name: str  # the recipe YAML under training/configs/

    def device_overlay(self, device: str) -> dict:
        """Dotted keys -> values: defaults for `device` ("cpu" | "cuda"), layer 3."""

    def prepare(self, config: DictConfig, key_names: KeyNames, given: Given) -> list[str]:
        """Checks against the outside world (a Ray cluster's resources, a judge's /health); may set launch.*
        values they resolve. Returns notes for the launch output; raises LaunchError."""

    def validate(self, config: DictConfig, key_names: KeyNames) -> None:
        """Every check of the final config; raises LaunchError naming the key (and its knob)."""

    def commands(self, config: DictConfig, snapshot_dir: Path) -> list[Command]:
        """The processes to run; the training one reads the config snapshot saved in `snapshot_dir`."""
