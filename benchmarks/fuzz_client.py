"""The reward adapter under malformed judge answers; part of `python -m benchmarks.fuzz_api`.

A scripted judge (http.server on 127.0.0.1) answers each POST /batch_judge with what hypothesis draws: valid
answers (also with extra responses), HTTP errors, bodies that are not JSON or not the API's shape, unknown
request ids, scores out of range or of the wrong type, per-item errors. For each reward() of the adapter
(JudgeRewardSystem: rule fallback on, cache off, no retries, a circuit that never opens, so that every call
reaches the scripted judge):
- it returns a reward dict (nothing raised, nothing lost);
- its source is `judge` when the answer was valid for the request, `rule_fallback` when it was not (either,
  for answers whose optional fields are odd);
- a failed answer settles the request at once: the caller never waits out the adapter's result_timeout
  ("Timeout waiting for results"), which is what a request left unsettled by a malformed 200 costs.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from hypothesis import strategies as st

from benchmarks.fuzz_parsers import JSON_VALUES
from benchmarks.reliability import Outcome, excerpt, run_property
from judge_rewards import JudgeRewardSystem

TIMEOUT_S = 2.0  # one HTTP attempt; the caller's result_timeout follows from it
ITEM = {"prompt": "What is 2 + 2?", "completion": "It is 4.", "answer": "4", "answer_type": "NUMBER"}


@dataclass
class ScriptedAnswer:
    """How the scripted judge answers one batch: `build(request_ids) -> (status, body)`, and the reward source
    that answer must lead to (None: either)."""

    kind: str
    source: str | None
    build: Callable[[list[str]], tuple[int, bytes]]

    def __repr__(self) -> str:
        status, body = self.build(["<id>"])
        return f"{self.kind}: {status} {body[:200]!r}"


def _json(status: int, payload) -> tuple[int, bytes]:
    return status, json.dumps(payload).encode()


def _response(request_id, **fields) -> dict:
    return {"request_id": request_id, "explanation": "", "metadata": {}, **fields}


SCORES = st.floats(0, 1)
BAD_SCORES = st.one_of(
    st.floats(allow_nan=False).filter(lambda score: not 0 <= score <= 1),
    st.integers().filter(lambda score: not 0 <= score <= 1),
    st.integers(10**308, 10**400),  # too large for a float
    st.booleans(),
    st.text(max_size=5),
    st.lists(st.integers(), max_size=2),
)
RESPONSE_FIELDS = st.sampled_from(["request_id", "score", "error", "explanation", "metadata", "detailed_scores"])
ANY_VALUES = st.one_of(JSON_VALUES, st.integers(10**308, 10**400))


def answers() -> st.SearchStrategy[ScriptedAnswer]:
    judge, fallback = "judge", "rule_fallback"
    valid = SCORES.map(
        lambda score: ScriptedAnswer(
            "valid", judge, lambda ids: _json(200, {"responses": [_response(i, score=score) for i in ids]})
        )
    )
    with_extra = st.tuples(SCORES, st.text(max_size=10)).map(
        lambda drawn: ScriptedAnswer(
            "valid, with an extra response",
            judge,
            lambda ids: _json(
                200,
                {"responses": [_response("x" + drawn[1], score=0.5), *(_response(i, score=drawn[0]) for i in ids)]},
            ),
        )
    )
    odd_optional_fields = st.tuples(
        SCORES, st.dictionaries(st.sampled_from(["explanation", "metadata", "detailed_scores"]), ANY_VALUES)
    ).map(
        lambda drawn: ScriptedAnswer(
            "200, odd explanation / metadata / detailed_scores",
            None,
            lambda ids: _json(200, {"responses": [{**_response(i, score=drawn[0]), **drawn[1]} for i in ids]}),
        )
    )
    bad_score = BAD_SCORES.map(
        lambda score: ScriptedAnswer(
            "200, score out of range or not a number",
            fallback,
            lambda ids: _json(200, {"responses": [_response(i, score=score) for i in ids]}),
        )
    )
    item_error = st.one_of(st.none(), st.text(max_size=20)).map(
        lambda error: ScriptedAnswer(
            "200, null score (with or without an error)",
            fallback,
            lambda ids: _json(200, {"responses": [_response(i, score=None, error=error) for i in ids]}),
        )
    )
    unknown_ids = st.one_of(
        st.text(max_size=12).map(lambda other: lambda i: i + "?" + other), ANY_VALUES.map(lambda v: lambda i: v)
    ).map(
        lambda other_id: ScriptedAnswer(
            "200, answers for other request ids (of any JSON type)",
            fallback,
            lambda ids: _json(200, {"responses": [_response(other_id(i), score=0.5) for i in ids]}),
        )
    )
    wrong_shape = st.one_of(
        JSON_VALUES,
        st.fixed_dictionaries({"responses": JSON_VALUES.filter(lambda value: not isinstance(value, list))}),
        st.fixed_dictionaries(
            {"responses": st.lists(st.dictionaries(RESPONSE_FIELDS, ANY_VALUES), min_size=1, max_size=3)}
        ),
        st.fixed_dictionaries(
            {"responses": st.lists(JSON_VALUES.filter(lambda v: not isinstance(v, dict)), min_size=1)}
        ),
    ).map(lambda body: ScriptedAnswer("200, JSON not of the API's shape", fallback, lambda ids: _json(200, body)))
    not_json = st.one_of(
        st.binary(max_size=50),
        st.just(b'{"responses": ['),
        st.integers(1, 100_000).map(lambda n: b'{"responses": ' + b"[" * n + b"]" * n + b"}"),
    ).map(lambda body: ScriptedAnswer("200, not JSON or nested too deep", fallback, lambda ids: (200, body)))
    http_error = st.tuples(st.sampled_from([400, 401, 404, 408, 413, 422, 429, 500, 502, 503]), JSON_VALUES).map(
        lambda drawn: ScriptedAnswer("HTTP error status", fallback, lambda ids: _json(drawn[0], {"detail": drawn[1]}))
    )
    return st.one_of(
        valid, with_extra, odd_optional_fields, bad_score, item_error, unknown_ids, wrong_shape, not_json, http_error
    )


class ScriptedJudge:
    """An HTTP server on 127.0.0.1 whose POST /batch_judge answers with `self.answer`."""

    def __init__(self):
        self.answer: ScriptedAnswer | None = None
        scripted = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                status, payload = scripted.answer.build([r["request_id"] for r in body["requests"]])
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def adapter_config(url: str) -> dict:
    return {
        "judge_url": url,
        "use_cache": False,
        "batch_timeout": 0,
        "timeout": TIMEOUT_S,
        "max_retries": 0,
        "circuit_breaker_threshold": 10**9,
    }


def reward_check(judge: ScriptedJudge, adapter) -> Callable[[ScriptedAnswer], Outcome]:
    def check(answer: ScriptedAnswer) -> Outcome:
        judge.answer = answer
        started = time.monotonic()
        try:
            reward = adapter.reward(**ITEM)
        except Exception as err:  # the property under test: the adapter always returns a reward
            return Outcome(answer.kind, f"raised {type(err).__name__}", [f"raised {type(err).__name__}: {err}"])
        elapsed = time.monotonic() - started
        source = reward.get("source") if isinstance(reward, dict) else None
        problems = []
        if source not in ("judge", "rule_fallback") or answer.source not in (None, source):
            problems.append(
                f"source {source!r} where {answer.source or 'judge or rule_fallback'} was due: {excerpt(reward)}"
            )
        if "Timeout waiting for results" in str(reward.get("error")):
            problems.append(f"the caller waited out result_timeout ({elapsed:.1f} s): the answer never settled it")
        return Outcome(answer.kind, str(source), problems)

    return check


def fuzz_client(examples: int, seed: int, adapter_factory=JudgeRewardSystem) -> dict:
    """Counts by scripted answer kind and reward source, broken properties, and the slowest call."""
    judge = ScriptedJudge()
    try:
        with adapter_factory(adapter_config(judge.url)) as adapter:
            started = time.monotonic()
            results = run_property(answers(), reward_check(judge, adapter), examples, seed)
            results["wall_s"] = round(time.monotonic() - started, 1)
    finally:
        judge.close()
    return results
