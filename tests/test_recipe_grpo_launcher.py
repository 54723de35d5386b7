"""The GRPO judge launchers without training: every knob reaches the final config, the GPU path uses vLLM, CPU mode
its overrides, the Ray rule (submit / local) holds, a submission is refused before it starts when the cluster
lacks what the run asks for, bad settings stop with a message naming the key and its knob whichever layer gave
them, and the export gets the values the training used. --help and --dry-run go through bash; the rest drives
the launchers' Python side in process (tests.grpo_recipe.launch_in_python), which is what bash execs."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading

import pytest
import yaml
from omegaconf import OmegaConf

from tests.conftest import REPO_ROOT
from tests.grpo_recipe import (
    GRPO_DIR,
    LAUNCHERS,
    REWARD_FUNCTIONS,
    dry_run_commands,
    launch_error,
    launch_in_python,
    launcher_env,
    listens,
    processes_mentioning,
    ray_head,
    run_launcher,
    stand_in_dashboard,
)
from tests.launcher_helpers import pretend_flash_attention
from training.launch import ray_cluster
from training.launch.grpo import AT_THE_END_ONLY, local_ray_env

CPU_SITE = str(REPO_ROOT / "training" / "cpu_site")
ROLLOUT = "actor_rollout_ref.rollout"
ACTOR = "actor_rollout_ref.actor"


@pytest.fixture(scope="module")
def data_files(tmp_path_factory):
    directory = tmp_path_factory.mktemp("grpo_dry_run")
    for name in ("train.parquet", "val.parquet"):
        (directory / name).write_bytes(b"")  # a launch without training only checks that the files exist
    return {"TRAIN_FILE": directory / "train.parquet", "VAL_FILE": directory / "val.parquet"}


def value(launch, key):
    return OmegaConf.select(launch.config, key)


def gpu_launch(data_files, monkeypatch, *args, mode="pointwise", flash_attention=True, **knobs):
    """A launch as on a GPU machine (trainer.device=cuda), on a private local Ray unless told otherwise."""
    pretend_flash_attention(monkeypatch, flash_attention)
    env = launcher_env(**{"RAY_MODE": "local", **data_files, **knobs})
    return launch_in_python(mode, "trainer.device=cuda", *args, env=env, monkeypatch=monkeypatch)


def cpu_launch(data_files, monkeypatch, *args, mode="pointwise", **knobs):
    env = launcher_env(**{"RAY_MODE": "local", **data_files, **knobs})
    return launch_in_python(mode, "trainer.device=cpu", *args, env=env, monkeypatch=monkeypatch)


# --- a stand-in Ray dashboard: what a submission is checked against ---------------------------------------------


@pytest.fixture
def dashboard(request):
    server = stand_in_dashboard(getattr(request, "param", [{"CPU": 16.0, "GPU": 8.0}]))
    yield from serve_in_thread(server)


@pytest.fixture
def slow_dashboard():
    """A CPU-mode cluster's dashboard that answers GET /api/version after longer than a quick probe waits."""
    nodes = [{"CPU": 4.0, "GPU": 1.0, "cpu": 1.0}]
    yield from serve_in_thread(stand_in_dashboard(nodes, version_delay_s=ray_cluster.PROBE_TIMEOUT_S + 2))


def serve_in_thread(server):
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def closed_port_address() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


# --- through bash: --help and --dry-run ---------------------------------------------------------------------------


def test_help_lists_the_seed_knobs_with_their_gpu_defaults():
    result = run_launcher("pointwise", "--help", env=launcher_env())
    assert result.returncode == 0, result.stderr
    for knob, default in [
        ("MODEL_PATH", "Qwen/Qwen3-8B"),
        ("RAY_ADDRESS", "http://127.0.0.1:8265"),
        ("N_GPUS_PER_NODE", "8"),
        ("TRAIN_BATCH_SIZE", "96"),
        ("ROLLOUT_N", "4"),
        ("KL_LOSS_COEF", "0.001"),
    ]:
        assert any(line.split()[:2] == [knob, default] for line in result.stdout.splitlines()), knob


def test_cpu_dry_run_prints_a_local_run_on_the_snapshot_and_starts_nothing(data_files, tmp_path):
    save_dir = tmp_path / "save"
    env = launcher_env(RAY_MODE="local", SAVE_DIR=save_dir, **data_files)
    trainer, export = dry_run_commands(run_launcher("pointwise", "--dry-run", "trainer.device=cpu", env=env))
    assert trainer[trainer.index("env") :][:3] == ["env", "-u", "RAY_ADDRESS"]
    assert "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0" in trainer
    start = trainer.index("python")
    assert trainer[start : start + 7] == [
        "python", "-m", "verl.trainer.main_ppo", "--config-path", str(save_dir / "launch"), "--config-name", "config",
    ]  # fmt: skip
    assert "+ray_kwargs.ray_init.address=local" in trainer
    assert "+ray_kwargs.ray_init.include_dashboard=false" in trainer  # nothing listens on RAY_ADDRESS's port
    assert trainer >= ["+ray_kwargs.ray_init.num_gpus=1", "+ray_kwargs.ray_init.resources={cpu:1}"]
    assert export[:4] == ["python", "-m", "training.export", "causal-lm"]
    assert export[export.index("--dtype") + 1] == "fp32"
    assert not save_dir.exists()


def test_cpu_mode_gives_each_ray_worker_its_share_of_the_cores_unless_omp_num_threads_is_set(data_files):
    cores = len(os.sched_getaffinity(0))
    env = launcher_env(RAY_MODE="local", **data_files)
    del env["OMP_NUM_THREADS"]
    for workers in (1, 2):
        result = run_launcher("pointwise", "--dry-run", f"trainer.n_gpus_per_node={workers}", env=env)
        (trainer, _) = dry_run_commands(result)
        assert f"OMP_NUM_THREADS={max(1, cores // workers)}" in trainer[: trainer.index("python")]
    (trainer, _) = dry_run_commands(run_launcher("pointwise", "--dry-run", env={**env, "OMP_NUM_THREADS": "3"}))
    assert not any(arg.startswith("OMP_NUM_THREADS=") for arg in trainer)  # the set value is inherited


RAY_WORKER_THREADS = """
import sys
import ray, torch
ray.init(address="local", include_dashboard=False, num_cpus=4, _temp_dir=sys.argv[1])

@ray.remote  # like verl's workers: no num_cpus, so Ray would give it OMP_NUM_THREADS=1
class Worker:
    def threads(self):
        return torch.get_num_threads()

print(ray.get(Worker.remote().threads.remote()))
ray.shutdown()
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one core: a worker has one thread either way")
def test_a_local_ray_worker_in_cpu_mode_uses_every_core(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # the launcher's own environment, as a user's shell has it
    config = OmegaConf.create({"trainer": {"device": "cpu", "n_gpus_per_node": 1}})
    env = {key: value for key, value in launcher_env().items() if key != "OMP_NUM_THREADS"}
    env.update(local_ray_env(config))
    with tempfile.TemporaryDirectory(prefix="rayt", dir="/tmp") as ray_tmpdir:
        result = subprocess.run(
            [sys.executable, "-c", RAY_WORKER_THREADS, ray_tmpdir], env=env, capture_output=True, text=True, timeout=120
        )
        assert processes_mentioning(ray_tmpdir) == [], "a Ray process outlived the driver"
    assert result.returncode == 0, result.stderr[-2000:]
    assert int(result.stdout.split()[-1]) == len(os.sched_getaffinity(0))


def test_pointwise_and_pairwise_differ_only_in_their_mode(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("recipes")  # a folder whose name holds neither mode
    for mode in ("pointwise", "pairwise"):
        (tmp_path / "data" / "grpo" / mode).mkdir(parents=True)
        for split in ("train", "val"):
            (tmp_path / "data" / "grpo" / mode / f"{split}.parquet").write_bytes(b"")
    commands = {}
    for mode in ("pointwise", "pairwise"):
        result = run_launcher(mode, "--dry-run", env=launcher_env(RAY_MODE="local"), cwd=tmp_path)
        commands[mode] = [[arg.replace(mode, "MODE") for arg in command] for command in dry_run_commands(result)]
    assert commands["pointwise"] == commands["pairwise"]
    assert f"{tmp_path}/checkpoints/grpo/MODE/launch" in commands["pointwise"][0]


def test_launchers_are_one_screen_of_knobs_and_one_command():
    for mode in ("pointwise", "pairwise"):
        lines = LAUNCHERS[mode].read_text().splitlines()
        code = [line for line in lines if line.strip() and not line.startswith("#")]
        assert len(lines) <= 60
        assert code[0] == "set -euo pipefail"
        assert code[code.index(next(line for line in code if line.startswith("exec ")))] == (
            f'exec python -m training.launch grpo-{mode} "$0" \\'
        )
        assert code[-1].strip() == '"$@"'


# --- the final config -------------------------------------------------------------------------------------------


def test_gpu_config_uses_vllm_and_the_recipe_fixes(data_files, monkeypatch):
    launch = gpu_launch(data_files, monkeypatch)
    expected = {
        f"{ROLLOUT}.name": "vllm",
        f"{ROLLOUT}.mode": "sync",
        f"{ROLLOUT}.gpu_memory_utilization": 0.6,
        f"{ROLLOUT}.tensor_model_parallel_size": 2,
        "actor_rollout_ref.model.use_remove_padding": True,
        "actor_rollout_ref.ref.fsdp_config.param_offload": True,
        "trainer.device": "cuda",
        "algorithm.adv_estimator": "grpo",
        "algorithm.use_kl_in_reward": False,
        f"{ACTOR}.use_kl_loss": True,
        f"{ACTOR}.kl_loss_type": "low_var_kl",
        "trainer.critic_warmup": 0,
        "reward_model.enable": False,
        "reward_model.reward_manager": "naive",
        "custom_reward_function.path": str(REPO_ROOT / "judge_core" / "grpo_rewards.py"),
        "custom_reward_function.name": REWARD_FUNCTIONS["pointwise"],
        "actor_rollout_ref.model.lora_rank": 0,
    }
    assert {key: value(launch, key) for key in expected} == expected
    trainer = launch.command("train")
    assert not any("ray_init.num_gpus" in arg for arg in trainer)  # Ray finds the GPUs itself
    assert "PYTHONPATH" not in " ".join(trainer)
    export = launch.command("export")
    assert export[export.index("--dtype") + 1] == "bf16"


def test_seed_defaults(data_files, monkeypatch):
    launch = gpu_launch(data_files, monkeypatch)
    expected = {
        "actor_rollout_ref.model.path": "Qwen/Qwen3-8B",
        "launch.ray_address": "http://127.0.0.1:8265",
        "trainer.n_gpus_per_node": 8,
        "data.train_batch_size": 96,
        f"{ROLLOUT}.n": 4,
        f"{ACTOR}.kl_loss_coef": 0.001,
    }
    assert {key: value(launch, key) for key in expected} == expected


def test_cpu_mode_overrides(data_files, monkeypatch):
    launch = cpu_launch(data_files, monkeypatch)
    expected = {
        "trainer.n_gpus_per_node": 1,
        f"{ROLLOUT}.name": "hf",
        f"{ROLLOUT}.load_format": "hf",
        f"{ROLLOUT}.mode": "sync",
        f"{ROLLOUT}.tensor_model_parallel_size": 1,
        "actor_rollout_ref.model.use_remove_padding": False,
        "actor_rollout_ref.model.override_config.attn_implementation": "sdpa",
        f"{ACTOR}.fsdp_config.dtype": "float32",
        "actor_rollout_ref.ref.fsdp_config.dtype": "float32",
        "actor_rollout_ref.ref.fsdp_config.model_dtype": "fp32",
        "data.dataloader_num_workers": 0,
    }
    assert {key: value(launch, key) for key in expected} == expected


KNOB_EFFECTS = [
    ({"MODEL_PATH": "org/judge-base"}, {"actor_rollout_ref.model.path": "org/judge-base"}),
    ({"N_GPUS_PER_NODE": "4"}, {"trainer.n_gpus_per_node": 4}),
    ({"TRAIN_BATCH_SIZE": "48"}, {"data.train_batch_size": 48}),
    ({"PPO_MINI_BATCH_SIZE": "12"}, {f"{ACTOR}.ppo_mini_batch_size": 12}),
    ({"MICRO_BATCH_SIZE": "2"}, {f"{ACTOR}.ppo_micro_batch_size_per_gpu": 2}),
    ({"ROLLOUT_N": "8"}, {f"{ROLLOUT}.n": 8}),
    ({"KL_LOSS_COEF": "0.02"}, {f"{ACTOR}.kl_loss_coef": 0.02}),
    ({"LR": "3e-6"}, {f"{ACTOR}.optim.lr": 3e-6}),
    ({"MAX_PROMPT_LENGTH": "1024"}, {"data.max_prompt_length": 1024}),
    ({"MAX_RESPONSE_LENGTH": "512"}, {"data.max_response_length": 512}),
    ({"TOTAL_EPOCHS": "3"}, {"trainer.total_epochs": 3}),
    ({"TOTAL_TRAINING_STEPS": "7"}, {"trainer.total_training_steps": 7}),
    ({"SAVE_FREQ": "10", "TEST_FREQ": "2"}, {"trainer.save_freq": 10, "trainer.test_freq": 2}),
    ({"SAVE_DIR": "/tmp/grpo-save"}, {"trainer.default_local_dir": "/tmp/grpo-save"}),
]


@pytest.mark.parametrize("knobs, expected", KNOB_EFFECTS, ids=[",".join(k) for k, _ in KNOB_EFFECTS])
def test_every_knob_takes_effect(data_files, monkeypatch, knobs, expected):
    launch = gpu_launch(data_files, monkeypatch, **knobs)
    assert {key: value(launch, key) for key in expected} == expected


def test_the_rollout_settings_without_knobs_are_the_recipe_yamls_and_overridable(data_files, monkeypatch):
    defaults = gpu_launch(data_files, monkeypatch)
    assert {
        key: value(defaults, key)
        for key in (
            f"{ROLLOUT}.name",
            f"{ROLLOUT}.tensor_model_parallel_size",
            f"{ROLLOUT}.gpu_memory_utilization",
            f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu",
            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
            "actor_rollout_ref.model.lora_rank",
        )
    } == {
        f"{ROLLOUT}.name": "vllm",
        f"{ROLLOUT}.tensor_model_parallel_size": 2,
        f"{ROLLOUT}.gpu_memory_utilization": 0.6,
        f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu": 2,
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": 2,
        "actor_rollout_ref.model.lora_rank": 0,
    }
    changed = gpu_launch(
        data_files,
        monkeypatch,
        f"{ROLLOUT}.name=sglang",
        f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.model.lora_rank=16",
        "launch.export_dir=none",
    )
    assert value(changed, f"{ROLLOUT}.name") == "sglang"
    assert value(changed, "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu") == 8  # follows the rollout's
    assert value(changed, "actor_rollout_ref.model.lora_rank") == 16


def test_a_frequency_of_minus_one_means_at_the_end_only(data_files, monkeypatch):
    launch = cpu_launch(data_files, monkeypatch, SAVE_FREQ="-1", TEST_FREQ="3")
    trainer = launch.command("train")
    assert f"trainer.save_freq={AT_THE_END_ONLY}" in trainer
    assert not any(arg.startswith("trainer.test_freq=") for arg in trainer)  # the snapshot's 3 stands


def test_relative_paths_become_absolute(data_files, monkeypatch, tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    for name in ("t.parquet", "v.parquet"):
        (tmp_path / name).write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    launch = cpu_launch(
        {}, monkeypatch, "trainer.validation_data_dir=s/validation", MODEL_PATH="./model", TRAIN_FILE="t.parquet",
        VAL_FILE="v.parquet", SAVE_DIR="s",
    )  # fmt: skip
    assert (value(launch, "data.train_files"), value(launch, "actor_rollout_ref.model.path")) == (
        str(tmp_path / "t.parquet"),
        str(tmp_path / "model"),
    )
    assert value(launch, "trainer.validation_data_dir") == str(tmp_path / "s" / "validation")
    assert value(launch, "launch.export_dir") == str(tmp_path / "s" / "hf")


# --- the export gets the values the training used -----------------------------------------------------------------


def test_the_export_gets_the_values_the_training_used(data_files, monkeypatch, tmp_path):
    model = tmp_path / "override-model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    train = tmp_path / "override-train.parquet"
    train.write_bytes(b"")
    config_file = tmp_path / "run.yaml"
    config_file.write_text(yaml.safe_dump({"trainer": {"default_local_dir": str(tmp_path / "from-file")}}))
    monkeypatch.setenv("JUDGE_CPU_DTYPE", "bf16")
    env = launcher_env(RAY_MODE="local", JUDGE_CPU_DTYPE="bf16", **data_files)
    launch = launch_in_python(
        "pairwise",
        "--config",
        str(config_file),
        "trainer.device=cpu",
        f"actor_rollout_ref.model.path={model}",
        f"data.train_files={train}",
        env=env,
        monkeypatch=monkeypatch,
    )
    export = launch.command("export")
    assert export[4:6] == [str(tmp_path / "from-file"), str(tmp_path / "from-file" / "hf")]
    flags = {export[index]: export[index + 1] for index in range(6, len(export) - 1, 2)}
    assert flags == {
        "--dtype": "bf16",  # the actor's training dtype (CPU mode with JUDGE_CPU_DTYPE=bf16)
        "--recipe": "grpo-pairwise",
        "--base-model": str(model),
        "--train-file": str(train),
        "--prompt-format": "pairwise",  # judge.json records the template learned
    }


def test_export_dir_none_means_no_export(data_files, monkeypatch):
    assert cpu_launch(data_files, monkeypatch, "launch.export_dir=none").command("export") is None


# --- where it runs ------------------------------------------------------------------------------------------------


def test_a_local_run_is_started_again_when_its_ray_node_does_not_register(data_files, monkeypatch):
    train = next(command for command in cpu_launch(data_files, monkeypatch).commands if command.name == "train")
    assert train.start_again == ray_cluster.LOCAL_START_AGAIN


@pytest.mark.parametrize("dashboard", [[{"CPU": 4.0, "GPU": 1.0, "cpu": 1.0}]], indirect=True)
def test_a_submitted_run_is_started_once(data_files, monkeypatch, dashboard):
    """Its driver joins a running node, which does not wait for a registration."""
    launch = cpu_launch(data_files, monkeypatch, RAY_MODE="submit", RAY_ADDRESS=dashboard)
    assert next(command for command in launch.commands if command.name == "train").start_again is None


@pytest.mark.parametrize("dashboard", [[{"CPU": 4.0, "GPU": 1.0, "cpu": 1.0}]], indirect=True)
def test_auto_submits_when_a_cluster_answers(data_files, monkeypatch, dashboard):
    env = launcher_env(RAY_ADDRESS=dashboard, **data_files)
    launch = launch_in_python("pointwise", "trainer.device=cpu", env=env, monkeypatch=monkeypatch)
    assert any("submitting the training as a Ray job" in note for note in launch.notes)
    trainer = launch.command("train")
    assert trainer[:3] == ["ray", "job", "submit"] and trainer[trainer.index("--address") + 1] == dashboard
    env_vars = json.loads(trainer[trainer.index("--runtime-env-json") + 1])["env_vars"]
    assert env_vars == {"PYTHONPATH": f"{CPU_SITE}:{REPO_ROOT}", "JUDGE_CPU_DTYPE": "fp32"}
    # the cluster declares its own resources: ray.init inside the job only connects
    assert not any("ray_kwargs" in arg for arg in trainer)
    assert trainer[trainer.index("--") + 1 :][:3] == ["python", "-m", "verl.trainer.main_ppo"]


def test_gpu_submission_carries_the_repository(data_files, monkeypatch, dashboard):
    launch = gpu_launch(data_files, monkeypatch, RAY_MODE="submit", RAY_ADDRESS=dashboard)
    trainer = launch.command("train")
    assert json.loads(trainer[trainer.index("--runtime-env-json") + 1]) == {"env_vars": {"PYTHONPATH": str(REPO_ROOT)}}


@pytest.mark.parametrize("dashboard", [None], indirect=True)
def test_a_cluster_with_token_authentication_counts_as_answering(data_files, monkeypatch, dashboard):
    message = launch_error(
        "pointwise",
        "trainer.device=cpu",
        env=launcher_env(RAY_ADDRESS=dashboard, **data_files),
        monkeypatch=monkeypatch,
    )
    assert f"the Ray cluster at {dashboard} did not list its nodes" in message  # it was asked: it answered


@pytest.mark.parametrize("dashboard", [[{"CPU": 4.0, "GPU": 1.0}]], indirect=True)
def test_a_cpu_submission_needs_the_cpu_resource(data_files, monkeypatch, dashboard):
    env = launcher_env(RAY_MODE="submit", RAY_ADDRESS=dashboard, **data_files)
    message = launch_error("pointwise", "trainer.device=cpu", env=env, monkeypatch=monkeypatch)
    assert "the cluster's nodes declare: GPU 1, CPU 4, cpu 0" in message
    assert """--num-gpus=1 --resources='{"cpu": 1}'""" in message


def test_auto_waits_for_a_set_address_that_answers_slowly(data_files, monkeypatch, slow_dashboard):
    env = launcher_env(RAY_ADDRESS=slow_dashboard, **data_files)
    launch = launch_in_python("pointwise", "trainer.device=cpu", env=env, monkeypatch=monkeypatch)
    assert any("submitting the training as a Ray job" in note for note in launch.notes)


@pytest.mark.parametrize("dashboard", [[]], indirect=True)
def test_a_cluster_whose_head_never_registers_is_refused_after_the_wait(data_files, monkeypatch, dashboard):
    monkeypatch.setattr(ray_cluster, "REGISTRATION_WAIT_S", 1)
    env = launcher_env(RAY_ADDRESS=dashboard, **data_files)
    message = launch_error("pointwise", "trainer.device=cpu", env=env, monkeypatch=monkeypatch)
    assert "the cluster's nodes declare: no live node (none registered within 1 s)" in message


def test_auto_refuses_a_set_address_where_nothing_answers(data_files, monkeypatch):
    address = closed_port_address()
    message = launch_error("pointwise", env=launcher_env(RAY_ADDRESS=address, **data_files), monkeypatch=monkeypatch)
    assert message.startswith(f"launch.ray_address (RAY_ADDRESS) = {address}: no Ray cluster answers there")


def test_auto_refuses_an_address_given_as_an_argument_where_nothing_answers(data_files, monkeypatch):
    """An address from the command line (or a --config file) is as deliberate as RAY_ADDRESS: no silent local run."""
    address = closed_port_address()
    env = launcher_env(**data_files)
    message = launch_error("pointwise", f"launch.ray_address={address}", env=env, monkeypatch=monkeypatch)
    assert message.startswith(f"launch.ray_address (RAY_ADDRESS) = {address}: no Ray cluster answers there")


def test_auto_without_an_address_runs_locally_when_the_default_is_silent(data_files, monkeypatch):
    if listens(8265):
        pytest.skip("something listens on the default Ray dashboard port 127.0.0.1:8265")
    launch = launch_in_python(
        "pointwise", "trainer.device=cpu", env=launcher_env(**data_files), monkeypatch=monkeypatch
    )
    assert any("starting a local Ray instance for this run" in note for note in launch.notes)
    assert "+ray_kwargs.ray_init.address=local" in launch.command("train")


@pytest.mark.e2e
def test_a_ray_start_cluster_without_gpus_is_refused_before_submitting(data_files):
    """The seed's own flow on a laptop: `ray start --head` declares no GPUs; verl would fail 27 s after the
    submission (`Total available GPUs 0 is less than total desired GPUs 1`). The launcher asks the cluster first."""
    with (
        tempfile.TemporaryDirectory(prefix="rayc", dir="/tmp") as ray_tmpdir,
        ray_head(ray_tmpdir, "--num-cpus=2") as address,
    ):
        env = launcher_env(RAY_ADDRESS=address, **data_files)
        result = run_launcher("pairwise", "trainer.device=cpu", env=env)
    assert result.returncode == 2, result.stderr
    assert f"the Ray cluster at {address} cannot run this job" in result.stderr
    assert "GPU 0" in result.stderr and "cpu 0" in result.stderr
    assert (
        """ray start --head --dashboard-host=127.0.0.1 --num-cpus=4 --num-gpus=1 --resources='{"cpu": 1}'"""
        in result.stderr
    )
    assert "ray job submit" not in result.stdout


# --- bad settings: the same message from a knob and from an override ---------------------------------------------


BAD_SETTINGS = [
    ({"TRAIN_BATCH_SIZE": "50"}, "data.train_batch_size (TRAIN_BATCH_SIZE) = 50: must be a multiple of"),
    ({"ROLLOUT_N": "1"}, f"{ROLLOUT}.n (ROLLOUT_N) = 1: must be an integer >= 2"),
    (
        {"MICRO_BATCH_SIZE": "5", "PPO_MINI_BATCH_SIZE": "4", "TRAIN_BATCH_SIZE": "4"},
        f"{ACTOR}.ppo_micro_batch_size_per_gpu (MICRO_BATCH_SIZE) = 5: must divide the 16 answers",
    ),
    ({"RAY_ADDRESS": "127.0.0.1:8265"}, "launch.ray_address (RAY_ADDRESS) = 127.0.0.1:8265: must be a Ray dashboard"),
    ({"RAY_MODE": "cluster"}, "launch.ray_mode (RAY_MODE) = cluster: must be one of: auto, submit, local"),
    ({"NNODES": "2"}, "trainer.nnodes (NNODES) = 2: more than one node needs a Ray cluster"),
    ({"SAVE_FREQ": "0"}, "trainer.save_freq (SAVE_FREQ) = 0: must be -1 or an integer >= 1"),
    ({"MODEL_PATH": "./no/such/model"}, "actor_rollout_ref.model.path (MODEL_PATH) = ./no/such/model: not a model"),
    ({"TRAIN_FILE": "/no/such/train.parquet"}, "data.train_files (TRAIN_FILE) = /no/such/train.parquet: no such file"),
]


@pytest.mark.parametrize("knobs, message", BAD_SETTINGS, ids=[",".join(k) for k, _ in BAD_SETTINGS])
def test_bad_knobs_stop_before_anything_starts(data_files, monkeypatch, knobs, message):
    assert message in launch_error(
        "pointwise",
        "trainer.device=cpu",
        env=launcher_env(**{"RAY_MODE": "local", **data_files, **knobs}),
        monkeypatch=monkeypatch,
    )


BAD_OVERRIDES = [
    ("actor_rollout_ref.model.lora_rank=8", "actor_rollout_ref.model.lora_rank = 8: the CPU-mode HF rollout"),
    (f"{ROLLOUT}.name=vllm", f"{ROLLOUT}.name = vllm: must be one of: hf"),
    (f"{ROLLOUT}.gpu_memory_utilization=1.5", f"{ROLLOUT}.gpu_memory_utilization = 1.5: must be"),
]


@pytest.mark.parametrize("override, message", BAD_OVERRIDES, ids=[o.partition("=")[0] for o, _ in BAD_OVERRIDES])
def test_bad_settings_without_knobs_stop_before_anything_starts(data_files, monkeypatch, override, message):
    env = launcher_env(RAY_MODE="local", **data_files)
    assert message in launch_error("pointwise", "trainer.device=cpu", override, env=env, monkeypatch=monkeypatch)


def test_an_override_of_a_checked_key_is_refused_with_the_knobs_message(data_files, monkeypatch):
    env = launcher_env(RAY_MODE="local", **data_files)
    from_override = launch_error(
        "pointwise", "trainer.device=cpu", "data.train_batch_size=7", env=env, monkeypatch=monkeypatch
    )
    env_knob = launcher_env(RAY_MODE="local", TRAIN_BATCH_SIZE="7", **data_files)
    from_knob = launch_error("pointwise", "trainer.device=cpu", env=env_knob, monkeypatch=monkeypatch)
    assert from_override == from_knob
    assert from_override.startswith(
        f"data.train_batch_size (TRAIN_BATCH_SIZE) = 7: must be a multiple of {ACTOR}.ppo_mini_batch_size"
    )


BAD_OVERRIDES = [
    ("trainer.logger=[console,file]", "file logger crashes"),
    ("trainer.logger=[console,nope]", "trainer.logger = [console,nope]: 'nope' is not one of"),
    (f"{ACTOR}.strategy=ddp", f"{ACTOR}.strategy = ddp: must be one of: fsdp, fsdp2"),
]


@pytest.mark.parametrize("override, message", BAD_OVERRIDES)
def test_bad_overrides_stop_before_anything_starts(data_files, monkeypatch, override, message):
    assert message in launch_error(
        "pointwise",
        "trainer.device=cpu",
        override,
        env=launcher_env(RAY_MODE="local", **data_files),
        monkeypatch=monkeypatch,
    )


def test_bad_settings_print_no_command_through_bash(data_files):
    result = run_launcher(
        "pointwise", "--dry-run", "trainer.device=cpu", env=launcher_env(RAY_MODE="local", ROLLOUT_N="1", **data_files)
    )
    assert result.returncode == 2 and result.stdout == ""
    assert f"{ROLLOUT}.n (ROLLOUT_N) = 1: must be an integer >= 2" in result.stderr


def test_lora_runs_are_not_exported(data_files, monkeypatch):
    message = launch_error(
        "pointwise",
        "trainer.device=cuda",
        "actor_rollout_ref.model.lora_rank=16",
        env=launcher_env(RAY_MODE="local", **data_files),
        monkeypatch=monkeypatch,
    )
    assert "set launch.export_dir to none" in message


def test_a_gpu_without_flash_attention_gets_sdpa_and_keeps_the_padding(data_files, monkeypatch):
    launch = gpu_launch(data_files, monkeypatch, flash_attention=False)
    model = "actor_rollout_ref.model"
    assert value(launch, f"{model}.use_remove_padding") is False
    assert value(launch, f"{model}.override_config.attn_implementation") == "sdpa"
    env = launcher_env(RAY_MODE="local", **data_files)
    refusals = {
        f"{model}.use_remove_padding=true": "needs flash-attn: flash-attn is not installed here; use false",
        f"{model}.override_config.attn_implementation=flash_attention_2": "flash-attn is not installed here; use sdpa",
    }
    for setting, message in refusals.items():
        pretend_flash_attention(monkeypatch, installed=False)
        assert message in launch_error("pointwise", "trainer.device=cuda", setting, env=env, monkeypatch=monkeypatch)


def test_gpu_rollout_tp_must_divide_the_gpus(data_files, monkeypatch):
    message = launch_error(
        "pointwise",
        "trainer.device=cuda",
        f"{ROLLOUT}.tensor_model_parallel_size=3",
        env=launcher_env(RAY_MODE="local", **data_files),
        monkeypatch=monkeypatch,
    )
    assert message.startswith("trainer.n_gpus_per_node (N_GPUS_PER_NODE) = 8: must be a multiple of")


def test_the_laptop_config_is_the_grpo_readmes(data_files, monkeypatch, tiny_model_dir):
    """configs/cpu_tiny.yaml's first line is its command; its keys are this recipe's."""
    config = GRPO_DIR / "configs" / "cpu_tiny.yaml"
    assert config.read_text().splitlines()[0] == "# bash pointwise/run_pointwise.sh --config configs/cpu_tiny.yaml"
    env = launcher_env(RAY_MODE="local", **data_files)
    launch = launch_in_python(
        "pairwise",
        "--config",
        str(config),
        f"actor_rollout_ref.model.path={tiny_model_dir}",
        env=env,
        monkeypatch=monkeypatch,
    )
    assert (value(launch, "data.train_batch_size"), value(launch, "trainer.total_training_steps")) == (4, 2)
