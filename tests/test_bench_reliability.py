"""The reliability harnesses (benchmarks/fuzz_api.py, fuzz_parsers.py, soak_adapter.py,
train_through_judge_failure.py) in short runs: they count what they claim to count, and they report the
failures they exist to find when pointed at something broken."""

from __future__ import annotations

import http.server
import json
import threading
import time

import pytest

from benchmarks import soak_adapter
from benchmarks.fuzz_api import ApiLimits, fuzz_judge, fuzz_server
from benchmarks.fuzz_client import fuzz_client
from benchmarks.fuzz_parsers import fuzz_parsers, parser_targets
from benchmarks.reliability import RestartableJudge
from benchmarks.train_through_judge_failure import dump_sources
from judge_core import grpo_rewards
from judge_core.protocol import templates
from judge_rewards import JudgeRewardSystem

LIMITS = ApiLimits()


def test_the_parsers_and_reward_functions_keep_their_properties():
    results = fuzz_parsers(examples=120, seed=0)
    assert set(results) == {
        "parse_pointwise",
        "parse_pairwise",
        "parse_pairwise with ties",
        "compute_pointwise_score",
        "compute_pointwise_recall_score",
        "compute_pairwise_score",
    }
    for name, run in results.items():
        assert run["inputs_tried"] == 120, name
        assert run["violations"] == 0, (name, run["violation_examples"])


def fuzz_one_parser(parse) -> dict:
    return fuzz_parsers(
        examples=60, seed=0, targets={"parse_pointwise": parser_targets(parse_pointwise=parse)["parse_pointwise"]}
    )["parse_pointwise"]


def test_a_parser_that_answers_out_of_range_is_reported():
    run = fuzz_one_parser(lambda text: templates.Judgement(7))
    assert run["violations"] == run["inputs_tried"] == 60
    assert "ok with value 7 outside [0, 1, 2, 3, 4]" in run["violation_examples"][0]["problem"]


def test_a_parser_that_raises_on_non_text_is_reported():
    run = fuzz_one_parser(lambda text: templates.parse_pointwise(text.strip()))
    raised = run["by_kind"]["not text"]["raised AttributeError"]  # bytes have a strip(): those parse as before
    assert run["violations_by_kind"] == {"not text": raised} and raised > 0


def test_a_recall_reward_that_pays_without_the_recall_is_reported():
    def pays_every_grade(data_source, answer, ground_truth, extra_info=None):
        label = templates.read_ground_truth(ground_truth)["score"]
        graded = grpo_rewards.compute_pointwise_score(data_source, answer, templates.pointwise_ground_truth(label))
        return {**graded, "recall_ok": 1.0}

    target = parser_targets(recall_reward=pays_every_grade)["compute_pointwise_recall_score"]
    run = fuzz_parsers(examples=60, seed=0, targets={"recall": target})["recall"]
    assert run["violations_by_kind"]["recalling answer"] > 0
    assert any("never states the correct answer" in v["problem"] for v in run["violation_examples"])


@pytest.fixture
def broken_judge_app():
    """An HTTP server that breaks the judge API: /judge answers 200 with a score of 7, /batch_judge 500."""

    class Broken(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("content-length") or 0))
            if self.path == "/judge":
                self._answer(200, {"score": 7, "request_id": "not-yours"})
            elif self.path == "/batch_judge":
                self._answer(500, {"detail": "broken"})
            else:
                self._answer(404, {"detail": "Not Found"})

        def do_GET(self):
            self._answer(200, {"status": "ok"} if self.path == "/health" else {"detail": "x"})

        def _answer(self, status: int, body: dict):
            payload = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Broken)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_http_fuzz_reports_5xx_and_broken_answers_of_a_broken_app(broken_judge_app):
    run = fuzz_server(broken_judge_app, LIMITS, examples=80, seed=0)
    assert run["inputs_tried"] == 80
    assert run["five_xx"] >= run["by_result"]["500"] > 0  # and 501 for the methods http.server does not know
    problems = [v["problem"] for v in run["violation_examples"]]
    assert any(p.startswith("500: ") for p in problems), problems
    assert any("score 7 outside [0, 1]" in p for p in problems), problems
    assert run["end"]["alive"] is False and run["end"]["judge_status"] == 200  # its /judge gives no valid score


def test_the_real_rule_judge_server_keeps_the_api_under_the_http_fuzz(tmp_path):
    run = fuzz_judge("rule", tmp_path, LIMITS, examples=60, seed=0)
    assert run["inputs_tried"] == sum(run["by_result"].values()) == 60
    assert (run["five_xx"], run["violations"]) == (0, 0), run["violation_examples"]
    assert run["end"] == {
        "alive": True,
        "health_status": 200,
        "judge_status": 200,
        "judge_score": 1.0,
        "process_running": True,
    }


def test_the_adapter_turns_every_malformed_answer_into_a_prompt_rule_fallback():
    run = fuzz_client(examples=60, seed=0)
    assert run["inputs_tried"] == 60 and set(run["by_result"]) == {"judge", "rule_fallback"}
    assert run["violations"] == 0, run["violation_examples"]


def test_the_client_fuzz_reports_an_adapter_that_raises_instead_of_falling_back():
    run = fuzz_client(
        examples=40, seed=0, adapter_factory=lambda config: JudgeRewardSystem({**config, "fallback_to_rule": False})
    )
    assert run["by_result"].get("raised JudgeUnavailableError", 0) == run["violations"] > 0
    assert "judge" in run["by_result"]  # the valid answers still score


def test_the_soak_counts_lost_late_and_never_returning_calls():
    never = threading.Event()

    def reward_one(caller: int, number: int) -> dict:
        if caller == 0:
            raise RuntimeError("lost")
        if caller == 1:
            return {"reward": None, "source": "judge"}
        if caller == 2 and number == 0:
            time.sleep(1.5)
        if caller == 3:
            never.wait()
        return {"reward": 1.0, "source": "cache"}

    try:
        calls = soak_adapter.drive_callers(reward_one, callers=5, duration_s=2, hang_after_s=1, pause_s=0.01)
    finally:
        never.set()
    assert calls["lost"] > 0 and all("RuntimeError" in e or "None" in e for e in calls["lost_examples"])
    assert (calls["returned_late"], calls["not_returned"], calls["hung"]) == (1, 1, 2)
    assert calls["by_source"]["cache"] > 0 and calls["by_source"]["judge"] == 0
    assert calls["calls"] == calls["lost"] + sum(calls["by_source"].values())


def test_a_short_soak_through_kills_loses_and_hangs_nothing(tmp_path):
    args = soak_adapter.parse_args(
        ["--duration", "6", "--callers", "8", "--kill-every", "2", "--down-for", "1", "--max-retries", "1"]
    )
    with RestartableJudge(["--judge", "rule", "--log-level", "warning"], tmp_path / "server.log") as judge:
        results = soak_adapter.soak(judge, args)
    calls = results["calls"]
    assert results["faults"]["kills"] >= 1
    assert calls["lost"] == 0 and calls["hung"] == 0, calls
    assert all(calls["by_source"][source] > 0 for source in soak_adapter.SOURCES), calls["by_source"]
    assert results["memory"]["samples"] >= 3 and results["memory"]["client"]["peak_mib"] > 0


def test_reward_sources_are_read_from_verls_dump_and_bad_tags_counted(tmp_path):
    answers = [
        {"score": 0.4, "source": "judge", "from_rule_fallback": 0.0, "from_cache": 0.0},
        {"score": 1.0, "source": "rule_fallback", "from_rule_fallback": 1.0, "from_cache": 0.0},
        {"score": 0.4, "source": "cache", "from_rule_fallback": 0.0, "from_cache": 1.0},
        {"score": 0.4, "from_rule_fallback": 0.0, "from_cache": 0.0},
        {"score": 0.4, "source": "judge", "from_rule_fallback": 1.0, "from_cache": 0.0},
    ]
    (tmp_path / "2.jsonl").write_text("\n".join(json.dumps(a) for a in answers[:3]) + "\n")
    (tmp_path / "10.jsonl").write_text("\n".join(json.dumps(a) for a in answers[3:]) + "\n")
    sources = dump_sources(tmp_path)
    assert sources["by_step"] == {
        2: {"judge": 1, "cache": 1, "rule_fallback": 1, "untagged": 0},
        10: {"judge": 0, "cache": 0, "rule_fallback": 0, "untagged": 2},
    }
    assert sources["total"] == {"judge": 1, "cache": 1, "rule_fallback": 1, "untagged": 2}
    assert sources["problems"] == ["10.jsonl:1: source None", "10.jsonl:2: from_rule_fallback 1.0 with source 'judge'"]
