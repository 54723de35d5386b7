"""The launch core: a `run_*.sh` call -> the final composed config -> checks -> snapshot -> the recipe's processes.

    python -m training.launch RECIPE SCRIPT <the script's knob arguments> [--dry-run] [--config FILE] [--help]
                              [key=value ...]

Every check runs on the final config, whatever layer a value came from, so a setting is refused with the same
message whether a knob, the --config file or a key=value argument gave it (layers: training/launch/recipe.py).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from training.launch.config import (
    Layer,
    apply_layer,
    compose_recipe_config,
    load_config_file,
    parse_overrides,
    register_resolvers,
    show,
    trainer_config,
)
from training.launch.device import DEVICE_KEY, device_environment, removes_padding, resolve_device
from training.launch.metrics_file import FILE_LOGGER_ENV, earlier_steps_kept
from training.launch.recipe import Command, LaunchError, Recipe
from training.launch.script import Knob, LauncherScript, read_launcher_script

SNAPSHOT_SUBDIR = "launch"
SCRIPT_DEFAULT = "script default"  # the source of a knob's value when its variable is unset
OUTPUT_TAIL_BYTES = 1 << 16  # of a command's output, searched for the marker of a failed start
ENVIRONMENT = "environment"
USAGE = "python -m training.launch RECIPE SCRIPT <knob arguments> [--dry-run] [--config FILE] [--help] [key=value ...]"
PRECEDENCE = (
    "Precedence, later wins: the recipe YAML < knob defaults < device defaults (CPU mode) < --config FILE < knobs\n"
    "set in the environment < key=value arguments. An environment knob that overrides a --config value is named\n"
    "in the output."
)


@dataclass(frozen=True)
class LaunchRequest:
    """The user's arguments to a launcher."""

    dry_run: bool = False
    help: bool = False
    config_file: str | None = None
    overrides: list[str] = field(default_factory=list)


@dataclass
class Composition:
    """The final config, the device it runs on, and where the values not taken from the recipe YAML came from."""

    config: DictConfig
    device: str
    knobs: list[Knob]
    sources: dict[str, str] = field(default_factory=dict)  # dotted key -> the layer that set it last
    notes: list[str] = field(default_factory=list)

    def key_names(self, key: str) -> str:
        """`data.train_batch_size (TRAIN_BATCH_SIZE)` when a knob sets the key, else the key."""
        names = [knob.name for knob in self.knobs if knob.key == key]
        return f"{key} ({', '.join(names)})" if names else key

    def given(self, key: str) -> bool:
        """Whether the environment, the --config file or an argument set the key (not a default)."""
        return self.sources.get(key, SCRIPT_DEFAULT) not in (SCRIPT_DEFAULT, f"{self.device} default")


def parse_arguments(arguments: list[str]) -> LaunchRequest:
    dry_run = want_help = False
    config_file = None
    overrides = []
    remaining = list(arguments)
    while remaining:
        argument = remaining.pop(0)
        if argument == "--dry-run":
            dry_run = True
        elif argument in ("-h", "--help"):
            want_help = True
        elif argument == "--config" or argument.startswith("--config="):
            if config_file is not None:
                raise LaunchError("--config is given twice")
            config_file = argument.partition("=")[2] if "=" in argument else _pop_value(remaining, argument)
        elif argument.startswith("-") and not argument.startswith("~"):
            raise LaunchError(f"unknown option {argument} (settings are key=value)")
        elif "=" in argument or argument.startswith("~"):
            overrides.append(argument)
        else:
            raise LaunchError(f"unexpected argument {argument!r} (settings are key=value)")
    return LaunchRequest(dry_run, want_help, config_file, overrides)


def _pop_value(remaining: list[str], option: str) -> str:
    if not remaining:
        raise LaunchError(f"{option} needs a value")
    return remaining.pop(0)


def compose_launch(
    recipe: Recipe, knobs: list[Knob], knob_arguments: list[str], request: LaunchRequest, environ: Mapping[str, str]
) -> Composition:
    """The final config in the layers of training/launch/recipe.py, with trainer.device resolved."""
    register_resolvers()
    defaults, environment = _knob_layers(knobs, knob_arguments, environ)
    config_file = [load_config_file(request.config_file)] if request.config_file else []
    command_line = Layer("command line", overrides=parse_overrides("command line", request.overrides))
    composition = Composition(compose_recipe_config(recipe.config_name), "", knobs)
    for layer in [defaults, *config_file, environment, command_line]:
        if layer is environment and config_file:
            composition.notes.extend(_environment_notes(composition, environ, config_file[0]))
        for key in apply_layer(composition.config, layer):
            composition.sources[key] = layer.source
    composition.device = resolve_device(OmegaConf.select(composition.config, DEVICE_KEY), composition.key_names)
    _apply_device_overlay(composition, recipe.device_overlay(composition.device))
    OmegaConf.update(composition.config, DEVICE_KEY, composition.device)
    _check_complete(composition)
    return composition


def _apply_device_overlay(composition: Composition, overlay: dict) -> None:
    """Layer 3, the device's defaults: known only once every layer has given trainer.device, so applied last, to
    the keys (and keys under them) that no layer above the knob defaults has set."""
    for key, value in overlay.items():
        prefixes = [".".join(key.split(".")[:length]) for length in range(1, key.count(".") + 2)]
        if all(composition.sources.get(prefix, SCRIPT_DEFAULT) == SCRIPT_DEFAULT for prefix in prefixes):
            OmegaConf.update(composition.config, key, value)
            composition.sources[key] = f"{composition.device} default"


def _knob_layers(knobs: list[Knob], knob_arguments: list[str], environ: Mapping[str, str]) -> tuple[Layer, Layer]:
    """The knobs' `key=value` arguments: those whose variable the environment sets, and the others (defaults)."""
    overrides = parse_overrides("the launcher's knobs", knob_arguments)
    from_environment = [bool(environ.get(knob.name)) for knob in knobs]
    pairs = list(zip(overrides, from_environment, strict=True))
    defaults = Layer(SCRIPT_DEFAULT, overrides=[override for override, env in pairs if not env])
    return defaults, Layer(ENVIRONMENT, overrides=[override for override, env in pairs if env])


def _environment_notes(composition: Composition, environ: Mapping[str, str], config_file: Layer) -> list[str]:
    """`LR=9 (environment) overrides optim.lr: 2e-05 from FILE` for each environment knob the file also sets."""
    return [
        f"{knob.name}={environ[knob.name]} (environment) overrides {knob.key}: "
        f"{show(OmegaConf.select(composition.config, knob.key))} from {config_file.source.removeprefix('--config ')}"
        for knob in composition.knobs
        if environ.get(knob.name) and composition.sources.get(knob.key) == config_file.source
    ]


def _check_complete(composition: Composition) -> None:
    """Every mandatory value is set and every interpolation resolves."""
    missing = sorted(OmegaConf.missing_keys(composition.config))
    if missing:
        raise LaunchError(f"not set: {', '.join(composition.key_names(key) for key in missing)}")
    try:
        OmegaConf.to_container(composition.config, resolve=True)
    except OmegaConfBaseException as err:
        raise LaunchError(f"the config does not resolve: {err}") from err


def knob_table(composition: Composition) -> str:
    """Each knob-backed setting, its value and the layer it came from."""
    rows = [
        (knob.name, knob.key, show(OmegaConf.select(composition.config, knob.key)), composition.sources[knob.key])
        for knob in composition.knobs
    ]
    widths = [max(len(row[column]) for row in rows) for column in range(3)]
    return "\n".join(
        f"  {name:<{widths[0]}}  {key:<{widths[1]}}  {value:<{widths[2]}}  {source}"
        for name, key, value, source in rows
    )


def help_text(script: LauncherScript, recipe: Recipe) -> str:
    width = max(len(knob.name) for knob in script.knobs)
    default_width = max(len(knob.default or "(empty)") for knob in script.knobs)
    key_width = max(len(knob.key) for knob in script.knobs)
    knob_lines = [
        f"  {knob.name:<{width}}  {knob.default or '(empty)':<{default_width}}  {knob.key:<{key_width}}  {knob.help}"
        for knob in script.knobs
    ]
    return "\n".join(
        [
            *script.header,
            "",
            "Knobs (environment variables; unset or empty: the default), the config key each sets:",
            *knob_lines,
            "",
            "Options:",
            "  --dry-run      check the final config, print the commands and where each knob's value came from",
            "  --config FILE  a YAML file of config keys (a key the recipe lacks is an error)",
            "  --help         this text",
            f"  key=value      any setting of training/configs/{recipe.config_name}.yaml (Hydra's override grammar;",
            "                 +key=value adds a key), e.g. trainer.total_training_steps=10 launch.export_dir=none",
            "",
            PRECEDENCE,
        ]
    )


def show_command(command: Command) -> str:
    return shlex.join([f"{name}={value}" for name, value in command.env.items()] + command.argv)


def launch_environment(composition: Composition, snapshot_dir: Path) -> dict[str, str]:
    """What every started process gets on top of the launcher's environment: CPU mode, and verl's tensorboard and
    file loggers writing under the run folder unless the environment says otherwise."""
    save_dir = Path(composition.config.trainer.default_local_dir)
    loggers = {
        "TENSORBOARD_DIR": str(save_dir / "tensorboard"),
        FILE_LOGGER_ENV: str(snapshot_dir / "metrics.jsonl"),
    }
    return {
        **{name: value for name, value in loggers.items() if name not in os.environ},
        **device_environment(composition.device),
    }


def save_snapshot(
    snapshot_dir: Path, script: LauncherScript, composition: Composition, commands: list[Command], env: dict[str, str]
) -> None:
    """config.yaml (what the trainer reads), command.sh (the commands), sources.yaml (where the settings that are
    not the recipe YAML's came from)."""
    snapshot_dir.mkdir(parents=True, exist_ok=True)
    stamp = f"{script.name}, {utc_now()}, device {composition.device}"
    OmegaConf.save(trainer_config(composition.config), snapshot_dir / "config.yaml")
    exports = " ".join(f"{name}={shlex.quote(value)}" for name, value in env.items())
    lines = ["#!/usr/bin/env bash", f"# {stamp}", "set -euo pipefail", f"export {exports}" if exports else ""]
    (snapshot_dir / "command.sh").write_text(
        "\n".join(filter(None, lines + [show_command(c) for c in commands])) + "\n"
    )
    sources = {
        key: {"value": OmegaConf.select(composition.config, key), "source": _source_name(composition, key, source)}
        for key, source in composition.sources.items()
    }
    header = f"# {stamp}: the settings that are not the recipe YAML's, and where each came from\n"
    (snapshot_dir / "sources.yaml").write_text(header + OmegaConf.to_yaml(OmegaConf.create(sources)))


def _source_name(composition: Composition, key: str, source: str) -> str:
    """`environment (TRAIN_BATCH_SIZE)`: a knob layer's value, with the knob that gave it."""
    if source not in (SCRIPT_DEFAULT, ENVIRONMENT):
        return source
    return f"{source} ({', '.join(knob.name for knob in composition.knobs if knob.key == key)})"


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_commands(commands: list[Command], env: dict[str, str], log_path: Path, title: str) -> int:
    """Run `commands` in order, each one's output teed to stdout and appended to `log_path`; the exit code of the
    first that fails, else 0."""
    with log_path.open("ab") as log:
        log.write(f"===== {utc_now()} {title}\n".encode())
        for command in commands:
            shown = show_command(command)
            print(shown, flush=True)
            log.write(f"$ {shown}\n".encode())
            returncode = run_started_again(command, {**os.environ, **env, **command.env}, log, title)
            if returncode:
                note(title, f"{command.name} failed with exit code {returncode}")
                return returncode
    return 0


def run_started_again(command: Command, env: dict[str, str], log, title: str) -> int:
    """`command` run once, and started again as `command.start_again` says while it fails that way."""
    returncode, output_tail = run_teed(command, env, log)
    starts = command.start_again.starts if command.start_again else 1
    for start in range(2, starts + 1):
        if not returncode or command.start_again.marker.encode() not in output_tail:
            break
        note(title, f"{command.name}: {command.start_again.cause}; starting it again ({start} of {starts})")
        log.write(f"===== {utc_now()} {command.name} started again ({start} of {starts})\n".encode())
        returncode, output_tail = run_teed(command, env, log)
    return returncode


def run_teed(command: Command, env: dict[str, str], log) -> tuple[int, bytes]:
    """The exit code, and the end of the output (where a failing Python process prints its error)."""
    try:
        process = subprocess.Popen(command.argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except OSError as err:
        raise LaunchError(f"{command.name}: cannot start {command.argv[0]}: {err}") from err
    tail = b""
    try:
        while chunk := process.stdout.read1(1 << 16):
            sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
            log.write(chunk)
            log.flush()
            tail = (tail + chunk)[-OUTPUT_TAIL_BYTES:]
    except KeyboardInterrupt:
        pass  # the process got the same SIGINT; wait for it to stop
    returncode = process.wait()
    return (128 - returncode if returncode < 0 else returncode), tail


def note(title: str, message: str) -> None:
    print(f"[{title}] {message}", file=sys.stderr, flush=True)


def launch(argv: list[str], recipes: Mapping[str, Recipe], environ: Mapping[str, str]) -> int:
    if len(argv) < 2:
        raise LaunchError(f"usage: {USAGE}")
    recipe_name, script_path, *arguments = argv
    if recipe_name not in recipes:
        raise LaunchError(f"unknown recipe {recipe_name!r}; known: {', '.join(sorted(recipes))}")
    recipe = recipes[recipe_name]
    script = read_launcher_script(Path(script_path))
    if script.recipe != recipe_name:
        raise LaunchError(f"{script.path} runs recipe {script.recipe}, not {recipe_name}")
    knob_arguments, user_arguments = arguments[: len(script.knobs)], arguments[len(script.knobs) :]
    _check_knob_arguments(script, knob_arguments)
    request = parse_arguments(user_arguments)
    if request.help:
        print(help_text(script, recipe))
        return 0
    composition = compose_launch(recipe, script.knobs, knob_arguments, request, environ)
    if composition.device == "cpu":
        composition.notes.insert(
            0, "CPU mode (gloo, sdpa, fp32 unless JUDGE_CPU_DTYPE says bf16): training/cpu_compat.py"
        )
    elif not removes_padding(composition.device):
        composition.notes.insert(0, "no flash-attn here: sdpa attention, padding kept, no sequence parallelism")
    composition.notes.extend(recipe.prepare(composition.config, composition.key_names, composition.given))
    recipe.validate(composition.config, composition.key_names)
    snapshot_dir = Path(composition.config.trainer.default_local_dir) / SNAPSHOT_SUBDIR
    commands = recipe.commands(composition.config, snapshot_dir)
    for message in composition.notes:
        note(script.name, message)
    env = launch_environment(composition, snapshot_dir)
    if request.dry_run:
        print("\n".join(show_command(command) for command in commands))
        print(f"\nsettings (knob, config key, value, from):\n{knob_table(composition)}")
        note(script.name, "dry run: the config is valid; nothing was started")
        return 0
    save_snapshot(snapshot_dir, script, composition, commands, env)
    note(
        script.name,
        f"config snapshot: {snapshot_dir}/{{config.yaml,command.sh,sources.yaml}}; log: {snapshot_dir}/train.log",
    )
    with earlier_steps_kept(Path({**os.environ, **env}[FILE_LOGGER_ENV])):
        return run_commands(commands, env, snapshot_dir / "train.log", script.name)


def _check_knob_arguments(script: LauncherScript, knob_arguments: list[str]) -> None:
    """The script's command passes its knobs first, in the order of its `key="$KNOB"` arguments."""
    for knob, argument in zip(script.knobs, knob_arguments, strict=False):
        if not argument.startswith(f"{knob.key}="):
            raise LaunchError(f"{script.path}: expected the knob argument {knob.key}=${knob.name}, got {argument!r}")
    if len(knob_arguments) < len(script.knobs):
        raise LaunchError(f"{script.path}: expected {len(script.knobs)} knob arguments, got {len(knob_arguments)}")


def main(argv: list[str], recipes: Mapping[str, Recipe]) -> int:
    """Exit code: 0, 2 for a run that cannot start (the message names the setting), else the failing command's."""
    title = Path(argv[1]).name if len(argv) > 1 else "training.launch"
    try:
        return launch(argv, recipes, os.environ)
    except LaunchError as err:
        note(title, f"error: {err}")
        return 2
