"""The GRPO launchers without training: every knob reaches the command, the GPU path uses vLLM, the Ray
rule (submit / local) holds, bad inputs stop with a message naming the knob. Each case is a real
`bash .../run_*.sh --dry-run`."""

from __future__ import annotations

import http.server
import json
import socket
import threading

import pytest

from tests.conftest import REPO_ROOT
from tests.grpo_recipe import GRPO_DIR, REWARD_FUNCTIONS, dry_run_commands, launcher_env, run_launcher

CPU_SITE = str(REPO_ROOT / "training" / "cpu_site")
AT_THE_END_ONLY = "2147483647"


@pytest.fixture(scope="module")
def data_files(tmp_path_factory):
    directory = tmp_path_factory.mktemp("grpo_dry_run")
    for name in ("train.parquet", "val.parquet"):
        (directory / name).write_bytes(b"")  # a dry run only checks that the files exist
    return {"TRAIN_FILE": directory / "train.parquet", "VAL_FILE": directory / "val.parquet"}


def dry_run(mode="pointwise", *args, **knobs):
    return run_launcher(mode, "--dry-run", *args, env=launcher_env(**knobs))


def trainer_and_export(data_files, mode="pointwise", *args, **knobs):
    commands = dry_run_commands(dry_run(mode, *args, **{**data_files, **knobs}))
    trainer = commands[0]
    return trainer, (commands[1] if len(commands) > 1 else None)


def overrides(command: list[str]) -> dict[str, str]:
    return dict(arg.split("=", 1) for arg in command if "=" in arg and not arg.startswith("-"))


def test_gpu_dry_run_prints_the_vllm_overrides(data_files):
    trainer, export = trainer_and_export(data_files, DEVICE="cuda", RAY_MODE="submit")
    values = overrides(trainer)
    assert values["actor_rollout_ref.rollout.name"] == "vllm"
    assert values["actor_rollout_ref.rollout.mode"] == "sync"
    assert values["actor_rollout_ref.rollout.gpu_memory_utilization"] == "0.6"
    assert values["actor_rollout_ref.rollout.tensor_model_parallel_size"] == "2"
    assert values["actor_rollout_ref.model.use_remove_padding"] == "true"
    assert values["trainer.device"] == "cuda"
    assert not any("ray_kwargs" in key or "override_config" in key for key in values)
    runtime_env = json.loads(trainer[trainer.index("--runtime-env-json") + 1])
    assert runtime_env["env_vars"]["PYTHONPATH"] == str(REPO_ROOT)  # no CPU fixes on GPUs
    assert export[export.index("--dtype") + 1] == "bf16"


def test_seed_defaults(data_files):
    trainer, _ = trainer_and_export(data_files, DEVICE="cuda", RAY_MODE="submit")
    values = overrides(trainer)
    assert trainer[trainer.index("--address") + 1] == "http://127.0.0.1:8265"
    assert values["actor_rollout_ref.model.path"] == "Qwen/Qwen3-8B"
    assert values["trainer.n_gpus_per_node"] == "8"
    assert values["data.train_batch_size"] == "96"
    assert values["actor_rollout_ref.rollout.n"] == "4"
    assert values["actor_rollout_ref.actor.kl_loss_coef"] == "0.001"
    assert values["algorithm.adv_estimator"] == "grpo"
    assert values["actor_rollout_ref.actor.use_kl_loss"] == "true"
    assert values["trainer.critic_warmup"] == "0"


def test_help_lists_the_seed_knobs_with_their_gpu_defaults():
    result = run_launcher("pointwise", "--help", env=launcher_env(DEVICE="cuda"))
    assert result.returncode == 0
    for knob, default in [
        ("MODEL_PATH", "Qwen/Qwen3-8B"),
        ("RAY_ADDRESS", "http://127.0.0.1:8265"),
        ("N_GPUS_PER_NODE", "8"),
        ("TRAIN_BATCH_SIZE", "96"),
        ("ROLLOUT_N", "4"),
        ("KL_LOSS_COEF", "0.001"),
    ]:
        assert any(line.split()[:2] == [knob, default] for line in result.stdout.splitlines()), knob


KNOB_EFFECTS = [
    ({"MODEL_PATH": "org/judge-base"}, {"actor_rollout_ref.model.path": "org/judge-base"}),
    ({"NNODES": "2"}, {"trainer.nnodes": "2"}),
    ({"N_GPUS_PER_NODE": "4"}, {"trainer.n_gpus_per_node": "4"}),
    ({"TRAIN_BATCH_SIZE": "48"}, {"data.train_batch_size": "48"}),
    ({"PPO_MINI_BATCH_SIZE": "12"}, {"actor_rollout_ref.actor.ppo_mini_batch_size": "12"}),
    ({"MICRO_BATCH_SIZE": "2"}, {"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": "2"}),
    (
        {"LOG_PROB_MICRO_BATCH_SIZE": "8"},
        {
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": "8",
            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": "8",
        },
    ),
    ({"ROLLOUT_N": "8"}, {"actor_rollout_ref.rollout.n": "8"}),
    ({"KL_LOSS_COEF": "0.02"}, {"actor_rollout_ref.actor.kl_loss_coef": "0.02"}),
    ({"LR": "3e-6"}, {"actor_rollout_ref.actor.optim.lr": "3e-6"}),
    ({"MAX_PROMPT_LENGTH": "1024"}, {"data.max_prompt_length": "1024"}),
    ({"MAX_RESPONSE_LENGTH": "512"}, {"data.max_response_length": "512"}),
    ({"TOTAL_EPOCHS": "3"}, {"trainer.total_epochs": "3"}),
    ({"TOTAL_TRAINING_STEPS": "7"}, {"trainer.total_training_steps": "7"}),
    ({"SAVE_FREQ": "10"}, {"trainer.save_freq": "10"}),
    ({"SAVE_FREQ": "-1"}, {"trainer.save_freq": AT_THE_END_ONLY}),
    ({"TEST_FREQ": "-1"}, {"trainer.test_freq": AT_THE_END_ONLY}),
    ({"VAL_BEFORE_TRAIN": "true"}, {"trainer.val_before_train": "true"}),
    ({"ROLLOUT_ENGINE": "sglang"}, {"actor_rollout_ref.rollout.name": "sglang"}),
    ({"ROLLOUT_TP": "4"}, {"actor_rollout_ref.rollout.tensor_model_parallel_size": "4"}),
    ({"GPU_MEMORY_UTILIZATION": "0.8"}, {"actor_rollout_ref.rollout.gpu_memory_utilization": "0.8"}),
    (
        {"LORA_RANK": "16", "LORA_ALPHA": "8", "LORA_TARGET_MODULES": "[q_proj,v_proj]", "EXPORT_DIR": "none"},
        {
            "actor_rollout_ref.model.lora_rank": "16",
            "actor_rollout_ref.model.lora_alpha": "8",
            "actor_rollout_ref.model.target_modules": "[q_proj,v_proj]",
        },
    ),
    ({"STRATEGY": "fsdp"}, {"actor_rollout_ref.actor.strategy": "fsdp", "actor_rollout_ref.ref.strategy": "fsdp"}),
    ({"GRADIENT_CHECKPOINTING": "false"}, {"actor_rollout_ref.model.enable_gradient_checkpointing": "false"}),
    (
        {"OFFLOAD": "true"},
        {
            "actor_rollout_ref.actor.fsdp_config.param_offload": "true",
            "actor_rollout_ref.actor.fsdp_config.optimizer_offload": "true",
        },
    ),
    ({"LOGGER": "[console,tensorboard]"}, {"trainer.logger": "[console,tensorboard]"}),
    ({"PROJECT_NAME": "p1", "EXPERIMENT_NAME": "e1"}, {"trainer.project_name": "p1", "trainer.experiment_name": "e1"}),
    (
        {"SAVE_DIR": "/tmp/grpo-save"},
        {"trainer.default_local_dir": "/tmp/grpo-save", "hydra.run.dir": "/tmp/grpo-save/launch/hydra"},
    ),
]


@pytest.mark.parametrize("knobs, expected", KNOB_EFFECTS, ids=[",".join(k) for k, _ in KNOB_EFFECTS])
def test_every_knob_takes_effect(data_files, knobs, expected):
    trainer, _ = trainer_and_export(data_files, DEVICE="cuda", RAY_MODE="submit", **knobs)
    values = overrides(trainer)
    assert {key: values.get(key) for key in expected} == expected


def test_lora_is_off_by_default(data_files):
    trainer, _ = trainer_and_export(data_files, DEVICE="cuda", RAY_MODE="submit")
    assert not any("lora" in arg for arg in trainer)


def test_data_files_reward_and_address(data_files, tmp_path):
    train, val = tmp_path / "t.parquet", tmp_path / "v.parquet"
    train.write_bytes(b""), val.write_bytes(b"")
    trainer, export = trainer_and_export(
        data_files,
        "pairwise",
        DEVICE="cuda",
        RAY_MODE="submit",
        TRAIN_FILE=train,
        VAL_FILE=val,
        RAY_ADDRESS="http://10.0.0.7:8265",
    )
    values = overrides(trainer)
    assert (values["data.train_files"], values["data.val_files"]) == (str(train), str(val))
    assert values["custom_reward_function.path"] == str(REPO_ROOT / "judge_rewards" / "grpo_rewards.py")
    assert values["custom_reward_function.name"] == REWARD_FUNCTIONS["pairwise"]
    assert values["reward_model.reward_manager"] == "naive"
    assert trainer[trainer.index("--address") + 1] == "http://10.0.0.7:8265"
    assert export[:4] == ["python", "-m", "training.export", "causal-lm"]
    assert export[export.index("--recipe") + 1] == "grpo-pairwise"
    assert export[export.index("--prompt-format") + 1] == "pairwise"  # judge.json records the template learned


def test_export_dir_and_none(data_files, tmp_path):
    _, export = trainer_and_export(data_files, RAY_MODE="local", EXPORT_DIR=tmp_path / "judge")
    assert export[5] == str(tmp_path / "judge")
    assert trainer_and_export(data_files, RAY_MODE="local", EXPORT_DIR="none")[1] is None


def test_hydra_overrides_come_last(data_files):
    trainer, _ = trainer_and_export(data_files, "pointwise", "trainer.total_epochs=9", RAY_MODE="local")
    assert trainer[-1] == "trainer.total_epochs=9"


def test_cpu_local_run_declares_logical_gpus_and_stays_on_loopback(data_files):
    trainer, export = trainer_and_export(
        data_files, DEVICE="cpu", RAY_MODE="local", N_GPUS_PER_NODE="2", PPO_MINI_BATCH_SIZE="24"
    )
    values = overrides(trainer)
    assert trainer[:3] == ["env", "-u", "RAY_ADDRESS"]
    assert values["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0"
    assert values["PYTHONPATH"].split(":")[:2] == [str(REPO_ROOT), CPU_SITE]
    assert values["actor_rollout_ref.rollout.name"] == "hf"
    assert values["+ray_kwargs.ray_init.address"] == "local"
    assert values["+ray_kwargs.ray_init.include_dashboard"] == "false"  # nothing listens on RAY_ADDRESS's port
    assert values["+ray_kwargs.ray_init.num_gpus"] == "2"
    assert values["+ray_kwargs.ray_init.resources"] == "{cpu:2}"
    assert values["trainer.device"] == "cpu"
    assert export[export.index("--dtype") + 1] == "fp32"


def test_cpu_job_carries_the_cpu_mode_environment(data_files):
    trainer, _ = trainer_and_export(data_files, DEVICE="cpu", RAY_MODE="submit")
    start = trainer.index("ray")
    assert trainer[start : start + 3] == ["ray", "job", "submit"]
    env_vars = json.loads(trainer[trainer.index("--runtime-env-json") + 1])["env_vars"]
    assert env_vars == {"PYTHONPATH": f"{CPU_SITE}:{REPO_ROOT}", "JUDGE_CPU_DTYPE": "fp32"}
    # the cluster declares its own resources: ray.init inside the job only connects
    assert not any("ray_kwargs" in arg for arg in trainer)
    assert trainer[trainer.index("--") + 1 :][:3] == ["python", "-m", "verl.trainer.main_ppo"]


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
    trainer = overrides(commands["pointwise"][0])
    assert trainer["data.train_files"] == f"{tmp_path}/data/grpo/MODE/train.parquet"
    assert trainer["custom_reward_function.name"] == "compute_MODE_score"


def test_dry_run_writes_nothing(data_files, tmp_path):
    dry_run_commands(dry_run(SAVE_DIR=tmp_path / "save", RAY_MODE="local", **data_files))
    assert not (tmp_path / "save").exists()


@pytest.fixture
def fake_dashboard():
    """An HTTP server that answers like a Ray dashboard with token authentication: 401."""

    class Unauthorized(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(401)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Unauthorized)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def closed_port_address() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_auto_submits_when_a_cluster_answers(data_files, fake_dashboard):
    result = dry_run(RAY_ADDRESS=fake_dashboard, **data_files)
    trainer = dry_run_commands(result)[0]
    assert "submitting the training as a Ray job" in result.stderr
    assert trainer[trainer.index("--address") + 1] == fake_dashboard


def test_auto_refuses_a_set_address_where_nothing_answers(data_files):
    address = closed_port_address()
    result = dry_run(RAY_ADDRESS=address, **data_files)
    assert result.returncode == 2
    assert f"RAY_ADDRESS={address}: no Ray cluster answers there" in result.stderr


def test_auto_without_an_address_runs_locally_when_the_default_is_silent(data_files):
    with socket.socket() as sock:
        if sock.connect_ex(("127.0.0.1", 8265)) == 0:
            pytest.skip("something listens on the default Ray dashboard port 127.0.0.1:8265")
    result = dry_run(**data_files)
    assert "starting a local Ray instance for this run" in result.stderr
    assert overrides(dry_run_commands(result)[0])["+ray_kwargs.ray_init.address"] == "local"


BAD_INPUTS = [
    ({"TRAIN_BATCH_SIZE": "50"}, "TRAIN_BATCH_SIZE vs PPO_MINI_BATCH_SIZE"),
    ({"ROLLOUT_N": "1"}, "ROLLOUT_N must be >= 2"),
    ({"MICRO_BATCH_SIZE": "5", "PPO_MINI_BATCH_SIZE": "4", "TRAIN_BATCH_SIZE": "4"}, "MICRO_BATCH_SIZE"),
    ({"LORA_RANK": "8"}, "LORA_RANK=8: the CPU-mode HF rollout"),
    ({"ROLLOUT_ENGINE": "vllm"}, "ROLLOUT_ENGINE must be one of: hf"),
    ({"LOGGER": "[console,file]"}, "file logger crashes"),
    ({"LOGGER": "[console,nope]"}, "LOGGER: 'nope'"),
    ({"RAY_ADDRESS": "127.0.0.1:8265"}, "RAY_ADDRESS must be a Ray dashboard address"),
    ({"RAY_MODE": "cluster"}, "RAY_MODE must be one of"),
    ({"NNODES": "2", "RAY_MODE": "local"}, "NNODES=2 needs a Ray cluster"),
    ({"SAVE_FREQ": "0"}, "SAVE_FREQ must be -1 or an integer >= 1"),
    ({"GPU_MEMORY_UTILIZATION": "1.5"}, "GPU_MEMORY_UTILIZATION must be <= 1"),
    ({"MODEL_PATH": "./no/such/model"}, "MODEL_PATH: './no/such/model' is not a model directory"),
    ({"TRAIN_FILE": "/no/such/train.parquet"}, "TRAIN_FILE: file '/no/such/train.parquet' does not exist"),
]


@pytest.mark.parametrize("knobs, message", BAD_INPUTS, ids=[",".join(k) for k, _ in BAD_INPUTS])
def test_bad_inputs_stop_before_anything_starts(data_files, knobs, message):
    result = dry_run(**{"DEVICE": "cpu", "RAY_MODE": "local", **data_files, **knobs})
    assert result.returncode == 2
    assert message in result.stderr
    assert result.stdout == ""


def test_lora_runs_are_not_exported(data_files):
    result = dry_run(DEVICE="cuda", RAY_MODE="local", LORA_RANK="16", **data_files)
    assert result.returncode == 2 and "set EXPORT_DIR=none" in result.stderr


def test_gpu_rollout_tp_must_divide_the_gpus(data_files):
    result = dry_run(DEVICE="cuda", RAY_MODE="local", ROLLOUT_TP="3", **data_files)
    assert result.returncode == 2 and "N_GPUS_PER_NODE vs ROLLOUT_TP" in result.stderr


def test_launchers_are_thin():
    """Both recipes are the shared script plus their mode, reward function and help text."""
    for script in ("pointwise/run_pointwise.sh", "pairwise/run_pairwise.sh"):
        code = [
            line for line in (GRPO_DIR / script).read_text().splitlines() if line.strip() and not line.startswith("#")
        ]
        assert code[-1] == 'source "$(dirname "${BASH_SOURCE[0]}")/../common/grpo.sh"'
        assert len(code) == 4, code
