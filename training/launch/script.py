"""Reading a `run_*.sh` launcher: its header, its knobs and the config key each knob sets.

A launcher is the single place where a knob's default, help text and config key are written (with the knobs file
it sources, where launchers of one family share some), so the core reads them from the script instead of
repeating them. The format is strict (anything else is an error naming the file and line):

    #!/usr/bin/env bash
    # header comment: what it trains, the usage line, where the laptop config and README are
    set -euo pipefail
    NAME=${NAME:-default}  # one-line help
    source "$(dirname "$0")/../family_knobs.sh"
    exec python -m training.launch <recipe> "$0" config.key="$NAME" ... "$@"

The `source` line is optional: a knobs file shared by the launchers of one family, path relative to the
launcher's folder, holding knob lines and argument arrays, each a list of knob arguments that a command passes
as "${ARRAY[@]}":

    ARRAY=(
        config.key="$NAME" ...
    )
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from training.launch.recipe import LaunchError

KNOB_LINE = re.compile(r"^(?P<name>[A-Z][A-Z0-9_]*)=\$\{(?P=name):-(?P<default>[^}$]*)\}\s+#\s*(?P<help>\S.*)$")
KNOB_ARGUMENT = re.compile(r"^(?P<key>[A-Za-z_][\w.]*)=\$(?P<name>[A-Z][A-Z0-9_]*)$")
SOURCE_LINE = re.compile(r'^(?:source|\.) "\$\(dirname "\$0"\)/(?P<path>[^"$]+)"$')
ARRAY_START = re.compile(r"^(?P<name>[A-Z][A-Z0-9_]*)=\(\s*(?:#.*)?$")
ARRAY_ARGUMENT = re.compile(r"^\$\{(?P<name>[A-Z][A-Z0-9_]*)\[@\]\}$")
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
    sourced: list[Path] = field(default_factory=list)  # the knobs files it sources, in order

    @property
    def name(self) -> str:
        return self.path.name


@dataclass
class _Definitions:
    """What a launcher and the files it sources define before the command."""

    defaults: dict[str, tuple[str, str]] = field(default_factory=dict)  # knob -> (default, help)
    arrays: dict[str, list[str]] = field(default_factory=dict)  # argument array -> its knob arguments
    sourced: list[Path] = field(default_factory=list)


def read_launcher_script(path: Path) -> LauncherScript:
    """Parse `path`; raises LaunchError naming the first line that does not fit the format."""
    lines = _read_lines(path, "the launcher script")
    header = _header(lines)
    definitions = _Definitions()
    first = 1 + len(header)
    command_index = _read_definitions(path, lines, first, definitions, command_allowed=True)
    if command_index is None:
        raise LaunchError(f"{path}: no `{' '.join(COMMAND_START)} ...` command")
    recipe, knobs = _parse_command(path, command_index + 1, lines[command_index:], definitions)
    return LauncherScript(path, header, recipe, knobs, definitions.sourced)


def _read_lines(path: Path, what: str) -> list[str]:
    try:
        return path.read_text().splitlines()
    except OSError as err:
        raise LaunchError(f"cannot read {what} {path}: {err}") from err


def _read_definitions(
    path: Path, lines: list[str], first: int, definitions: _Definitions, command_allowed: bool
) -> int | None:
    """Reads the knob lines, argument arrays and sourced files of lines[first:] into `definitions`; the index of
    the command's first line, or None when there is none."""
    index = first
    while index < len(lines):
        line, number = lines[index], index + 1
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or stripped == "set -euo pipefail":
            pass
        elif match := KNOB_LINE.match(stripped):
            if match["name"] in definitions.defaults:
                raise LaunchError(f"{path} line {number}: the knob {match['name']} is declared a second time")
            definitions.defaults[match["name"]] = (match["default"], match["help"])
        elif match := SOURCE_LINE.match(stripped):
            _read_sourced(path.parent / match["path"], definitions)
        elif match := ARRAY_START.match(stripped):
            index = _read_array(path, lines, index, match["name"], definitions)
        elif command_allowed and stripped.startswith(" ".join(COMMAND_START) + " "):
            return index
        else:
            expected = " or the command `" + " ".join(COMMAND_START) + " ...`" if command_allowed else ""
            raise LaunchError(
                f"{path} line {number}: expected a knob line `NAME=${{NAME:-default}}  # help`, a "
                f'`source "$(dirname "$0")/FILE"` line, an argument array `NAME=(`{expected}, got: {line}'
            )
        index += 1
    return None


def _read_sourced(path: Path, definitions: _Definitions) -> None:
    """A knobs file the launcher sources: knob lines and argument arrays, no command."""
    if path in definitions.sourced:
        raise LaunchError(f"{path} is sourced twice")
    definitions.sourced.append(path)
    _read_definitions(path, _read_lines(path, "the knobs file"), 0, definitions, command_allowed=False)


def _read_array(path: Path, lines: list[str], start: int, name: str, definitions: _Definitions) -> int:
    """Reads the argument array `NAME=(` ... `)` starting at lines[start]; the index of its `)` line."""
    for end in range(start + 1, len(lines)):
        if lines[end].strip() == ")":
            definitions.arrays[name] = shlex.split("\n".join(lines[start + 1 : end]), comments=True)
            return end
    raise LaunchError(f"{path} line {start + 1}: the argument array {name} has no closing `)` line")


def _header(lines: list[str]) -> list[str]:
    header = []
    for line in lines[1:]:
        if not line.startswith("#"):
            break
        header.append(line[2:] if line.startswith("# ") else line[1:])
    return header


def _parse_command(path: Path, line_number: int, lines: list[str], definitions: _Definitions) -> tuple[str, list[Knob]]:
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
    defaults = dict(definitions.defaults)
    knobs = []
    for token in _expand_arrays(where, tokens[start + 2 : -1], definitions.arrays):
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


def _expand_arrays(where: str, tokens: list[str], arrays: dict[str, list[str]]) -> list[str]:
    """The command's arguments with each "${ARRAY[@]}" replaced by the array's arguments."""
    expanded = []
    for token in tokens:
        match = ARRAY_ARGUMENT.match(token)
        if match is None:
            expanded.append(token)
        elif match["name"] in arrays:
            expanded.extend(arrays[match["name"]])
        else:
            raise LaunchError(f"{where}: {token} names no argument array the launcher or its knobs file defines")
    return expanded
