"""The environments of frameworks/environments.py: the compatibility table of judge_rewards/README.md names exactly
the RL trainers' environments the runner runs, serving/README.md the serving ones, and each lock holds what its
entry declares."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from frameworks.environments import ENVIRONMENTS, TEST_REQUIRES, TORCH_SPEC, lock_path
from tests.conftest import REPO_ROOT

README = REPO_ROOT / "judge_rewards" / "README.md"
MAIN = "main"
PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>\S+)")


def table_rows() -> list[dict[str, str]]:
    """The compatibility table's rows, by column name."""
    section = README.read_text().split("### Compatibility\n", 1)[1].split("\n### ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    return [dict(zip(header, (cell.strip() for cell in line.strip("|").split("|")), strict=True)) for line in lines[2:]]


def listed_tests(row: dict[str, str]) -> list[str]:
    return re.findall(r"`(tests/[^`]+)`", row["tested by"])


def lock_pins(env) -> dict[str, str]:
    pins = {}
    for line in lock_path(env).read_text().splitlines():
        match = PIN.match(line)
        if match:
            pins[canonicalize_name(match["name"])] = match["version"]
    return pins


TRAINER_ENVIRONMENTS = [env for env in ENVIRONMENTS if not env.serves_judge]
SERVING_ENVIRONMENTS = [env for env in ENVIRONMENTS if env.serves_judge]
SERVING_README = REPO_ROOT / "serving" / "README.md"


def test_every_declared_environment_has_one_row_naming_its_trainer_version_and_tests():
    rows = {row["environment"]: row for row in table_rows() if row["environment"] != MAIN}
    assert sorted(rows) == sorted(env.name for env in TRAINER_ENVIRONMENTS)
    for env in TRAINER_ENVIRONMENTS:
        row = rows[env.name]
        assert f"{row['trainer'].lower()}-{row['version']}" == env.name
        assert listed_tests(row) == list(env.tests), f"{env.name}: the table lists other tests than the runner runs"


@pytest.mark.parametrize("env", SERVING_ENVIRONMENTS, ids=lambda env: env.name)
def test_the_serving_readme_names_each_serving_environment_and_its_tests(env):
    """A serving environment (the judge server on other versions) is documented where serving is, not in the
    trainers' table."""
    readme = SERVING_README.read_text()
    assert f"`{env.name}`" in readme
    assert all(f"`{test}`" in readme for test in env.tests)


@pytest.mark.parametrize("row", [row for row in table_rows() if row["environment"] == MAIN], ids=lambda r: r["trainer"])
def test_the_main_environment_rows_name_the_installed_version_and_tests_it_collects(row):
    assert importlib.metadata.version(row["trainer"].lower()) == row["version"]
    for test in listed_tests(row):
        assert (REPO_ROOT / test).is_file() and not test.startswith("tests/frameworks/")


@pytest.mark.parametrize("env", ENVIRONMENTS, ids=lambda env: env.name)
def test_each_lock_pins_what_its_environment_requires(env):
    pins = lock_pins(env)
    for text in (*env.requires, *TEST_REQUIRES, TORCH_SPEC, *env.without_dependencies):
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{lock_path(env).name} does not pin {requirement}: run make framework-lock"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"{lock_path(env).name} pins {name}=={pins[name]}, which {requirement} excludes: run make framework-lock"
        )
    for package in env.left_out:
        assert canonicalize_name(package) not in pins


def test_the_runner_lists_every_environment_and_its_tests():
    command = [sys.executable, "frameworks/environments.py", "list"]
    listed = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout.splitlines()
    assert listed == [" ".join((env.name, *env.tests)) for env in ENVIRONMENTS]
    for env in ENVIRONMENTS:
        assert all((REPO_ROOT / test).is_file() for test in env.tests)
