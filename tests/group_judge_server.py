"""A tiny in-process /judge_group server that follows the contract of issue 29 (serving's route is the real one):
its planted pairwise judges let the client tests know every reward in advance.

- "longer": P(a better than b) is 1 when a is longer, 0 when shorter, 0.5 on a tie.
- "always_a": a judge that always answers "A", which the real pairwise judge asks in both orders and averages:
  P(a better than b) = (1 + 0) / 2 = 0.5 for every pair.
Like the real route, every pair (i < j) is compared once.
A completion containing FAIL fails all its comparisons; the server keeps every request's body, path and
Authorization header.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class GroupJudgeServer:
    def __init__(self, judge: str = "longer", api_key: str | None = None, status: int = 200, mangle=None):
        """`mangle`: a function that rewrites each answer body (a server breaking the contract)."""
        self.judge, self.api_key, self.status, self.mangle = judge, api_key, status, mangle
        self.bodies: list[dict] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def prefers(self, a: str, b: str) -> float:
        if self.judge == "always_a":
            return (1.0 + 0.0) / 2  # "A" in both orders: the first response wins once, loses once
        return 1.0 if len(a) > len(b) else 0.0 if len(a) < len(b) else 0.5

    def answer(self, body: dict) -> dict:
        completions = body["completions"]
        n = len(completions)
        wins, counts, failed = [0.0] * n, [0] * n, [0] * n
        pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
        for i, j in pairs:
            if "FAIL" in completions[i] or "FAIL" in completions[j]:
                failed[i] += 1
                failed[j] += 1
                continue
            p = self.prefers(completions[i], completions[j])
            wins[i], wins[j] = wins[i] + p, wins[j] + 1 - p
            counts[i] += 1
            counts[j] += 1
        rewards = [
            {
                "score": wins[i] / counts[i] if counts[i] else None,
                "comparisons": counts[i],
                "failed": failed[i],
                "error": f"{failed[i]} comparisons failed: planted FAIL" if failed[i] else None,
            }
            for i in range(n)
        ]
        return {
            "request_id": body.get("request_id"),
            "rewards": rewards,
            "schedule": body.get("schedule", "all_pairs"),
            "comparisons_run": len(pairs),
            "metadata": {"judge": self.judge},
        }

    def _handler_class(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    server.bodies.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
                if server.api_key and self.headers.get("Authorization") != f"Bearer {server.api_key}":
                    status, answer = 401, {"detail": "bad key"}
                elif self.path != "/judge_group" or server.status != 200:
                    status, answer = (server.status if server.status != 200 else 404), {"detail": "no"}
                else:
                    status, answer = 200, server.answer(body)
                    if server.mangle is not None:
                        answer = server.mangle(answer)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        return Handler
