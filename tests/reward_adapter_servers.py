"""HTTP servers for the reward adapter tests, all on 127.0.0.1, and the adapter the fault tests point at them.

- start_rule_server: the project's real judge server (`python -m serving --judge rule`); it can be
  SIGKILLed and started again on the same port, so that a client configured with its URL sees it return.
- FaultyJudgeServer: a tiny in-process server for faults the real server cannot produce on demand
  (garbage bodies, malformed values, HTTP errors, slowness, reordered or missing answers, holding requests).
- make_system / item: a JudgeRewardSystem with short timeouts, and a NUMBER item the server and the rules
  both score.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from judge_rewards import JudgeRewardSystem
from tests.support.servers import RunningServer, start_server


def start_rule_server(log_path: Path, *extra_args: str, port: int | None = None) -> RunningServer:
    """The project's real judge server with its rule judge (tests.support.servers.start_server)."""
    return start_server(["--judge", "rule", "--log-level", "warning", *extra_args], log_path, port=port)


def make_system(url: str, **overrides) -> JudgeRewardSystem:
    """A reward adapter for `url` with timeouts short enough for tests."""
    config = {
        "judge_url": url,
        "max_retries": 1,
        "timeout": 5.0,
        "batch_timeout": 0.05,
        "circuit_breaker_threshold": 3,
        "circuit_breaker_timeout": 30.0,
        **overrides,
    }
    return JudgeRewardSystem(config)


def item(n: int, completion: str | None = None) -> dict:
    """reward() arguments for "What is n?": FaultyJudgeServer scores it n / 1000, the rules 1.0 (or by `completion`)."""
    return {
        "prompt": f"What is {n}?",
        "completion": completion or f"\\boxed{{{n}}}",
        "answer": str(n),
        "answer_type": "NUMBER",
    }


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client that gave up on a slow answer
            super().handle_error(request, client_address)


class FaultyJudgeServer:
    """Answers each POST /batch_judge by the next mode of `script`, or by `mode` once the script is used up:
    ok        score = float(answer) / 1000 for each item (distinct scores), in reversed order
    garbage   200 with a body that is not JSON
    shapeless 200 with JSON that has no `responses` list
    deep_json 200 with JSON nested deeper than a JSON parser recurses (RecursionError, not ValueError)
    list_id   200 with JSON whose first response has a list as its request_id
    huge_score  as ok, but the first item's score is the integer HUGE_SCORE (too large for a float)
    status    HTTP `status` (with `retry_after` seconds as Retry-After when set)
    slow      sleeps `delay` seconds, then answers as ok
    hold      holds the request until `release` is set, then answers as ok
    drop_first / bad_score / item_error   as ok, but the first item gets no answer / score 1.7 /
              score null with an error
    It records each request's item count (`batch_sizes`) and arrival time (`arrivals`, time.monotonic),
    and the most requests it ever handled at once (`most_at_once`).
    """

    HUGE_SCORE = 10**400

    def __init__(self):
        self.mode = "ok"
        self.script: list[str] = []
        self.status = 500
        self.retry_after: str | None = None
        self.delay = 0.0
        self.release = threading.Event()
        self.received = threading.Event()
        self.batch_sizes: list[int] = []
        self.arrivals: list[float] = []
        self.most_at_once = 0
        self._at_once = 0
        self._lock = threading.Lock()
        self._server = _QuietServer(("127.0.0.1", 0), self._handler_class())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def requests_received(self) -> int:
        with self._lock:
            return len(self.batch_sizes)

    @property
    def items_received(self) -> int:
        with self._lock:
            return sum(self.batch_sizes)

    def close(self) -> None:
        self.release.set()
        self._server.shutdown()
        self._server.server_close()

    def handle(self, body: dict) -> tuple[int, bytes, dict]:
        with self._lock:
            self.arrivals.append(time.monotonic())
            self.batch_sizes.append(len(body["requests"]))
            mode = self.script.pop(0) if self.script else self.mode
            self._at_once += 1
            self.most_at_once = max(self.most_at_once, self._at_once)
        self.received.set()
        try:
            return self._answer(mode, body["requests"])
        finally:
            with self._lock:
                self._at_once -= 1

    def _answer(self, mode: str, requests: list[dict]) -> tuple[int, bytes, dict]:
        if mode == "garbage":
            return 200, b"<html>upstream proxy error</html>", {}
        if mode == "shapeless":
            return 200, json.dumps({"results": "none"}).encode(), {}
        if mode == "deep_json":
            return 200, b'{"responses": ' + b"[" * 10_000 + b"]" * 10_000 + b"}", {}
        if mode == "status":
            return (
                self.status,
                b'{"detail": "failing on purpose"}',
                {"Retry-After": self.retry_after} if self.retry_after else {},
            )
        if mode == "slow":
            time.sleep(self.delay)
        if mode == "hold":
            self.release.wait(30)
        responses = [
            {"request_id": r["request_id"], "score": float(r["answer"]) / 1000, "explanation": f"item {r['answer']}"}
            for r in requests
        ]
        if mode == "drop_first":
            responses = responses[1:]
        if mode == "bad_score":
            responses[0]["score"] = 1.7
        if mode == "huge_score":
            responses[0]["score"] = self.HUGE_SCORE
        if mode == "list_id":
            responses[0]["request_id"] = [responses[0]["request_id"]]
        if mode == "item_error":
            responses[0].update(score=None, error="judge output unparsable")
        return 200, json.dumps({"responses": responses[::-1]}).encode(), {}

    def _handler_class(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status, payload, headers = server.handle(body)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        return Handler
