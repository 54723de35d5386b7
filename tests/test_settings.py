"""judge_core.settings: a command's flags come from its typed config dataclasses (help, default, type, env
variable, choices, positional and required arguments, subcommands), and every command documents its flags."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from judge_core.settings import (
    REQUIRED,
    Command,
    add_arguments,
    option,
    parse_command,
    parse_configs,
    require,
)
from tests.conftest import REPO_ROOT


@dataclass(frozen=True)
class Target:
    """Where the thing goes."""

    name: str = option(REQUIRED, "what to call it", positional=True)
    out: Path = option(REQUIRED, "output directory")
    mode: str = option("fast", "how to go", choices=("fast", "slow"))


@dataclass(frozen=True)
class Tuning:
    """How hard to try."""

    steps: int = option(3, "steps to take", env="SETTINGS_TEST_STEPS")
    token: str | None = option("hunter2", "a secret", secret=True)
    dry_run: bool = option(False, "print what would happen")
    scale: float = 1.5  # not declared with option(): no flag

    def __post_init__(self):
        require(self.steps > 0, "steps must be positive")


@dataclass(frozen=True)
class Inputs:
    """Several things at once."""

    paths: list[str] = option(REQUIRED, "one or more paths", positional=True)
    ports: list[int] = option(REQUIRED, "ports to try")
    weights: list[float] | None = option(None, "optional weights")


def test_a_list_setting_takes_one_or_more_typed_values():
    assert parse_configs("prog", None, (Inputs,), ["a", "--ports", "1"])[0] == Inputs(["a"], [1])
    assert parse_configs("prog", None, (Inputs,), ["a", "b", "--ports", "1", "2"])[0] == Inputs(["a", "b"], [1, 2])
    given = parse_configs("prog", None, (Inputs,), ["a", "--ports", "1", "--weights", "0.5", "2"])[0]
    assert given.weights == [0.5, 2.0]


def help_of(config_class: type) -> dict[str, str]:
    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser, config_class)
    return {action.dest: action.help for action in parser._actions}


def test_each_setting_becomes_a_typed_flag_with_its_default():
    target, tuning = parse_configs("prog", None, (Target, Tuning), ["thing", "--out", "dir", "--steps", "7"])
    assert target == Target("thing", Path("dir"), "fast")
    assert tuning.steps == 7 and tuning.dry_run is False and tuning.scale == 1.5
    assert parse_configs("prog", None, (Tuning,), ["--dry-run"])[0].dry_run is True


def test_help_shows_defaults_but_never_a_secret_one_and_only_settings_get_flags():
    lines = help_of(Tuning)
    assert lines == {
        "steps": "steps to take (default: 3)",
        "token": "a secret",
        "dry_run": "print what would happen",
    }


def test_a_switch_that_defaults_to_true_is_refused():
    @dataclass
    class Cached:
        use_cache: bool = option(True, "keep scores")

    with pytest.raises(TypeError, match="Cached.use_cache: a switch"):
        add_arguments(argparse.ArgumentParser(), Cached)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--out", "dir"], "the following arguments are required: name"),
        (["thing"], "the following arguments are required: --out"),
        (["thing", "--out", "dir", "--mode", "warp"], "argument --mode: invalid choice: 'warp'"),
        (["thing", "--out", "dir", "--steps", "many"], "argument --steps: invalid int value: 'many'"),
        (["thing", "--out", "dir", "--steps", "0"], "steps must be positive"),
    ],
)
def test_a_bad_command_line_exits_with_the_reason(argv, message, capsys):
    with pytest.raises(SystemExit, match="^2$"):  # argparse's usage error
        parse_configs("prog", None, (Target, Tuning), argv)
    assert message in capsys.readouterr().err


def test_an_unset_flag_falls_back_to_its_environment_variable_cast_to_its_type(monkeypatch, capsys):
    monkeypatch.setenv("SETTINGS_TEST_STEPS", "11")
    assert parse_configs("prog", None, (Tuning,), [])[0].steps == 11
    assert parse_configs("prog", None, (Tuning,), ["--steps", "2"])[0].steps == 2
    monkeypatch.setenv("SETTINGS_TEST_STEPS", "eleven")
    with pytest.raises(SystemExit, match="^2$"):
        parse_configs("prog", None, (Tuning,), [])
    assert "env SETTINGS_TEST_STEPS: expected int, got 'eleven'" in capsys.readouterr().err


COMMANDS = (
    Command("build", "build it", (Target, Tuning), run=lambda target, tuning: (target, tuning)),
    Command("tune", "tune it", (Tuning,), run=lambda tuning: tuning),
)


def test_a_subcommand_gets_the_flags_of_its_own_config_classes(capsys):
    command, configs = parse_command("prog", None, COMMANDS, ["tune", "--steps", "5"])
    assert command.name == "tune" and configs == (Tuning(steps=5),)
    command, configs = parse_command("prog", None, COMMANDS, ["build", "x", "--out", "o"])
    assert command.run(*configs) == (Target("x", Path("o")), Tuning())
    with pytest.raises(SystemExit, match="^2$"):
        parse_command("prog", None, COMMANDS, ["tune", "--out", "o"])
    assert "unrecognized arguments: --out o" in capsys.readouterr().err


def test_a_refused_value_exits_with_the_subcommands_usage(capsys):
    with pytest.raises(SystemExit, match="^2$"):
        parse_command("prog", None, COMMANDS, ["tune", "--steps", "-1"])
    err = capsys.readouterr().err
    assert err.startswith("usage: prog tune") and "prog tune: error: steps must be positive" in err


def test_the_settings_module_imports_only_the_standard_library():
    code = (
        "import sys, judge_core.settings; "
        "outside = {name.split('.')[0] for name in sys.modules} - set(sys.stdlib_module_names); "
        "assert outside == {'__main__', 'judge_core'}, sorted(outside)"
    )
    # -S: no site-packages at all, so a third-party import fails even where it is installed
    subprocess.run([sys.executable, "-S", "-c", code], check=True, cwd=REPO_ROOT)


# ---- every command documents its flags -----------------------------------------------------------------


def flags_of(config_classes) -> set[str]:
    parser = argparse.ArgumentParser(add_help=False)
    for config_class in config_classes:
        add_arguments(parser, config_class)
    return {flag for action in parser._actions for flag in action.option_strings}


def undocumented(flags: set[str], readme: Path) -> set[str]:
    text = readme.read_text()
    return {flag for flag in flags if not re.search(re.escape(flag) + r"(?![\w-])", text)}


def test_the_evaluation_readme_documents_its_own_flags():
    from evaluation.judges import HttpJudgeOptions, LikelihoodOptions
    from evaluation.run import EvaluationOptions

    # the in-process judge's flags are serving's (its README)
    flags = flags_of((EvaluationOptions, HttpJudgeOptions, LikelihoodOptions))
    assert undocumented(flags, REPO_ROOT / "evaluation" / "README.md") == set()


def test_the_data_prep_readme_documents_every_flag():
    from data_prep.cli import COMMANDS as DATA_PREP_COMMANDS

    flags = set().union(*(flags_of(command.config_classes) for command in DATA_PREP_COMMANDS))
    assert undocumented(flags, REPO_ROOT / "data_prep" / "README.md") == set()
