"""The GRPO recipes: generative judges (grpo-pointwise, grpo-pairwise) and a policy whose reward is a running
judge server (policy-grpo), all verl 0.6.1's PPO trainer in GRPO mode on Ray, then the export.

Where the training runs (launch.ray_mode):
  auto    a Ray job submitted to launch.ray_address when a cluster answers there; when nothing answers and
          RAY_ADDRESS was not set, a private local Ray instance for this run (with a note); when it was set
          and nothing answers, an error
  submit  `ray job submit` to launch.ray_address, once the cluster declares the resources the run asks for
  local   a private Ray instance inside the trainer (ray.init(address="local")), loopback only, single node
"""

from __future__ import annotations

import json
import os
import re
import shutil
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from judge_rewards.reward_config import ConfigError
from judge_rewards.reward_spec import SPEC_FILE_KEY, parse_spec, with_spec_file
from judge_rewards.verl_keys import JUDGE_REWARD_KEYS, ignored_reward_keys, installed_verl_version
from training.launch import ray_cluster
from training.launch.checks import VERL_LOGGERS, Checker
from training.launch.device import (
    CPU_SITE_DIR,
    FLASH_ATTENTION_MISSING,
    REPO_ROOT,
    removes_padding,
    training_dtype,
)
from training.launch.recipe import NO_EXPORT, Command, Given, KeyNames, LaunchError, export_command

# verl's PPO trainer reads a frequency of -1 as "never"; the recipes read it as "at the end only" (as verl's SFT
# trainer does), and the PPO trainer always saves and validates at its last step.
AT_THE_END_ONLY = 2**31 - 1
FREQUENCY_KEYS = ("trainer.save_freq", "trainer.test_freq")
TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16"}
EXPORT_DTYPES = {torch_name: name for name, torch_name in TORCH_DTYPES.items()}
RAY_ADDRESS_PATTERN = re.compile(r"^https?://[^/\s]+/?$")
JUDGE_URL_PATTERN = re.compile(r"^https?://[^/\s]+(/\S*)?$")
JUDGE_API_KEY_ENV = "JUDGE_MODEL_API_KEY"  # never in the config: it would show in the snapshot and the Ray dashboard
JUDGE_PROBE_TIMEOUT_S = 10
OMP_THREADS_ENV = "OMP_NUM_THREADS"

ACTOR = "actor_rollout_ref.actor"
ROLLOUT = "actor_rollout_ref.rollout"
MODEL = "actor_rollout_ref.model"


@dataclass(frozen=True)
class GRPORecipe:
    """verl's main_ppo in GRPO mode on the snapshot config, then `python -m training.export causal-lm`."""

    name: str
    config_name: str
    trainer_module: str = "verl.trainer.main_ppo"

    def device_overlay(self, device: str) -> dict:
        """CPU mode: one process, the Hugging Face rollout (sync mode, full weights, no tensor parallelism), sdpa
        attention, padding kept, the training dtype of CPU mode, no dataloader workers, no reference offload. A GPU
        without flash-attn: sdpa attention, padding kept."""
        sdpa = {f"{MODEL}.use_remove_padding": False, f"{MODEL}.override_config.attn_implementation": "sdpa"}
        if device != "cpu":
            return {} if removes_padding(device) else sdpa
        dtype = training_dtype(device)
        return {
            "trainer.n_gpus_per_node": 1,
            f"{ROLLOUT}.name": "hf",
            f"{ROLLOUT}.load_format": "hf",
            f"{ROLLOUT}.tensor_model_parallel_size": 1,
            **sdpa,
            f"{ACTOR}.fsdp_config.dtype": TORCH_DTYPES[dtype],
            "actor_rollout_ref.ref.fsdp_config.dtype": TORCH_DTYPES[dtype],
            "actor_rollout_ref.ref.fsdp_config.model_dtype": dtype,
            "actor_rollout_ref.ref.fsdp_config.param_offload": False,
            "data.dataloader_num_workers": 0,
        }

    def prepare(self, config: DictConfig, key_names: KeyNames, given: Given) -> list[str]:
        """Resolves launch.ray_mode (checking a cluster's declared resources before a submission) and makes the
        paths absolute: a submitted job's processes do not start in this directory."""
        notes = resolve_ray_mode(config, Checker(config, key_names), address_given=given("launch.ray_address"))
        make_paths_absolute(config)
        return notes

    def validate(self, config: DictConfig, key_names: KeyNames) -> None:
        check = Checker(config, key_names)
        check_inputs(check)
        check_training(check)
        check_device(check, config.trainer.device)
        check_lora_export(check)
        check_batch_shapes(check)

    def commands(self, config: DictConfig, snapshot_dir: Path) -> list[Command]:
        commands = [train_command(config, snapshot_dir, self.name, self.trainer_module)]
        if config.launch.export_dir != NO_EXPORT:
            commands.append(export(config, self.name))
        return commands


@dataclass(frozen=True)
class PolicyGRPORecipe(GRPORecipe):
    """GRPO of a policy: the reward function is judge_rewards/verl_reward.py, scoring through a judge server."""

    def prepare(self, config: DictConfig, key_names: KeyNames, given: Given) -> list[str]:
        check = Checker(config, key_names)
        notes = super().prepare(config, key_names, given)
        notes.append(probe_judge(config, check))
        check_reward_spec(config, check)
        if config.launch.ray_mode == "submit" and os.environ.get(JUDGE_API_KEY_ENV):
            notes.append(
                f"{JUDGE_API_KEY_ENV} is not sent with the Ray job (the command, its snapshot and the Ray dashboard "
                "would show it): the job's reward function reads it from the cluster's environment"
            )
        return notes

    def validate(self, config: DictConfig, key_names: KeyNames) -> None:
        refuse_keys_verl_ignores(config, installed_verl_version())
        super().validate(config, key_names)
        check = Checker(config, key_names)
        check.choice("reward_model.reward_manager", config.launch.reward_functions)
        kwargs = "custom_reward_function.reward_kwargs"
        check.integer(f"{kwargs}.max_batch_size", 1)
        check.integer(f"{kwargs}.max_concurrent_requests", 1)
        check.number(f"{kwargs}.timeout", 0.001)
        check.integer(f"{kwargs}.max_retries", 0)
        check.boolean(f"{kwargs}.fallback_to_rule")


def check_reward_spec(config: DictConfig, check: Checker) -> None:
    """A reward spec file (JUDGE_REWARD_SPEC) is parsed here, so a bad one fails before Ray starts, and its path
    is made absolute, since the reward function may run in another working directory (a Ray worker, a job)."""
    key = f"custom_reward_function.reward_kwargs.{SPEC_FILE_KEY}"
    path = OmegaConf.select(config, key)
    if path is None:
        return
    OmegaConf.update(config, key, str(Path(path).resolve()))
    try:
        parse_spec(with_spec_file(OmegaConf.to_container(config.custom_reward_function.reward_kwargs, resolve=True)))
    except ConfigError as err:
        check.fail(key, str(err))


def refuse_keys_verl_ignores(config: DictConfig, verl_version: str | None) -> None:
    """This recipe's config is written in verl 0.6.1's keys; a verl that would silently ignore its reward keys (0.9
    and later) is refused before anything starts, with the keys to use instead."""
    if verl_version is None:
        return
    reward_keys = {  # the keys this recipe sets (the rest of the reward_model tree is verl 0.6.1's defaults)
        "custom_reward_function": OmegaConf.to_container(config.custom_reward_function, resolve=True),
        "reward_model": {"reward_manager": config.reward_model.reward_manager},
    }
    ignored = ignored_reward_keys(reward_keys, verl_version)
    if ignored:
        raise LaunchError(
            f"this launcher drives verl 0.6.1, and the verl installed here ({verl_version}) would ignore the "
            "judge reward:\n  " + "\n  ".join(ignored) + "\nWith verl 0.9, run verl's main_ppo with "
            f"{JUDGE_REWARD_KEYS} (cookbooks/rl_with_judge_reward/README.md, section verl 0.9)"
        )


GRPO_RECIPES = (
    GRPORecipe("grpo-pointwise", "grpo_pointwise"),
    GRPORecipe("grpo-pairwise", "grpo_pairwise"),
    PolicyGRPORecipe("policy-grpo", "policy_grpo", "training.component_metrics"),  # a reward spec's components logged
)


# --- where it runs -------------------------------------------------------------------------------------------


def resolve_ray_mode(config: DictConfig, check: Checker, address_given: bool) -> list[str]:
    """auto -> submit or local, as the module docstring says; a submission first checks the cluster's resources."""
    check.choice("launch.ray_mode", ("auto", "submit", "local"))
    address = config.launch.ray_address
    if not isinstance(address, str) or not RAY_ADDRESS_PATTERN.match(address):
        check.fail("launch.ray_address", "must be a Ray dashboard address like http://127.0.0.1:8265")
    nnodes = check.integer("trainer.nnodes", 1)
    gpus_per_node = check.integer("trainer.n_gpus_per_node", 1)
    notes = []
    if config.launch.ray_mode == "auto":
        mode, note = choose_ray_mode(address, address_given, check)
        config.launch.ray_mode = mode
        notes.append(note)
    if config.launch.ray_mode == "submit":
        if shutil.which("ray") is None:
            raise LaunchError("the ray CLI is not on PATH (activate the environment verl is installed in)")
        request = ray_cluster.ResourceRequest(nnodes, gpus_per_node, cpu_mode=config.trainer.device == "cpu")
        ray_cluster.require_resources(address, request)
    elif nnodes > 1:
        check.fail("trainer.nnodes", f"more than one node needs a Ray cluster: start one and set {RAY_MODE_SUBMIT}")
    return notes


RAY_MODE_SUBMIT = "launch.ray_mode=submit (RAY_MODE=submit) and its launch.ray_address (RAY_ADDRESS)"


def choose_ray_mode(address: str, address_given: bool, check: Checker) -> tuple[str, str]:
    """Submit when a cluster answers; else local, unless the address was given (RAY_ADDRESS, --config, argument)."""
    timeout_s = ray_cluster.GIVEN_ADDRESS_PROBE_TIMEOUT_S if address_given else ray_cluster.PROBE_TIMEOUT_S
    if ray_cluster.cluster_answers(address, timeout_s):
        return "submit", f"a Ray cluster answers at {address}: submitting the training as a Ray job"
    if not address_given:
        return "local", (
            f"no Ray cluster answers at {address}: starting a local Ray instance for this run (start a cluster "
            "first, or set RAY_MODE=submit, to submit instead)"
        )
    check.fail("launch.ray_address", "no Ray cluster answers there (ray status; or unset RAY_ADDRESS to run locally)")


def make_paths_absolute(config: DictConfig) -> None:
    """Data, save folder, dump folders, export folder and a local model against this directory; the reward file
    against the repository (the recipe YAMLs name it inside the repository)."""
    for key in (
        "data.train_files",
        "data.val_files",
        "trainer.default_local_dir",
        "trainer.rollout_data_dir",
        "trainer.validation_data_dir",
    ):
        _absolute(config, key, Path.cwd())
    if Path(str(OmegaConf.select(config, f"{MODEL}.path"))).is_dir():
        _absolute(config, f"{MODEL}.path", Path.cwd())
    if not OmegaConf.is_interpolation(config.launch, "export_dir") and config.launch.export_dir != NO_EXPORT:
        _absolute(config, "launch.export_dir", Path.cwd())
    _absolute(config, "custom_reward_function.path", REPO_ROOT)


def _absolute(config: DictConfig, key: str, base: Path) -> None:
    value = OmegaConf.select(config, key)
    if isinstance(value, str) and value:
        OmegaConf.update(config, key, os.path.normpath(base / value))


# --- checks ----------------------------------------------------------------------------------------------------


def check_inputs(check: Checker) -> None:
    check.model(f"{MODEL}.path")
    check.existing_file("data.train_files")
    check.existing_file("data.val_files")
    check.nonempty("trainer.default_local_dir", "trainer.project_name", "trainer.experiment_name")


def check_training(check: Checker) -> None:
    for key in ("data.train_batch_size", f"{ACTOR}.ppo_mini_batch_size", f"{ACTOR}.ppo_micro_batch_size_per_gpu"):
        check.integer(key, 1)
    check.integer(f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu", 1)
    check.integer("trainer.total_epochs", 1)
    check.integer(f"{ROLLOUT}.tensor_model_parallel_size", 1)
    check.integer(f"{MODEL}.lora_alpha", 1)
    check.integer(f"{ROLLOUT}.n", 2)  # a group of one answer has no relative advantage
    check.integer("data.max_prompt_length", 16)
    check.integer("data.max_response_length", 8)
    check.integer(f"{MODEL}.lora_rank", 0)
    check.optional_integer("trainer.total_training_steps", 1)
    for key in FREQUENCY_KEYS:
        check.frequency(key)
    check.number(f"{ACTOR}.kl_loss_coef")
    check.number(f"{ACTOR}.optim.lr")
    check.number(f"{ROLLOUT}.gpu_memory_utilization", 0.05, 1)
    check.choice(f"{ACTOR}.strategy", ("fsdp", "fsdp2"))
    for key in (
        "trainer.val_before_train",
        f"{MODEL}.enable_gradient_checkpointing",
        f"{ACTOR}.fsdp_config.param_offload",
    ):
        check.boolean(key)
    check.choice_list("trainer.logger", VERL_LOGGERS)
    if "file" in check.value("trainer.logger"):
        check.fail(
            "trainer.logger",
            "verl 0.6.1's file logger crashes on the PPO trainer's own tensor metrics (global_seqlen/*)",
        )


def check_device(check: Checker, device: str) -> None:
    """CPU mode has the Hugging Face rollout only (full weights, one process); GPUs have vLLM or SGLang."""
    if device == "cpu":
        check.choice(f"{ROLLOUT}.name", ("hf",))
        if check.value(f"{MODEL}.lora_rank"):
            check.fail(f"{MODEL}.lora_rank", "the CPU-mode HF rollout takes full weights only; use 0")
        if check.value(f"{ROLLOUT}.tensor_model_parallel_size") != 1:
            check.fail(f"{ROLLOUT}.tensor_model_parallel_size", "the CPU-mode HF rollout is not tensor parallel; use 1")
    else:
        check.choice(f"{ROLLOUT}.name", ("vllm", "sglang"))
        tensor_parallel = check.value(f"{ROLLOUT}.tensor_model_parallel_size")
        check.multiple_of(
            "trainer.n_gpus_per_node", tensor_parallel, check.key_names(f"{ROLLOUT}.tensor_model_parallel_size")
        )
        if not removes_padding(device):
            check_without_flash_attention(check)


def check_without_flash_attention(check: Checker) -> None:
    """A GPU without flash-attn: verl would fail at model load, or pack sequences that SDPA cannot tell apart."""
    if check.value(f"{MODEL}.use_remove_padding"):
        check.fail(f"{MODEL}.use_remove_padding", f"needs flash-attn: {FLASH_ATTENTION_MISSING}; use false")
    if str(check.value(f"{MODEL}.override_config.attn_implementation")).startswith("flash_attention"):
        check.fail(f"{MODEL}.override_config.attn_implementation", f"{FLASH_ATTENTION_MISSING}; use sdpa")


def check_lora_export(check: Checker) -> None:
    if check.value(f"{MODEL}.lora_rank") and check.value("launch.export_dir") != NO_EXPORT:
        check.fail(
            f"{MODEL}.lora_rank",
            f"the export merges full-weight checkpoints only; set {check.key_names('launch.export_dir')} to none "
            "(verl saves the adapter in PEFT format under global_step_N/actor/lora_adapter/ of the save folder)",
        )


def check_batch_shapes(check: Checker) -> None:
    """Prompts per step split into updates; each update's answers split evenly over the GPUs, then into micro
    batches."""
    mini_batch = check.value(f"{ACTOR}.ppo_mini_batch_size")
    check.multiple_of("data.train_batch_size", mini_batch, check.key_names(f"{ACTOR}.ppo_mini_batch_size"))
    world_size = check.value("trainer.nnodes") * check.value("trainer.n_gpus_per_node")
    answers_per_update = mini_batch * check.value(f"{ROLLOUT}.n")
    if answers_per_update % world_size:
        check.fail(
            f"{ACTOR}.ppo_mini_batch_size",
            f"its answers per update ({mini_batch} x {check.key_names(f'{ROLLOUT}.n')} = {answers_per_update}) "
            f"must split evenly over the {world_size} GPUs ({check.key_names('trainer.nnodes')} x "
            f"{check.key_names('trainer.n_gpus_per_node')})",
        )
    per_gpu = answers_per_update // world_size
    micro_batch = check.value(f"{ACTOR}.ppo_micro_batch_size_per_gpu")
    if per_gpu % micro_batch:
        check.fail(
            f"{ACTOR}.ppo_micro_batch_size_per_gpu",
            f"must divide the {per_gpu} answers per GPU per update ({check.key_names(f'{ACTOR}.ppo_mini_batch_size')}"
            f" x {check.key_names(f'{ROLLOUT}.n')} / GPUs)",
        )


# --- the judge of the policy recipe ----------------------------------------------------------------------------


def probe_judge(config: DictConfig, check: Checker) -> str:
    """The judge's identity from GET /health, and its API key checked with GET /metrics (the cheapest route behind
    the key: /health never asks for it). Normalises the URL (no trailing slash)."""
    key = "custom_reward_function.reward_kwargs.judge_url"
    url = check.value(key)
    if not url:
        check.fail(
            key,
            "not set: serve a judge (python -m serving --model JUDGE_DIR) and set it to its address, e.g. http://127.0.0.1:8888",
        )
    if not isinstance(url, str) or not JUDGE_URL_PATTERN.match(url):
        check.fail(key, "must be a judge server's base URL like http://judge-host:8888")
    url = url.rstrip("/")
    OmegaConf.update(config, key, url)
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=JUDGE_PROBE_TIMEOUT_S) as response:
            health = json.load(response)
    except (OSError, ValueError) as err:
        check.fail(
            key,
            f"no judge server answers GET /health ({type(err).__name__}: {err}); start one with python -m serving "
            "--model JUDGE_DIR, or fix the address",
        )
    api_key = os.environ.get(JUDGE_API_KEY_ENV, "")
    request = urllib.request.Request(
        f"{url}/metrics", headers={"Authorization": f"Bearer {api_key}"} if api_key else {}
    )
    try:
        urllib.request.urlopen(request, timeout=JUDGE_PROBE_TIMEOUT_S).close()
    except urllib.error.HTTPError as err:
        if err.code in (401, 403):
            problem = f"the judge refuses {JUDGE_API_KEY_ENV}" if api_key else "the judge requires an API key"
            check.fail(key, f"{problem} (HTTP {err.code}): set {JUDGE_API_KEY_ENV} to the server's key")
    except OSError:
        pass  # a judge server without /metrics: /health answered, the key cannot be checked beforehand
    return (
        f"judge at {url}: {health.get('judge_kind')} judge {health.get('model_id')} ({health.get('backend')}, "
        f"version {health.get('model_version')})"
    )


# --- commands --------------------------------------------------------------------------------------------------


def train_command(config: DictConfig, snapshot_dir: Path, recipe_name: str, module: str) -> Command:
    """verl's main_ppo (or `module`, which runs it) on the snapshot, with the overrides that only this launch
    knows: a frequency of -1 as verl reads "at the end only", and a local run's private Ray instance."""
    trainer = [
        "python", "-m", module, "--config-path", str(snapshot_dir), "--config-name", "config",
        f"hydra.run.dir={snapshot_dir / 'hydra'}",
    ]  # fmt: skip
    trainer += [f"{key}={AT_THE_END_ONLY}" for key in FREQUENCY_KEYS if OmegaConf.select(config, key) == -1]
    cpu_mode = config.trainer.device == "cpu"
    if config.launch.ray_mode == "submit":
        submission_id = f"judge-{recipe_name}-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}"
        runtime_env = json.dumps({"env_vars": job_environment(cpu_mode)})
        submit = ["ray", "job", "submit", "--address", config.launch.ray_address, "--submission-id", submission_id]
        return Command("train", [*submit, "--runtime-env-json", runtime_env, "--", *trainer], ray_cluster.job_cli_env())
    local = ["env", "-u", "RAY_ADDRESS", *trainer, *local_ray_overrides(config)]
    return Command("train", local, local_ray_env(config), ray_cluster.LOCAL_START_AGAIN)


def job_environment(cpu_mode: bool) -> dict[str, str]:
    """A submitted job's processes start on the cluster, not from this launcher: they get this environment."""
    if not cpu_mode:
        return {"PYTHONPATH": str(REPO_ROOT)}
    return {"PYTHONPATH": f"{CPU_SITE_DIR}:{REPO_ROOT}", "JUDGE_CPU_DTYPE": training_dtype("cpu")}


def local_ray_env(config: DictConfig) -> dict[str, str]:
    """Loopback only: nothing outside this machine needs to reach a private instance. The repository on
    PYTHONPATH for the reward function (CPU mode: the core puts it there with the CPU fixes).

    CPU mode: Ray sets OMP_NUM_THREADS=1 in a worker that asks for no CPUs, as verl's workers do, which
    leaves torch one core for the rollouts and the update. Each of the n_gpus_per_node workers gets its share
    of this machine's cores instead, unless OMP_NUM_THREADS is set here."""
    env = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    if config.trainer.device != "cpu":
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    elif OMP_THREADS_ENV not in os.environ:
        cores = len(os.sched_getaffinity(0))
        env[OMP_THREADS_ENV] = str(max(1, cores // config.trainer.n_gpus_per_node))
    return env


def local_ray_overrides(config: DictConfig) -> list[str]:
    """ray.init(address="local") starts a new instance even where a cluster runs; without a dashboard, which
    would listen on the default dashboard port, where another launcher in auto mode would take it for a cluster.
    CPU mode declares the logical GPUs and the `cpu` resource verl's placement groups ask for."""
    overrides = ["+ray_kwargs.ray_init.address=local", "+ray_kwargs.ray_init.include_dashboard=false"]
    if config.trainer.device == "cpu":
        gpus = config.trainer.n_gpus_per_node
        overrides += [
            f"+ray_kwargs.ray_init.num_gpus={gpus}",
            f"+ray_kwargs.ray_init.resources={{{ray_cluster.CPU_MODE_RESOURCE}:{gpus}}}",
            f"ray_kwargs.ray_init.num_cpus={gpus + 3}",
        ]
    return overrides


def export(config: DictConfig, recipe_name: str) -> Command:
    """The last actor checkpoint as a Hugging Face model, in the dtype the actor trained in; what it records
    (base model, train file) is what the training used."""
    command = export_command(
        "causal-lm", recipe_name, config.trainer.default_local_dir, config.launch.export_dir,
        EXPORT_DTYPES[config.actor_rollout_ref.actor.fsdp_config.dtype], config.actor_rollout_ref.model.path,
        config.data.train_files,
    )  # fmt: skip
    return Command(command.name, command.argv + [str(flag) for flag in config.launch.export_flags])
