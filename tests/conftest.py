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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """End-to-end modules first, each module's tests kept together and in order: `make test` hands whole
    modules to its workers in this order, so the longest start first instead of one of them running alone
    at the end."""
    slow_modules = {item.path for item in items if item.get_closest_marker("e2e")}
    items.sort(key=lambda item: item.path not in slow_modules)


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
