"""The settings of a command, declared once as typed dataclass fields, and the command-line flags derived from them.

A setting is a dataclass field declared with `option()`: its default (or `REQUIRED`) and its help text, and where
needed an environment variable, choices, that it is secret (its default is never shown) or positional.
`add_arguments` turns the settings of a config class into argparse arguments (`max_batch_size` ->
`--max-batch-size`, a bool -> a switch) and `from_arguments` builds the dataclass back from the parsed namespace, so a
flag, its type, its default and its help are written in one place. `parse_configs` parses a command's flags into its
config classes; `parse_command` does the same for a command with subcommands (one subparser per `Command`). A value
the config class refuses (its `__post_init__` raises ValueError) ends the command with the usage and the reason.

Fields declared without `option()` are not settings: they get no flag and keep their default. Standard library only,
so the lowest layers (data_prep, the reward client) declare their settings with it too.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

REQUIRED = dataclasses.MISSING  # the default of a setting that must be given


def option(
    default: Any,
    help: str,
    *,
    env: str | None = None,
    choices: Sequence | None = None,
    secret: bool = False,
    positional: bool = False,
    metavar: str | None = None,
):
    """A dataclass field that is a setting. `env`: the environment variable a flag left unset falls back to;
    `secret`: the value is never shown; `positional`: an argument without a flag (its default is REQUIRED)."""
    metadata = {
        "help": help,
        "env": env,
        "choices": choices,
        "secret": secret,
        "positional": positional,
        "metavar": metavar,
    }
    return field(default=default, metadata=metadata)


def require(condition: bool, message: str) -> None:
    """Refuse a setting's value: the ValueError a config class's `__post_init__` raises."""
    if not condition:
        raise ValueError(message)


def setting_types(config_class: type) -> dict[str, type]:
    """The type of each setting of `config_class` by field name: str for `str | None`, int for `int`, str for
    `list[str]` (one or more values), ..."""
    hints = typing.get_type_hints(config_class)
    return {item.name: _scalar_type(hints[item.name]) for item in _settings(config_class)}


def add_arguments(parser: argparse.ArgumentParser, config_class: type) -> None:
    """One argument per setting of `config_class`, with its type, default and help, in a group named after it."""
    group = parser.add_argument_group(config_class.__name__, config_class.__doc__)
    hints = typing.get_type_hints(config_class)
    for item in _settings(config_class):
        help_text = item.metadata["help"]
        kind = _scalar_type(hints[item.name])
        if kind is bool:
            if item.default is not False:
                raise TypeError(f"{config_class.__name__}.{item.name}: a switch (bool setting) must default to False")
            group.add_argument(_flag(item.name), action="store_true", help=help_text)
            continue
        arguments = {"type": kind, "choices": item.metadata["choices"], "metavar": item.metadata["metavar"]}
        if typing.get_origin(_without_none(hints[item.name])) is list:
            arguments["nargs"] = "+"
        if item.metadata["positional"]:
            group.add_argument(item.name, help=help_text, **arguments)
            continue
        if item.default is REQUIRED:
            arguments["required"] = True
        else:
            arguments["default"] = None if item.metadata["env"] else item.default  # None: the flag was not given
            if item.default is not None and not item.metadata["secret"]:
                help_text += f" (default: {item.default})"
        group.add_argument(_flag(item.name), help=help_text, **arguments)


def from_arguments(config_class: type, namespace: argparse.Namespace):
    """The `config_class` instance the parsed arguments describe; a setting with an environment variable takes,
    when its flag is not given, the variable's value if it is set, else its default."""
    types = setting_types(config_class)
    values = {}
    for item in _settings(config_class):
        value = getattr(namespace, item.name)
        env = item.metadata["env"]
        if value is None and env:
            value = _from_environment(env, types[item.name]) if os.environ.get(env) else item.default
        values[item.name] = value
    return config_class(**values)


def build_parser(prog: str, description: str | None, config_classes: Sequence[type]) -> argparse.ArgumentParser:
    """A parser with the arguments of every class of `config_classes`."""
    parser = argparse.ArgumentParser(
        prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    for config_class in config_classes:
        add_arguments(parser, config_class)
    return parser


def parse_configs(prog: str, description: str | None, config_classes: Sequence[type], argv=None) -> tuple:
    """One instance per class of `config_classes`, from the command line; a bad value exits with its reason."""
    parser = build_parser(prog, description, config_classes)
    return _configs_or_exit(parser, config_classes, parser.parse_args(argv))


@dataclass(frozen=True)
class Command:
    """A subcommand: its name, its line in the command's help, the config classes its arguments come from, and
    what runs it (called with one instance per config class)."""

    name: str
    help: str
    config_classes: tuple[type, ...]
    run: Callable[..., None]
    description: str | None = None


def parse_command(prog: str, description: str | None, commands: Sequence[Command], argv=None) -> tuple[Command, tuple]:
    """(the subcommand given, one instance per config class of it), from the command line; a bad value exits with
    the subcommand's usage and the reason."""
    parser = argparse.ArgumentParser(
        prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    by_name = {}
    for command in commands:
        subparser = subparsers.add_parser(command.name, help=command.help, description=command.description)
        for config_class in command.config_classes:
            add_arguments(subparser, config_class)
        by_name[command.name] = (command, subparser)
    namespace = parser.parse_args(argv)
    command, subparser = by_name[namespace.command]
    return command, _configs_or_exit(subparser, command.config_classes, namespace)


def run_command(
    prog: str, description: str | None, commands: Sequence[Command], failures: tuple[type[Exception], ...], argv=None
) -> None:
    """Parse the subcommand and run it; an exception of `failures` (bad input, a missing file) ends the command
    with its message instead of a traceback."""
    command, configs = parse_command(prog, description, commands, argv)
    try:
        command.run(*configs)
    except failures as err:
        raise SystemExit(f"{command.name}: {err}") from err


def _configs_or_exit(parser: argparse.ArgumentParser, config_classes: Sequence[type], namespace) -> tuple:
    try:
        return tuple(from_arguments(config_class, namespace) for config_class in config_classes)
    except ValueError as err:
        parser.error(str(err))


def _settings(config_class: type) -> list[dataclasses.Field]:
    return [item for item in dataclasses.fields(config_class) if "help" in item.metadata]


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _scalar_type(hint) -> type:
    hint = _without_none(hint)
    members = [member for member in typing.get_args(hint) if member is not type(None)] or [hint]
    return members[0]


def _without_none(hint):
    """`X | None` as X, any other hint as it is."""
    arguments = typing.get_args(hint)
    members = [member for member in arguments if member is not type(None)]
    return members[0] if type(None) in arguments and len(members) == 1 else hint


def _from_environment(env: str, kind: type):
    raw = os.environ[env]
    try:
        return kind(raw)
    except ValueError:
        raise ValueError(f"env {env}: expected {kind.__name__}, got {raw!r}") from None
