"""Shared fixtures: the tiny model is built once per test session (a few seconds)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
# tests/frameworks/ runs inside the RL trainers' own environments (frameworks/environments.py sets
# JUDGE_FRAMEWORK_ENV), never in the main one.
collect_ignore = [] if os.environ.get("JUDGE_FRAMEWORK_ENV") else ["frameworks"]

# Ray's single-machine mode: every Ray process (including those that tests start in subprocesses)
# binds and advertises 127.0.0.1 instead of the machine's network address.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

# Each pytest-xdist worker's torch gets its share of the cores, as do the servers and trainers its tests start
# (they inherit it unless they set their own): two workers running two threads each on two cores wait on each
# other's OpenMP barriers. Beside a busy core, a SmolLM2 forward took 17.6 s on two threads, 10.1 s on one.
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    cores_per_worker = len(os.sched_getaffinity(0)) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    os.environ.setdefault("OMP_NUM_THREADS", str(max(cores_per_worker, 1)))


# The longest test modules, longest first (`make test` lists its slowest tests at the end). Whole modules go to
# the workers in collection order (--dist loadfile --no-loadscope-reorder): started first, none of them runs
# alone at the end while the other workers idle.
LONGEST_MODULES = (
    "test_recipe_grpo.py",
    "test_data_prep_smollm2.py",
    "test_recipe_bt.py",
    "test_bench_bt_throughput.py",
    "test_recipe_policy_grpo.py",
    "test_cpu_compat.py",
    "test_recipe_attributes.py",
    "test_bench_server_adapter.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest modules first, then the other end-to-end modules, then the rest; each module's tests
    stay together and in their order."""
    slow_modules = {item.path for item in items if item.get_closest_marker("e2e")}

    def rank(item: pytest.Item) -> tuple[int, int]:
        if item.path.name in LONGEST_MODULES:
            return 0, LONGEST_MODULES.index(item.path.name)
        return (1 if item.path in slow_modules else 2), 0

    items.sort(key=rank)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A random-init tiny Llama causal LM with a ChatML tokenizer (data_prep base-model tiny)."""
    from data_prep.base_models import build_tiny

    return build_tiny(tmp_path_factory.mktemp("tiny_model"), seed=0)


@pytest.fixture(scope="session")
def tiny_scalar_judge_dir(tiny_model_dir, tmp_path_factory) -> Path:
    """An untrained scalar judge on the tiny model, in the BT export format (data_prep.base_models)."""
    from tests.support.models import build_scalar_judge

    return build_scalar_judge(tiny_model_dir, tmp_path_factory.mktemp("tiny_scalar_judge"))


@pytest.fixture(scope="module")
def rule_judge_server(tmp_path_factory):
    """The project's real judge server with its rule judge, for one test module."""
    from tests.reward_adapter_servers import start_rule_server

    server = start_rule_server(tmp_path_factory.mktemp("rule_judge") / "server.log")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)
