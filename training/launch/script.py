"""Reading a `run_*.sh` launcher: its header, its knobs and the config key each knob sets.

A launcher is the single place where a knob's default, help text and config key are written, so the
core reads them from the script instead of repeating them. The format is strict (anything else is an
error naming the line):

    #!/usr/bin/env bash
    # header comment: what it trains, the usage line, where the laptop config and README are
    set -euo pipefail
    NAME=${NAME:-default}  # one-line help
    exec python -m training.launch <recipe> "$0" config.key="$NAME" ... "$@"
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from training.launch.recipe import LaunchError

KNOB_LINE = re.compile(r"^(?P<name>[A-Z][A-Z0-9_]*)=\$\{(?P=name):-(?P<default>[^}$]*)\}\s+#\s*(?P<help>\S.*)$")
KNOB_ARGUMENT = re.compile(r"^(?P<key>[A-Za-z_][\w.]*)=\$(?P<name>[A-Z][A-Z0-9_]*)$")
COMMAND_START = ("exec", "python", "-m", "training.launch")


@dataclass(frozen=True)
class Knob:
    """An environment variable of a launcher that sets one config key."""

    name: str
    default: str
    help: str
    key: str


@dataclass(frozen=True)
class LauncherScript:
    path: Path
    header: list[str]  # the header comment, without the leading "# "
    recipe: str  # the recipe its command names
    knobs: list[Knob]  # in the order of the command's arguments

    @property
    def name(self) -> str:
        return self.path.name


def read_launcher_script(path: Path) -> LauncherScript:
    """Parse `path`; raises LaunchError naming the first line that does not fit the format."""
    try:
        lines = path.read_text().splitlines()
    except OSError as err:
        raise LaunchError(f"cannot read the launcher script {path}: {err}") from err
    header = _header(lines)
    defaults: dict[str, tuple[str, str]] = {}
    command: list[str] = []
    command_line = 0
    for number, line in enumerate(lines[1 + len(header) :], start=2 + len(header)):
        stripped = line.strip()
        if command:
            command.append(line)
        elif not stripped or stripped.startswith("#") or stripped == "set -euo pipefail":
            continue
        elif match := KNOB_LINE.match(stripped):
            defaults[match["name"]] = (match["default"], match["help"])
        elif stripped.startswith(" ".join(COMMAND_START) + " "):
            command, command_line = [line], number
        else:
            raise LaunchError(
                f"{path} line {number}: expected a knob line `NAME=${{NAME:-default}}  # help` or the command "
                f"`{' '.join(COMMAND_START)} ...`, got: {line}"
            )
    if not command:
        raise LaunchError(f"{path}: no `{' '.join(COMMAND_START)} ...` command")
    recipe, knobs = _parse_command(path, command_line, command, defaults)
    return LauncherScript(path, header, recipe, knobs)


def _header(lines: list[str]) -> list[str]:
    header = []
    for line in lines[1:]:
        if not line.startswith("#"):
            break
        header.append(line[2:] if line.startswith("# ") else line[1:])
    return header


def _parse_command(
    path: Path, line_number: int, lines: list[str], defaults: dict[str, tuple[str, str]]
) -> tuple[str, list[Knob]]:
    """The recipe and the knob -> key map of the command `exec python -m training.launch RECIPE "$0" ... "$@"`."""
    where = f"{path} line {line_number}"
    text = "\n".join(lines)
    if text.rstrip().endswith("\\") or any(not line.rstrip().endswith("\\") for line in lines[:-1]):
        raise LaunchError(f"{where}: the command must be the script's last lines, continued with `\\`")
    tokens = shlex.split(text.replace("\\\n", " "))
    start = len(COMMAND_START)
    if len(tokens) < start + 3 or tokens[start + 1] != "$0" or tokens[-1] != "$@":
        raise LaunchError(
            f'{where}: the command must read `{" ".join(COMMAND_START)} RECIPE "$0" key="$KNOB" ... "$@"`'
        )
    knobs = []
    for token in tokens[start + 2 : -1]:
        match = KNOB_ARGUMENT.match(token)
        if not match:
            raise LaunchError(f'{where}: expected key="$KNOB", got {token}')
        if match["name"] not in defaults:
            raise LaunchError(f"{where}: {token} uses {match['name']}, which has no knob line")
        default, help_text = defaults.pop(match["name"])
        knobs.append(Knob(match["name"], default, help_text, match["key"]))
    if defaults:
        raise LaunchError(f"{path}: knobs {', '.join(defaults)} are declared but not passed to the command")
    return tokens[start], knobs
