"""cookbooks/rl_with_judge_reward/run_policy_grpo.sh: GRPO of a policy whose reward is a running judge.

End to end on CPU: the real judge server (an untrained tiny scalar judge, with an API key) scores the
rollouts of 2 GRPO steps of the tiny policy on the offline policy data, through real verl on a private
local Ray; the judge's own counters, verl's logged reward sources and the checkpoint are checked. The
launcher's checks run its Python side in process against a stand-in judge that answers /health.
"""

from __future__ import annotations

import http.server
import json
import re
import shlex
import tempfile
import threading
from pathlib import Path

import httpx
import pytest
from omegaconf import OmegaConf

from data_prep import offline
from tests.conftest import REPO_ROOT
from tests.grpo_recipe import (
    POLICY_LAUNCHER,
    dry_run_commands,
    launch_error,
    launch_in_python,
    launcher_env,
    processes_mentioning,
    run_launcher,
    stand_in_dashboard,
)
from tests.launcher_helpers import logged_metrics
from tests.support.readme_blocks import readme_block, readme_command, session
from tests.support.servers import free_port, start_server
from tests.test_recipe_grpo import run_bash
from training.launch.config import leaf_keys

RECIPE_DIR = REPO_ROOT / "cookbooks" / "rl_with_judge_reward"
CPU_CONFIG = RECIPE_DIR / "configs" / "cpu_tiny.yaml"
SPEC_FILE = RECIPE_DIR / "specs" / "judge_and_arithmetic_rule.yaml"
API_KEY = "policy-test-key"
DATA_SOURCE = offline.DATA_SOURCE_POLICY
STEPS, PROMPTS_PER_STEP, ROLLOUT_N = 2, 4, 4  # configs/cpu_tiny.yaml and the GRPO default group
JUDGE_URL_KEY = "custom_reward_function.reward_kwargs.judge_url (JUDGE_MODEL_URL)"
KWARGS = "custom_reward_function.reward_kwargs"


def policy_launch(monkeypatch, *args, **knobs):
    """The launcher's Python side in process, CPU mode, the laptop config."""
    env = launcher_env(**knobs)
    return launch_in_python(
        "policy", "--config", str(CPU_CONFIG), "trainer.device=cpu", *args, env=env, monkeypatch=monkeypatch
    )


@pytest.fixture(scope="module")
def policy_data(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("policy_data")
    offline.generate(out, offline.OfflineConfig(train_size=24, val_size=8, eval_size=5))
    return {"TRAIN_FILE": out / "policy" / "train.parquet", "VAL_FILE": out / "policy" / "val.parquet"}


# --- the launcher's checks (dry runs) ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def stand_in_judge():
    """Answers GET /health like the judge server; /metrics needs `Authorization: Bearer <API_KEY>`."""

    class Judge(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path == "/health":
                self._answer(
                    200,
                    {
                        "status": "ok",
                        "judge_kind": "scalar",
                        "model_id": "stand-in",
                        "backend": "none",
                        "model_version": "v0",
                    },
                )
            elif self.headers.get("Authorization") == f"Bearer {API_KEY}":
                self._answer(200, {})
            else:
                self._answer(401, {"detail": "missing or wrong API key"})

        def _answer(self, status: int, body: dict):
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(json.dumps(body).encode())

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Judge)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def valid_knobs(policy_data, tiny_model_dir, judge_url) -> dict:
    return {
        **policy_data,
        "MODEL_PATH": tiny_model_dir,
        "RAY_MODE": "local",
        "JUDGE_MODEL_URL": judge_url,
        "JUDGE_MODEL_API_KEY": API_KEY,
    }


DEAD_JUDGE_URL = f"http://127.0.0.1:{free_port()}"
BAD_INPUTS = [
    ({"JUDGE_MODEL_URL": ""}, f"{JUDGE_URL_KEY} = '': not set: serve a judge (python -m serving --model JUDGE_DIR)"),
    ({"JUDGE_MODEL_URL": "judge-host:8888"}, "must be a judge server's base URL"),
    ({"JUDGE_MODEL_URL": DEAD_JUDGE_URL}, "no judge server answers GET /health"),
    ({"JUDGE_MODEL_API_KEY": ""}, "the judge requires an API key (HTTP 401): set JUDGE_MODEL_API_KEY"),
    ({"JUDGE_MODEL_API_KEY": "wrong"}, "the judge refuses JUDGE_MODEL_API_KEY (HTTP 401)"),
    ({"REWARD_MANAGER": "prime"}, "reward_model.reward_manager (REWARD_MANAGER) = prime: must be one of: batch, naive"),
    ({"JUDGE_MAX_BATCH_SIZE": "0"}, f"{KWARGS}.max_batch_size (JUDGE_MAX_BATCH_SIZE) = 0: must be an integer >= 1"),
    ({"JUDGE_TIMEOUT": "soon"}, f"{KWARGS}.timeout (JUDGE_TIMEOUT) = soon: must be a number"),
    (
        {"JUDGE_FALLBACK_TO_RULE": "maybe"},
        f"{KWARGS}.fallback_to_rule (JUDGE_FALLBACK_TO_RULE) = maybe: must be true or false",
    ),
]


@pytest.mark.parametrize(
    "knobs, message",
    BAD_INPUTS,
    # The free port differs between pytest-xdist's workers, whose collected ids must agree.
    ids=[
        ",".join(f"{k}={'DEAD_JUDGE_URL' if v == DEAD_JUDGE_URL else v}" for k, v in kn.items()) for kn, _ in BAD_INPUTS
    ],
)
def test_bad_judge_settings_stop_before_anything_starts(
    policy_data, tiny_model_dir, stand_in_judge, knobs, message, monkeypatch
):
    env = launcher_env(**{**valid_knobs(policy_data, tiny_model_dir, stand_in_judge), **knobs})
    assert message in launch_error(
        "policy", "--config", str(CPU_CONFIG), "trainer.device=cpu", env=env, monkeypatch=monkeypatch
    )


def test_a_reward_spec_file_is_read_at_launch_and_its_path_made_absolute(
    policy_data, tiny_model_dir, stand_in_judge, monkeypatch, tmp_path
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "spec.yaml").write_text(SPEC_FILE.read_text())
    knobs = valid_knobs(policy_data, tiny_model_dir, stand_in_judge)
    launch = policy_launch(monkeypatch, **knobs, JUDGE_REWARD_SPEC="spec.yaml")
    assert launch.config.custom_reward_function.reward_kwargs.reward_spec == str(tmp_path / "spec.yaml")
    (tmp_path / "spec.yaml").write_text(
        SPEC_FILE.read_text().replace("routes: {arithmetic: arithmetic", "routes: {x: y")
    )
    env = launcher_env(**knobs, JUDGE_REWARD_SPEC="spec.yaml")
    error = launch_error("policy", "--config", str(CPU_CONFIG), "trainer.device=cpu", env=env, monkeypatch=monkeypatch)
    assert "reward_kwargs.reward_spec (JUDGE_REWARD_SPEC)" in error and "routes.x: routes to no spec: 'y'" in error


LOGGED_CHECKS = "$ bash .../run_policy_grpo.sh --dry-run --config .../configs/cpu_tiny.yaml"


def test_the_logged_checks_are_the_launchers_messages(policy_data, tiny_model_dir, stand_in_judge, monkeypatch):
    """experiments/policy-rl/LOG.md's recorded checks, again in process: each error line it shows is the launcher's
    for the settings of its command, the log's judge addresses (:9, where nothing listens; :8891, a judge that
    wants an API key) standing for this test's."""
    logged = {"http://127.0.0.1:9": DEAD_JUDGE_URL, "http://127.0.0.1:8891": stand_in_judge}
    checked = 0
    for command, output in session(readme_block("experiments/policy-rl/LOG.md", LOGGED_CHECKS).text):
        shown = [line for line in output if line.startswith("[run_policy_grpo.sh] error: ")]
        if not shown:
            continue
        given = dict(word.split("=", 1) for word in shlex.split(command) if re.fullmatch(r"[A-Z_]+=\S*", word))
        knobs = {
            **valid_knobs(policy_data, tiny_model_dir, stand_in_judge),
            "JUDGE_MODEL_URL": logged.get(given.get("JUDGE_MODEL_URL", ""), given.get("JUDGE_MODEL_URL", "")),
            "JUDGE_MODEL_API_KEY": given.get("JUDGE_MODEL_API_KEY", ""),
        }
        message = launch_error(
            "policy",
            "--config",
            str(CPU_CONFIG),
            "trainer.device=cpu",
            env=launcher_env(**knobs),
            monkeypatch=monkeypatch,
        )
        for address, ours in logged.items():
            message = message.replace(ours, address)
        assert shown == [f"[run_policy_grpo.sh] error: {message}"]
        checked += 1
    assert checked == 4


def test_the_judge_becomes_verls_reward_with_the_adapter_settings(
    policy_data, tiny_model_dir, stand_in_judge, monkeypatch, tmp_path
):
    monkeypatch.chdir(tmp_path)
    launch = policy_launch(
        monkeypatch,
        **valid_knobs(policy_data, tiny_model_dir, stand_in_judge + "/"),
        JUDGE_MAX_BATCH_SIZE=8,
        JUDGE_MAX_CONCURRENT=4,
        JUDGE_TIMEOUT=2.5,
        JUDGE_MAX_RETRIES=1,
        JUDGE_FALLBACK_TO_RULE="false",
        ROLLOUT_DATA_DIR="rollouts",
    )
    assert f"judge at {stand_in_judge}: scalar judge stand-in (none, version v0)" in launch.notes
    config = launch.config
    assert config.reward_model.reward_manager == "batch"
    assert config.custom_reward_function.path == str(REPO_ROOT / "judge_rewards" / "verl_reward.py")
    assert config.custom_reward_function.name == "compute_score_batch"
    assert OmegaConf.to_container(config.custom_reward_function.reward_kwargs) == {
        "judge_url": stand_in_judge,
        "max_batch_size": 8,
        "max_concurrent_requests": 4,
        "timeout": 2.5,
        "max_retries": 1,
        "fallback_to_rule": False,
        "reward_spec": None,
    }
    assert config.trainer.rollout_data_dir == str(tmp_path / "rollouts")
    assert (config.data.train_files, config.trainer.project_name) == (str(policy_data["TRAIN_FILE"]), "policy-grpo")
    export = launch.command("export")
    assert export[:4] == ["python", "-m", "training.export", "causal-lm"]
    assert "--not-a-judge" in export and export[export.index("--recipe") + 1] == "policy-grpo"


@pytest.mark.parametrize("config_file", sorted((RECIPE_DIR / "configs").glob("*.yaml")), ids=lambda path: path.name)
def test_each_cpu_config_starts_with_its_command_and_reaches_verl_whole(
    policy_data, tiny_model_dir, stand_in_judge, monkeypatch, config_file
):
    """Every key the file sets is one of verl's and arrives with the file's value (MODEL_PATH aside, given here)."""
    relative = config_file.relative_to(REPO_ROOT)
    assert config_file.read_text().splitlines()[0] == (
        f"# bash cookbooks/rl_with_judge_reward/run_policy_grpo.sh --config {relative}"
    )
    launch = launch_in_python(
        "policy",
        "--config",
        str(config_file),
        "trainer.device=cpu",
        env=launcher_env(**valid_knobs(policy_data, tiny_model_dir, stand_in_judge)),
        monkeypatch=monkeypatch,
    )
    written = OmegaConf.load(config_file)
    for key in set(leaf_keys(written)) - {"actor_rollout_ref.model.path"}:
        assert OmegaConf.select(launch.config, key, default="absent") == OmegaConf.select(written, key), key


def test_naive_reward_manager_calls_the_per_sample_function(policy_data, tiny_model_dir, stand_in_judge, monkeypatch):
    launch = policy_launch(
        monkeypatch, **valid_knobs(policy_data, tiny_model_dir, stand_in_judge), REWARD_MANAGER="naive"
    )
    assert (launch.config.reward_model.reward_manager, launch.config.custom_reward_function.name) == (
        "naive",
        "compute_score",
    )


@pytest.mark.parametrize("verl_version", ["0.9.1", "0.10.0"])
def test_a_verl_that_would_ignore_the_judge_reward_is_refused(
    policy_data, tiny_model_dir, stand_in_judge, monkeypatch, verl_version
):
    monkeypatch.setattr("training.launch.grpo.installed_verl_version", lambda: verl_version)
    env = launcher_env(**valid_knobs(policy_data, tiny_model_dir, stand_in_judge))
    error = launch_error("policy", "--config", str(CPU_CONFIG), "trainer.device=cpu", env=env, monkeypatch=monkeypatch)
    assert f"the verl installed here ({verl_version}) would ignore the judge reward" in error
    assert "custom_reward_function.name='compute_score_batch': " in error
    assert f"verl {verl_version} ignores it (not migrated since 0.9.0); use reward.custom_reward_function.name" in error
    assert "reward_model.reward_manager=batch: " in error and "use reward.reward_manager.name=naive" in error
    assert "reward.custom_reward_function.name=compute_score_async" in error


def test_default_data_is_the_offline_policy_split(tiny_model_dir, stand_in_judge, tmp_path):
    for split in ("train", "val"):
        (tmp_path / "data" / "policy").mkdir(parents=True, exist_ok=True)
        (tmp_path / "data" / "policy" / f"{split}.parquet").write_bytes(b"")
    env = launcher_env(
        MODEL_PATH=tiny_model_dir, RAY_MODE="local", JUDGE_MODEL_URL=stand_in_judge, JUDGE_MODEL_API_KEY=API_KEY
    )
    trainer = dry_run_commands(run_launcher("policy", "--dry-run", "trainer.device=cpu", env=env, cwd=tmp_path))[0]
    assert trainer[trainer.index("--config-path") + 1] == f"{tmp_path}/checkpoints/grpo/policy/launch"


def test_a_submitted_job_never_carries_the_api_key(policy_data, tiny_model_dir, stand_in_judge, monkeypatch):
    server = stand_in_dashboard([{"CPU": 4.0, "GPU": 1.0, "cpu": 1.0}])
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        address = f"http://127.0.0.1:{server.server_address[1]}"
        knobs = {
            **valid_knobs(policy_data, tiny_model_dir, stand_in_judge),
            "RAY_MODE": "submit",
            "RAY_ADDRESS": address,
        }
        launch = policy_launch(monkeypatch, **knobs)
    finally:
        server.shutdown()
        server.server_close()
    assert any("JUDGE_MODEL_API_KEY is not sent with the Ray job" in note for note in launch.notes)
    trainer = launch.command("train")
    assert trainer[:3] == ["ray", "job", "submit"] and API_KEY not in " ".join(trainer)
    assert launch.config.custom_reward_function.reward_kwargs.judge_url == stand_in_judge


# --- end to end ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def judge_server(tiny_scalar_judge_dir, tmp_path_factory):
    """The real judge server with an untrained tiny scalar judge, behind an API key."""
    log_path = tmp_path_factory.mktemp("judge") / "server.log"
    with start_server(["--model", str(tiny_scalar_judge_dir), "--api-key", API_KEY], log_path=log_path) as server:
        yield server


def judgements_answered(judge_url: str) -> float:
    metrics = httpx.get(f"{judge_url}/metrics", headers={"Authorization": f"Bearer {API_KEY}"}).text
    found = re.findall(r'^judge_judgements_total\{outcome="(\w+)"\} (\S+)$', metrics, flags=re.MULTILINE)
    return sum(float(value) for _, value in found)


def dumped_rewards(directory: Path) -> list[dict]:
    """verl's per-answer dumps (trainer.rollout_data_dir / validation_data_dir): one JSON line per answer."""
    return [json.loads(line) for path in sorted(directory.glob("*.jsonl")) for line in path.read_text().splitlines()]


@pytest.mark.e2e
def test_a_policy_trains_two_steps_with_the_judge_as_its_reward(policy_data, tiny_model_dir, judge_server, tmp_path):
    save_dir, rollouts, validation = tmp_path / "save", tmp_path / "rollouts", tmp_path / "validation"
    before = judgements_answered(judge_server.url)
    with tempfile.TemporaryDirectory(prefix="rayp", dir="/tmp") as ray_tmpdir:
        env = launcher_env(
            **valid_knobs(policy_data, tiny_model_dir, judge_server.url),
            SAVE_DIR=save_dir,
            ROLLOUT_DATA_DIR=rollouts,
            RAY_TMPDIR=ray_tmpdir,
        )
        output = run_bash(
            POLICY_LAUNCHER,
            "--config",
            str(CPU_CONFIG),
            f"trainer.validation_data_dir={validation}",
            env=env,
            cwd=RECIPE_DIR,
        )
        assert processes_mentioning(ray_tmpdir) == [], "a Ray process outlived the run"
    judged = judgements_answered(judge_server.url) - before

    train, val = dumped_rewards(rollouts), dumped_rewards(validation)
    assert len(train) == STEPS * PROMPTS_PER_STEP * ROLLOUT_N and val
    for answer in train + val:
        assert answer["source"] in ("judge", "cache") and answer["from_rule_fallback"] == 0.0, answer
        assert 0.0 <= answer["score"] <= 1.0
    # Every distinct answer was scored by the server (identical ones may share a judgement or a cache entry).
    assert judged >= len({(a["input"], a["output"], a["gts"]) for a in train + val})

    steps = logged_metrics((save_dir / "launch" / "train.log").read_text())
    assert sorted(steps) == [1, 2]
    assert steps[2][f"val-aux/{DATA_SOURCE}/from_rule_fallback/mean@1"] == 0.0
    assert all(0.0 <= step["critic/score/min"] <= step["critic/score/max"] <= 1.0 for step in steps.values())

    assert (save_dir / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    assert (save_dir / "global_step_2" / "actor" / "model_world_size_1_rank_0.pt").is_file()
    assert not (save_dir / "hf" / "judge.json").exists()
    assert json.loads((save_dir / "hf" / "export.json").read_text())["trained_with"]["recipe"] == "policy-grpo"
    snapshot = "".join(path.read_text() for path in (save_dir / "launch").glob("*") if path.is_file())
    assert API_KEY not in output + snapshot


@pytest.mark.e2e
def test_a_reward_spec_routes_by_subset_and_each_component_reaches_the_training_metrics(
    policy_data, tiny_model_dir, judge_server, tmp_path
):
    """The cookbook's spec file: arithmetic rows get judge and rule half and half, the others the judge; verl's
    training metrics (not only its dumps) carry each component's step mean."""
    save_dir, rollouts = tmp_path / "save", tmp_path / "rollouts"
    with tempfile.TemporaryDirectory(prefix="rayp", dir="/tmp") as ray_tmpdir:
        env = launcher_env(
            **valid_knobs(policy_data, tiny_model_dir, judge_server.url),
            SAVE_DIR=save_dir,
            ROLLOUT_DATA_DIR=rollouts,
            RAY_TMPDIR=ray_tmpdir,
            JUDGE_REWARD_SPEC=SPEC_FILE.relative_to(RECIPE_DIR),  # made absolute by the launcher
        )
        run_bash(POLICY_LAUNCHER, "--config", str(CPU_CONFIG), env=env, cwd=RECIPE_DIR)
    steps = logged_metrics((save_dir / "launch" / "train.log").read_text())
    arithmetic_rows = 0
    for step in (1, 2):
        rows = [json.loads(line) for line in (rollouts / f"{step}.jsonl").read_text().splitlines()]
        mixed = [row for row in rows if row["spec"] == "arithmetic"]
        arithmetic_rows += len(mixed)
        assert {row["spec"] for row in rows} <= {"arithmetic", "other"}
        for row in rows:
            judge, rule = row["component/judge"], row["component/arithmetic"]
            expected = 0.5 * judge + 0.5 * rule if row["spec"] == "arithmetic" else judge
            assert row["score"] == pytest.approx(expected) and (row["spec"] == "arithmetic") != (rule != rule)
        metrics = steps[step]
        assert metrics["reward/component/judge/mean"] == pytest.approx(
            sum(row["component/judge"] for row in rows) / len(rows), abs=1e-6
        )
        assert metrics["reward/component/arithmetic/share"] == pytest.approx(len(mixed) / len(rows))
        if mixed:
            mean = sum(row["component/arithmetic"] for row in mixed) / len(mixed)
            assert metrics["reward/component/arithmetic/mean"] == pytest.approx(mean, abs=1e-6)
    assert arithmetic_rows, "no arithmetic question in 2 steps: the route was not exercised"


# --- group-relative pairwise rewards (issue 29) ------------------------------------------------------------------

# The cookbook's group-relative settings (README: "A pairwise judge as the reward"), as its command gives them.
GROUP_COMMAND = "JUDGE_MODEL_URL=http://judge-host:8888 bash cookbooks/rl_with_judge_reward/run_policy_grpo.sh"
GROUP_WORDS = readme_command("cookbooks/rl_with_judge_reward/README.md", GROUP_COMMAND)
GROUP_OVERRIDES = GROUP_WORDS[GROUP_WORDS.index("cookbooks/rl_with_judge_reward/run_policy_grpo.sh") + 1 :]


def test_the_group_relative_mode_reaches_verls_reward_settings(
    policy_data, tiny_model_dir, stand_in_judge, monkeypatch
):
    launch = policy_launch(monkeypatch, *GROUP_OVERRIDES, **valid_knobs(policy_data, tiny_model_dir, stand_in_judge))
    config = launch.config
    assert config.custom_reward_function.reward_kwargs.group_relative is True
    assert (config.reward_model.reward_manager, config.custom_reward_function.name) == ("batch", "compute_score_batch")
    # validation judges groups too: 2 answers per prompt at least, sampled (so that they differ)
    assert config.actor_rollout_ref.rollout.val_kwargs.n == 2
    assert config.actor_rollout_ref.rollout.val_kwargs.do_sample is True
    assert config.actor_rollout_ref.rollout.val_kwargs.temperature == 1.0  # 0 would sample greedily, or refuse


@pytest.fixture(scope="module")
def first_position_pairwise_judge_dir(tiny_model_dir, tmp_path_factory) -> Path:
    """A tiny pairwise generative judge (a real Llama causal LM) whose chat template ends every comparison with
    <first>, so that it always answers A with probability 0.8: every pair in both orders then pays each
    completion a mean of exactly 0.5 (the position cancels)."""
    from tests.test_serving_generative import EOS, build_script_judge

    script = {
        "<first>": "<think>first</think><better>",
        "<think>first</think><better>": {"A": 0.8, "B": 0.2},
        "A": "</better>",
        "B": "</better>",
        "</better>": EOS,
    }
    template = "{{ messages[0]['content'].split('## Response A\\n')[1].split('\\n\\n')[0] }}<first>"
    out_dir = tmp_path_factory.mktemp("first_position_judge")
    # min_hidden_size 8: attention heads of an even width (rotary embeddings)
    return build_script_judge(
        tiny_model_dir, out_dir, script, "Response A", prompt_format="pairwise", min_hidden_size=8, template=template
    )


@pytest.fixture(scope="module")
def pairwise_judge_server(first_position_pairwise_judge_dir, tmp_path_factory):
    log_path = tmp_path_factory.mktemp("pairwise_judge") / "server.log"
    args = ["--model", str(first_position_pairwise_judge_dir), "--api-key", API_KEY, "--max-new-tokens", "8"]
    with start_server(args, log_path=log_path) as server:
        yield server


def requests_to(judge_url: str, route: str) -> float:
    """The judge server's count of the HTTP requests to `route` it answered 200 (its /metrics)."""
    metrics = httpx.get(f"{judge_url}/metrics", headers={"Authorization": f"Bearer {API_KEY}"}).text
    labels = rf'(?=[^}}]*route="{re.escape(route)}")(?=[^}}]*status="200")[^}}]*'
    found = re.findall(rf"^judge_http_requests_total\{{{labels}\}} (\S+)$", metrics, flags=re.MULTILINE)
    return sum(float(value) for value in found)


@pytest.mark.e2e
def test_a_policy_trains_with_group_relative_rewards_from_a_served_pairwise_judge(
    policy_data, tiny_model_dir, pairwise_judge_server, tmp_path
):
    save_dir, rollouts = tmp_path / "save", tmp_path / "rollouts"
    url = pairwise_judge_server.url
    before = {route: requests_to(url, route) for route in ("/judge_group", "/batch_judge")}
    with tempfile.TemporaryDirectory(prefix="rayp", dir="/tmp") as ray_tmpdir:
        env = launcher_env(
            **valid_knobs(policy_data, tiny_model_dir, url),
            SAVE_DIR=save_dir,
            ROLLOUT_DATA_DIR=rollouts,
            RAY_TMPDIR=ray_tmpdir,
        )
        run_bash(POLICY_LAUNCHER, "--config", str(CPU_CONFIG), *GROUP_OVERRIDES, env=env, cwd=RECIPE_DIR)
        assert processes_mentioning(ray_tmpdir) == [], "a Ray process outlived the run"

    train = dumped_rewards(rollouts)
    assert len(train) == STEPS * PROMPTS_PER_STEP * ROLLOUT_N
    for answer in train:  # each answer met its 3 siblings (each in both orders) and every comparison answered
        assert answer["source"] in ("judge", "cache") and answer["from_rule_fallback"] == 0.0, answer
        assert (answer["comparisons"], answer["failed_comparisons"]) == (3.0, 0.0), answer
        assert answer["score"] == pytest.approx(0.5)  # the first-position judge, position cancelled
    assert requests_to(url, "/judge_group") - before["/judge_group"] >= STEPS * PROMPTS_PER_STEP
    assert requests_to(url, "/batch_judge") == before["/batch_judge"]  # no reward went the pointwise way
    steps = logged_metrics((save_dir / "launch" / "train.log").read_text())
    assert sorted(steps) == [1, 2]
