"""HTTP servers for the reward adapter tests, all on 127.0.0.1.

- start_rule_server: the project's real judge server (`python -m serving --judge rule`); it can be
  SIGKILLed and started again on the same port, so that a client configured with its URL sees it return.
- FaultyJudgeServer: a tiny in-process server for faults the real server cannot produce on demand
  (garbage bodies, HTTP errors, slowness, reordered or missing answers, holding requests).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.support.servers import RunningServer, start_server


def start_rule_server(log_path: Path, *extra_args: str, port: int | None = None) -> RunningServer:
    """The project's real judge server with its rule judge (tests.support.servers.start_server)."""
    return start_server(["--judge", "rule", "--log-level", "warning", *extra_args], log_path, port=port)


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client that gave up on a slow answer
            super().handle_error(request, client_address)


class FaultyJudgeServer:
    """Answers POST /batch_judge according to `mode`:
    ok        score = float(answer) / 1000 for each item (distinct scores), in reversed order
    garbage   200 with a body that is not JSON
    shapeless 200 with JSON that has no `responses` list
    status    HTTP `status` (with `retry_after` seconds as Retry-After when set)
    slow      sleeps `delay` seconds, then answers as ok
    hold      holds every request until `release` is set, then answers as ok
    drop_first / bad_score / item_error   as ok, but the first item gets no answer / score 1.7 /
              score null with an error
    """

    def __init__(self):
        self.mode = "ok"
        self.status = 500
        self.retry_after: str | None = None
        self.delay = 0.0
        self.release = threading.Event()
        self.received = threading.Event()
        self.items_received = 0
        self.requests_received = 0
        self._lock = threading.Lock()
        self._server = _QuietServer(("127.0.0.1", 0), self._handler_class())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self._server.shutdown()
        self._server.server_close()

    def answer(self, body: dict) -> tuple[int, bytes, dict]:
        requests = body["requests"]
        with self._lock:
            self.requests_received += 1
            self.items_received += len(requests)
        self.received.set()
        if self.mode == "garbage":
            return 200, b"<html>upstream proxy error</html>", {}
        if self.mode == "shapeless":
            return 200, json.dumps({"results": "none"}).encode(), {}
        if self.mode == "status":
            return (
                self.status,
                b'{"detail": "failing on purpose"}',
                {"Retry-After": self.retry_after} if self.retry_after else {},
            )
        if self.mode == "slow":
            time.sleep(self.delay)
        if self.mode == "hold":
            self.release.wait(30)
        responses = [
            {"request_id": r["request_id"], "score": float(r["answer"]) / 1000, "explanation": f"item {r['answer']}"}
            for r in requests
        ]
        if self.mode == "drop_first":
            responses = responses[1:]
        if self.mode == "bad_score":
            responses[0]["score"] = 1.7
        if self.mode == "item_error":
            responses[0].update(score=None, error="judge output unparsable")
        return 200, json.dumps({"responses": responses[::-1]}).encode(), {}

    def _handler_class(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status, payload, headers = server.answer(body)
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
