"""How the evaluation's HTTP judge (the reward adapter's /batch_judge client underneath) turns server trouble
into failed judgements (never into scores), against a stub server on 127.0.0.1 that misbehaves on purpose."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evaluation.cli import main
from evaluation.judges import EvaluationError, HttpJudge, HttpJudgeOptions
from serving.judges import JudgeItem

EVALUATION_README = Path(__file__).resolve().parents[1] / "evaluation" / "README.md"

HEALTH = {"status": "ok", "judge_kind": "scalar", "backend": "transformers", "model_id": "stub", "model_version": "v0"}
ITEMS = [JudgeItem(prompt="q", completion="a"), JudgeItem(prompt="q", completion="b")]


class StubJudgeServer(BaseHTTPRequestHandler):
    """GET /health answers; POST /batch_judge answers as `behaviour` says and counts its calls."""

    behaviour = "ok"
    calls = 0
    answers: list = []

    def do_GET(self):
        self._answer(200, HEALTH)

    def do_POST(self):
        type(self).calls += 1
        requests = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["requests"]
        if self.behaviour == "unavailable":
            return self._answer(503, {"detail": "queue full"})
        if self.behaviour == "bad_request":
            return self._answer(422, {"detail": "invalid"})
        type(self).answers += [r.get("answer") for r in requests]
        responses = [
            {
                "score": (i + 1) / (len(requests) + 2),
                "request_id": r["request_id"],
                "error": None,
                "metadata": {"raw_reward": i - 1.5},
            }
            for i, r in enumerate(requests)
        ]
        if self.behaviour == "pairwise":  # 1 when the completion is the reference, else 0; orders agree on "ok"
            for response, request in zip(responses, requests, strict=True):
                response["score"] = float(request["completion"] == request.get("answer"))
                response["metadata"] = {"orders_agree": request["completion"].startswith("ok")}
        if self.behaviour == "drops_one":
            responses = responses[1:]
        if self.behaviour == "reversed":
            responses.reverse()
        self._answer(200, {"responses": responses})

    def _answer(self, status, body):
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def stub_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), StubJudgeServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    StubJudgeServer.calls = 0
    StubJudgeServer.answers = []
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def judged(url, behaviour, max_retries=0, items=ITEMS):
    """The verdicts for `items` from a stub server behaving as `behaviour` says."""
    StubJudgeServer.behaviour = behaviour
    with HttpJudge(HttpJudgeOptions(url, max_retries=max_retries, timeout=10), batch_size=len(items)) as judge:
        return judge.score_batch(items)


def test_results_are_matched_by_request_id_not_position(stub_url):
    assert [v.score for v in judged(stub_url, "reversed")] == [0.25, 0.5]


def test_the_judge_is_identified_by_its_health_answer(stub_url):
    with HttpJudge(HttpJudgeOptions(stub_url), batch_size=len(ITEMS)) as judge:
        assert judge.identity == {
            "kind": "scalar",
            "backend": "transformers",
            "model_id": "stub",
            "model_version": "v0",
            "reads_answer": None,  # the stub does not say
            "access": f"HTTP {stub_url}",
        }


def test_a_missing_response_fails_only_its_item(stub_url):
    verdicts = judged(stub_url, "drops_one")
    assert verdicts[0].score is None and "no result for request_id" in verdicts[0].error
    assert verdicts[1].score == 0.5


def test_a_server_that_stays_unavailable_fails_the_batch_after_the_retries(stub_url):
    verdicts = judged(stub_url, "unavailable", max_retries=1)
    assert StubJudgeServer.calls == 2
    assert all(v.score is None and "HTTP 503" in v.error and "(attempts: 2)" in v.error for v in verdicts)


def test_a_rejected_request_stops_the_evaluation(stub_url):
    with pytest.raises(EvaluationError, match="HTTP 422"):
        judged(stub_url, "bad_request", max_retries=3)
    assert StubJudgeServer.calls == 1


def test_the_items_of_one_call_go_out_in_one_request_with_their_metadata(stub_url):
    StubJudgeServer.behaviour = "ok"
    calls = [[JudgeItem(prompt="q", completion=f"answer {call} {number}") for number in range(300)] for call in (1, 2)]
    with HttpJudge(HttpJudgeOptions(stub_url), batch_size=300) as judge:
        judge.score_batch(calls[0])  # the second call finds the client's worker waiting for work
        verdicts = judge.score_batch(calls[1])
    assert StubJudgeServer.calls == 2
    assert [v.metadata["raw_reward"] for v in verdicts] == [number - 1.5 for number in range(300)]


def test_failing_batches_never_open_a_circuit_that_would_fail_later_ones_unsent(stub_url):
    StubJudgeServer.behaviour = "unavailable"
    batches = 8  # more than the reward adapter's default circuit_breaker_threshold (5)
    with HttpJudge(HttpJudgeOptions(stub_url, max_retries=0), batch_size=len(ITEMS)) as judge:
        verdicts = [verdict for _ in range(batches) for verdict in judge.score_batch(ITEMS)]
    assert StubJudgeServer.calls == batches
    assert all("HTTP 503" in v.error for v in verdicts)


def test_an_http_run_sends_references_and_reports_what_the_server_says_of_both_orders(stub_url, tmp_path):
    StubJudgeServer.behaviour = "pairwise"
    rows = [
        {"id": "a", "prompt": "q", "chosen": ["ok 1"], "rejected": ["no", "ok 2"], "subset": "S", "reference": "ok 1"},
        {"id": "b", "prompt": "q", "chosen": ["ok 3"], "rejected": ["no"], "subset": "S", "reference": "ok 3"},
    ]
    data = tmp_path / "ref.parquet"
    pq.write_table(pa.Table.from_pylist(rows), data)
    main(
        [
            "--data",
            str(data),
            "--out",
            str(tmp_path / "out"),
            "--judge-url",
            stub_url,
            "--reference-column",
            "reference",
        ]
    )
    assert StubJudgeServer.answers == ["ok 1", "ok 1", "ok 1", "ok 3", "ok 3"]
    document = json.loads((tmp_path / "out" / "results.json").read_text())
    assert document["score"] == 1.0
    assert document["position_consistency"] == {
        "share": 3 / 5,
        "completions": 5,
        "agreeing": 3,
        "correct_completions": {"share": 1.0, "completions": 2, "agreeing": 2},
        "incorrect_completions": {"share": 1 / 3, "completions": 3, "agreeing": 1},
    }
    assert document["tied_completions"]["tied"] == 2  # row a: "no" and "ok 2" both score 0
    report = (tmp_path / "out" / "report.md").read_text()
    shown = [line for line in report.splitlines() if line.startswith(("- Failed rows", "- Tied", "- Position"))]
    assert len(shown) == 3 and all(line in EVALUATION_README.read_text().splitlines() for line in shown), shown
    assert document["config"]["evaluation"]["reference_column"] == "reference"
