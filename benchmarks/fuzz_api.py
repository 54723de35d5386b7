"""Reliability figure: a bounded property-based fuzz of the judge server's HTTP API (a real server process),
of the reward adapter under malformed judge answers (benchmarks.fuzz_client) and of the judge-answer parsers
and GRPO reward functions (benchmarks.fuzz_parsers).

    python -m benchmarks.fuzz_api          # rule and tiny scalar judge, 3000 requests each (~10 min on 2 busy cores)
    python -m benchmarks.fuzz_api --judges rule --http-examples 200 --client-examples 100 --parser-examples 300 \
        --name fuzz_smoke

hypothesis draws requests: every route with every method; /judge and /batch_judge bodies of the API's shapes
with fields of random types, sizes (up to and past the server's limits, which are set low so that crossing
them is cheap) and unicode (lone surrogates included); batches with duplicate ids, oversized or invalid
items; invalid and deeply nested JSON; bodies past the size limit, with and without a Content-Length. Each
request carries an expectation: ACCEPT (valid by the API: 200; a text over the limit is that item's error,
a number or boolean answer or request_id is read as its text), REJECT (invalid: a 4xx with a JSON `detail`)
or EITHER (no contract but the general ones). A violation is any 5xx, no answer at all, an expectation not
met, or a 200 that breaks the API: a score outside [0, 1], a null score without an error, a request id not
echoed in its wire text, not one response per request in order, an item over the text limit scored. The
server must still answer GET /health and a valid POST /judge at the end.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from hypothesis import strategies as st

from benchmarks.common import exit_on_sigterm, markdown_table, write_results
from benchmarks.fuzz_client import fuzz_client
from benchmarks.fuzz_parsers import JSON_VALUES, fuzz_parsers
from benchmarks.reliability import (
    Outcome,
    excerpt,
    judge_server_args,
    load_average,
    run_property,
    tiny_model,
    tiny_scalar_judge,
)
from judge_core.protocol.judge_api import scalar_text
from tests.support.servers import start_server

ACCEPT, REJECT, EITHER = "accept", "reject", "either"
FIELDS = ("prompt", "completion", "answer", "answer_type", "request_id")
ROLES = ("system", "user", "assistant")
ANSWER_TYPES = ("NUMBER", "MATH_EXPRESSIONS", "MULTIPLE_CHOICE", "BOOLEAN", "TEXT")
REQUEST_ID_MAX_CHARS = 256
JUDGE_ROUTES = ("/judge", "/batch_judge")
READ_ROUTES = ("/health", "/metrics", "/openapi.json")
MISSING = object()  # a mutation that removes the field
REQUEST_TIMEOUT_S = 60


@dataclass(frozen=True)
class ApiLimits:
    """The server's request limits during the fuzz: low, so that requests past them are cheap to send."""

    max_text_chars: int = 1000
    max_batch_requests: int = 32
    max_body_bytes: int = 300_000

    def server_flags(self) -> list[str]:
        return [
            "--max-text-chars",
            str(self.max_text_chars),
            "--max-batch-requests",
            str(self.max_batch_requests),
            "--max-body-bytes",
            str(self.max_body_bytes),
        ]


@dataclass
class Judged:
    """What a 200 answer to a judge request must hold: one response per sent id (None: any id), in order;
    the items at `oversized` answered with an error."""

    ids: list[str | None]
    batch: bool
    oversized: list[int] = field(default_factory=list)


@dataclass
class Case:
    kind: str
    method: str
    path: str
    expect: str
    body: bytes | None = None
    content_type: str | None = "application/json"
    chunked: bool = False
    judged: Judged | None = None

    def __repr__(self) -> str:
        body = self.body.decode("utf-8", "backslashreplace") if self.body is not None else ""
        return f"{self.method} {self.path} ({self.content_type}{', chunked' if self.chunked else ''}) {body}"


# --- request bodies ------------------------------------------------------------------------------------------

SHORT_TEXT = st.text(max_size=60)
SPECIAL_TEXTS = st.sampled_from(["", " ", "4", "\x00", "\u202e", "🙂" * 5, "<score>4</score>", "null", "\\", '"'])
SURROGATE_TEXTS = st.tuples(
    SHORT_TEXT, st.text(st.characters(categories=["Cs"]), min_size=1, max_size=3), SHORT_TEXT
).map("".join)
NOT_JSON_OBJECTS = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=10), st.lists(JSON_VALUES))
WRONG_TYPES = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.lists(st.text(max_size=5), max_size=3)
)
NUMBERS = st.one_of(st.integers(-(10**12), 10**12), st.floats(allow_nan=False, allow_infinity=False), st.booleans())


def texts(limits: ApiLimits) -> st.SearchStrategy[str]:
    """Any unicode, special strings, and plain texts of any length up to the limit."""
    sized = st.integers(0, limits.max_text_chars).map(lambda n: "x" * n)
    return st.one_of(SHORT_TEXT, SPECIAL_TEXTS, sized)


def oversized_texts(limits: ApiLimits) -> st.SearchStrategy[str]:
    return st.integers(limits.max_text_chars + 1, 2 * limits.max_text_chars).map(lambda n: "y" * n)


def messages(text: st.SearchStrategy[str]) -> st.SearchStrategy[list]:
    message = st.fixed_dictionaries({"role": st.sampled_from(ROLES), "content": text})
    return st.lists(message, min_size=1, max_size=4)


def string_request_ids() -> st.SearchStrategy:
    return st.one_of(
        st.none(), st.text(max_size=40), st.text(min_size=REQUEST_ID_MAX_CHARS, max_size=REQUEST_ID_MAX_CHARS)
    )


@st.composite
def judge_request(draw, limits: ApiLimits, numbers: bool = False) -> dict:
    """A valid request; with `numbers`, its answer or request_id (or both) is a number or a boolean."""
    text = texts(limits)
    body = {"prompt": draw(st.one_of(text, messages(text))), "completion": draw(text)}
    optional = {
        "answer": st.one_of(st.none(), text),
        "answer_type": st.one_of(st.none(), st.sampled_from(ANSWER_TYPES), st.text(max_size=12)),
        "request_id": string_request_ids(),
    }
    for name, values in optional.items():
        if draw(st.booleans()):
            body[name] = draw(values)
    if numbers:
        for name in draw(st.sampled_from([("answer",), ("request_id",), ("answer", "request_id")])):
            body[name] = draw(NUMBERS)
    extra_keys = st.text(max_size=8).filter(lambda key: key not in FIELDS)
    body.update(draw(st.dictionaries(extra_keys, JSON_VALUES, max_size=2)))
    return body


def bad_prompts() -> st.SearchStrategy:
    good_message = {"role": "user", "content": "hi"}
    return st.one_of(
        WRONG_TYPES.filter(lambda value: not isinstance(value, str)),
        st.just([]),
        st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=2),
        st.lists(st.text(max_size=5), min_size=1, max_size=2),
        st.text(max_size=10).filter(lambda role: role not in ROLES).map(lambda role: [{"role": role, "content": "x"}]),
        WRONG_TYPES.filter(lambda v: not isinstance(v, str)).map(
            lambda v: [good_message, {"role": "user", "content": v}]
        ),
        st.just([{"role": "user"}]),
    )


def invalid_fields() -> st.SearchStrategy[tuple[str, object]]:
    """(field, value) that makes a request invalid by the API's schema (MISSING: the field left out)."""
    return st.one_of(
        st.tuples(st.sampled_from(["prompt", "completion"]), st.just(MISSING)),
        st.tuples(st.just("completion"), WRONG_TYPES.filter(lambda value: not isinstance(value, str))),
        st.tuples(st.just("prompt"), bad_prompts()),
        st.tuples(st.just("answer_type"), st.one_of(st.integers(), st.lists(st.integers(), max_size=2))),
        st.tuples(
            st.just("request_id"),
            st.one_of(
                st.text(min_size=REQUEST_ID_MAX_CHARS + 1, max_size=REQUEST_ID_MAX_CHARS + 40),
                st.lists(st.integers(), max_size=2),
                st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
            ),
        ),
        st.tuples(
            st.just("answer"),
            st.one_of(
                st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)
            ),
        ),
    )


def with_field(body: dict, name: str, value) -> dict:
    changed = {key: item for key, item in body.items() if key != name}
    if value is not MISSING:
        changed[name] = value
    return changed


@st.composite
def invalid_request(draw, limits: ApiLimits) -> dict:
    name, value = draw(invalid_fields())
    return with_field(draw(judge_request(limits)), name, value)


@st.composite
def oversized_request(draw, limits: ApiLimits) -> dict:
    """A valid request but for one text past the server's max_text_chars."""
    body = draw(judge_request(limits))
    name = draw(st.sampled_from(["prompt", "completion", "answer", "message"]))
    if name == "message":
        return {**body, "prompt": [{"role": "user", "content": draw(oversized_texts(limits))}]}
    return {**body, name: draw(oversized_texts(limits))}


@st.composite
def surrogate_request(draw, limits: ApiLimits) -> dict:
    name = draw(st.sampled_from(FIELDS))
    return {**draw(judge_request(limits)), name: draw(SURROGATE_TEXTS)}


def unique_ids(requests: list[dict]) -> list[dict]:
    """The requests with a repeated request_id (as the server reads it: as text) left out of later ones."""
    seen, unique = set(), []
    for request in requests:
        key = request.get("request_id")
        if key is not None and str(key) in seen:
            request = with_field(request, "request_id", MISSING)
        elif key is not None:
            seen.add(str(key))
        unique.append(request)
    return unique


def expected_echo(request: dict) -> str | None:
    """The request_id the response must carry (a number or boolean in its wire text); None when none was
    sent and the server picks one."""
    sent = request.get("request_id")
    return None if sent is None else scalar_text(sent, "request_id")


@st.composite
def encoded(draw, payload) -> bytes:
    """`payload` as JSON, escaped to ASCII or not (a lone surrogate then becomes bytes that are not UTF-8)."""
    return json.dumps(payload, ensure_ascii=draw(st.booleans())).encode("utf-8", "surrogatepass")


@st.composite
def judge_case(draw, kind: str, expect: str, request: st.SearchStrategy[dict], oversized: bool = False) -> Case:
    body = draw(request)
    judged = (
        Judged([expected_echo(body)], batch=False, oversized=[0] if oversized else []) if expect != REJECT else None
    )
    return Case(kind, "POST", "/judge", expect, draw(encoded(body)), judged=judged)


@st.composite
def batch_case(draw, kind: str, expect: str, items: st.SearchStrategy[list[dict]], oversized_at=None) -> Case:
    requests = unique_ids(draw(items))
    oversized = []
    if oversized_at is not None:
        index = draw(st.integers(0, len(requests)))
        requests.insert(index, unique_ids([*requests, draw(oversized_at)])[-1])
        oversized = [index]
    judged = Judged([expected_echo(r) for r in requests], batch=True, oversized=oversized)
    return Case(kind, "POST", "/batch_judge", expect, draw(encoded({"requests": requests})), judged=judged)


@st.composite
def duplicate_id_batch(draw, limits: ApiLimits) -> Case:
    requests = unique_ids(draw(st.lists(judge_request(limits), min_size=1, max_size=6)))
    repeated = draw(st.text(max_size=20))
    requests[0] = {**requests[0], "request_id": repeated}
    requests.insert(draw(st.integers(1, len(requests))), {**requests[0]})
    return Case("batch: duplicate request ids", "POST", "/batch_judge", REJECT, draw(encoded({"requests": requests})))


@st.composite
def invalid_item_batch(draw, limits: ApiLimits) -> Case:
    requests = draw(st.lists(judge_request(limits), max_size=5))
    requests.insert(draw(st.integers(0, len(requests))), draw(invalid_request(limits)))
    return Case("batch: one invalid item", "POST", "/batch_judge", REJECT, draw(encoded({"requests": requests})))


def malformed_batches(limits: ApiLimits) -> st.SearchStrategy[Case]:
    tiny = {"prompt": "p", "completion": "c"}
    too_many = st.integers(limits.max_batch_requests + 1, limits.max_batch_requests + 4).map(lambda n: [tiny] * n)
    bodies = st.one_of(
        st.just({"requests": []}).map(json.dumps),
        too_many.map(lambda requests: json.dumps({"requests": requests})),
        NOT_JSON_OBJECTS.map(lambda requests: json.dumps({"requests": requests})),
        st.just(json.dumps([tiny])),
        st.dictionaries(st.text(max_size=8).filter(lambda key: key != "requests"), JSON_VALUES, max_size=3).map(
            json.dumps
        ),
    )
    return bodies.map(
        lambda body: Case("batch: empty, too many or no list", "POST", "/batch_judge", REJECT, body.encode())
    )


def not_json(limits: ApiLimits) -> st.SearchStrategy[Case]:
    depth = st.integers(1, 50_000)
    bodies = st.one_of(
        st.binary(max_size=200),
        st.text(max_size=100).map(lambda text: text.encode("utf-8", "surrogatepass")),
        st.just(b'{"prompt": "p", "completion": "c"'),
        depth.map(lambda n: b"[" * n + b"]" * n),
        depth.map(lambda n: b'{"prompt": "p", "completion": ' + b"[" * n + b"]" * n + b"}"),
        depth.map(lambda n: b'{"a":' * n + b"1" + b"}" * n),
    ).filter(lambda body: not _json_object(body))
    return st.tuples(st.sampled_from(JUDGE_ROUTES), bodies).map(
        lambda case: Case("not JSON, or nested deeper than a parser's stack", "POST", case[0], REJECT, case[1])
    )


def _json_object(body: bytes) -> bool:
    try:
        return isinstance(json.loads(body), dict)
    except (ValueError, RecursionError):
        return False


@st.composite
def other_content_type(draw, limits: ApiLimits) -> Case:
    body = draw(judge_request(limits))
    content_type = draw(
        st.sampled_from(
            [
                None,
                "text/plain",
                "application/json; charset=utf-8",
                "APPLICATION/JSON",
                "application/x-www-form-urlencoded",
            ]
        )
    )
    return Case("judge: other content types", "POST", "/judge", EITHER, json.dumps(body).encode(), content_type)


@st.composite
def too_large_body(draw, limits: ApiLimits) -> Case:
    padding = "x" * draw(st.integers(limits.max_body_bytes + 1, limits.max_body_bytes + 2000))
    body = json.dumps({"prompt": "p", "completion": padding}).encode()
    chunked = draw(st.booleans())  # no Content-Length: the limit must hold while the body streams in
    return Case("body over the size limit", "POST", draw(st.sampled_from(JUDGE_ROUTES)), REJECT, body, chunked=chunked)


def other_routes() -> st.SearchStrategy[Case]:
    reads = st.tuples(st.sampled_from(["GET", "HEAD"]), st.sampled_from(READ_ROUTES)).map(
        lambda case: Case(
            "read routes (GET, HEAD)",
            *case,
            ACCEPT if case[0] == "GET" or case[1] == "/health" else EITHER,
            content_type=None,
        )
    )
    wrong_method = st.one_of(
        st.tuples(st.sampled_from(["GET", "PUT", "DELETE", "PATCH"]), st.sampled_from(JUDGE_ROUTES)),
        st.tuples(st.sampled_from(["POST", "PUT", "DELETE", "PATCH"]), st.sampled_from(READ_ROUTES)),
    ).map(lambda case: Case("wrong method", *case, REJECT, b"{}"))
    path = st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyz0123456789-_./%~"), max_size=24)
    unknown = st.tuples(st.sampled_from(["GET", "POST", "PUT", "DELETE", "OPTIONS", "HEAD"]), path).map(
        lambda case: Case("any method, any path", case[0], "/" + case[1], EITHER, b"{}")
    )
    return st.one_of(reads, wrong_method, unknown)


def http_cases(limits: ApiLimits) -> st.SearchStrategy[Case]:
    valid_items = st.lists(judge_request(limits), min_size=1, max_size=8)
    number_items = st.lists(judge_request(limits, numbers=True), min_size=1, max_size=8)
    return st.one_of(
        judge_case("judge: valid", ACCEPT, judge_request(limits)),
        judge_case("judge: answer or request_id a number or boolean", ACCEPT, judge_request(limits, numbers=True)),
        judge_case("judge: invalid field", REJECT, invalid_request(limits)),
        judge_case("judge: a text over the limit", ACCEPT, oversized_request(limits), oversized=True),
        judge_case("judge: lone surrogates", EITHER, surrogate_request(limits)),
        st.builds(
            lambda body: Case("judge: any JSON but an object of the API", "POST", "/judge", REJECT, body),
            st.one_of(NOT_JSON_OBJECTS, st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=4)).map(
                lambda value: json.dumps(value).encode()
            ),
        ),
        other_content_type(limits),
        batch_case("batch: valid", ACCEPT, valid_items),
        batch_case("batch: answer or request_id a number or boolean", ACCEPT, number_items),
        batch_case(
            "batch: one item over the text limit",
            ACCEPT,
            st.lists(judge_request(limits), max_size=6),
            oversized_request(limits),
        ),
        batch_case("batch: lone surrogates", EITHER, st.lists(surrogate_request(limits), min_size=1, max_size=4)),
        duplicate_id_batch(limits),
        invalid_item_batch(limits),
        malformed_batches(limits),
        not_json(limits),
        too_large_body(limits),
        other_routes(),
    )


# --- checks of the answers ---------------------------------------------------------------------------------------


def answer_problems(case: Case, response: httpx.Response) -> list[str]:
    status = response.status_code
    if status >= 500:
        return [f"{status}: {excerpt(response.text)}"]
    problems = []
    if case.expect == ACCEPT and status != 200:
        problems.append(f"expected 200, got {status}: {excerpt(response.text)}")
    if case.expect == REJECT and not 400 <= status < 500:
        problems.append(f"expected a 4xx, got {status}: {excerpt(response.text)}")
    if 400 <= status < 500 and case.method != "HEAD" and not _has_detail(response):
        problems.append(f"{status} without a JSON detail: {excerpt(response.text)}")
    if status == 200 and case.judged is not None:
        problems += judged_problems(case.judged, response)
    return problems


def _has_detail(response: httpx.Response) -> bool:
    try:
        return "detail" in response.json()
    except (ValueError, TypeError):
        return False


def judged_problems(judged: Judged, response: httpx.Response) -> list[str]:
    try:
        body = response.json()
    except ValueError:
        return [f"200 whose body is not JSON: {excerpt(response.text)}"]
    responses = (body.get("responses") if isinstance(body, dict) else None) if judged.batch else [body]
    if not isinstance(responses, list) or len(responses) != len(judged.ids):
        return [f"{excerpt(body)} does not hold one response for each of the {len(judged.ids)} requests"]
    problems = []
    for index, (item, sent_id) in enumerate(zip(responses, judged.ids, strict=True)):
        where = f"responses[{index}]" if judged.batch else "the response"
        problems += [f"{where}: {problem}" for problem in item_problems(item, sent_id, index in judged.oversized)]
    return problems


def item_problems(item, sent_id: str | None, oversized: bool) -> list[str]:
    if not isinstance(item, dict):
        return [f"{excerpt(item)} is not an object"]
    problems = []
    score, error, request_id = item.get("score"), item.get("error"), item.get("request_id")
    if score is not None and (isinstance(score, bool) or not isinstance(score, (int, float)) or not 0 <= score <= 1):
        problems.append(f"score {score!r} outside [0, 1]")
    if score is None and not (isinstance(error, str) and error):
        problems.append(f"null score without an error ({error!r})")
    if sent_id is None and not (isinstance(request_id, str) and request_id):
        problems.append(f"request_id {request_id!r} is not a non-empty text (none was sent)")
    elif sent_id is not None and request_id != sent_id:
        problems.append(f"request_id {excerpt(request_id)!r} for the sent {excerpt(sent_id)!r}")
    if oversized and score is not None:
        problems.append(f"an item over the text limit was scored {score}")
    return problems


def send(client: httpx.Client, url: str, case: Case) -> httpx.Response:
    headers = {"content-type": case.content_type} if case.content_type else {}
    content = case.body
    if case.chunked and content is not None:
        content = iter([content[i : i + 65536] for i in range(0, len(content), 65536)])
    return client.request(case.method, url + case.path, content=content, headers=headers)


def http_check(client: httpx.Client, url: str, item_errors: Counter):
    """Sends a case and checks the answer; the errors of items in 200 answers are counted into `item_errors`."""

    def check(case: Case) -> Outcome:
        try:
            response = send(client, url, case)
        except httpx.HTTPError as err:
            return Outcome(case.kind, "no answer", [f"no answer: {type(err).__name__}: {err}"])
        if response.status_code == 200 and case.judged is not None:
            item_errors.update(error_kinds(response))
        return Outcome(case.kind, str(response.status_code), answer_problems(case, response))

    return check


def error_kinds(response: httpx.Response) -> list[str]:
    """The item errors of a judge answer, with numbers and quoted values blanked so that alike ones group."""
    try:
        body = response.json()
    except ValueError:
        return []
    items = body.get("responses") if isinstance(body, dict) and "responses" in body else [body]
    errors = [item.get("error") for item in items if isinstance(item, dict) and isinstance(item.get("error"), str)]
    return [re.sub(r"\d+", "N", re.sub(r"'[^']*'|\"[^\"]*\"", "'...'", error))[:90] for error in errors]


def alive_at_end(url: str) -> dict:
    """Whether the server still answers: GET /health and a valid /judge the rule and scalar judges both score."""
    body = {"prompt": "What is 2 + 2?", "completion": "The answer is 4", "answer": "4", "answer_type": "NUMBER"}
    try:
        health = httpx.get(f"{url}/health", timeout=REQUEST_TIMEOUT_S)
        judged = httpx.post(f"{url}/judge", json=body, timeout=REQUEST_TIMEOUT_S)
    except httpx.HTTPError as err:
        return {"alive": False, "error": f"{type(err).__name__}: {err}"}
    answer = judged.json() if judged.status_code == 200 else {}
    score = answer.get("score")
    return {
        "alive": health.status_code == 200 and score is not None and not item_problems(answer, None, False),
        "health_status": health.status_code,
        "judge_status": judged.status_code,
        "judge_score": score,
    }


def logged_exceptions(log_text: str) -> dict[str, int]:
    """The server log's exception lines (`SomethingError: ...` ending a traceback), by exception type."""
    return dict(Counter(re.findall(r"^(\w+(?:Error|Exception)):", log_text, flags=re.MULTILINE)))


def fuzz_server(url: str, limits: ApiLimits, examples: int, seed: int) -> dict:
    """The fuzz against a server already running at `url` with `limits`."""
    item_errors = Counter()
    with httpx.Client(timeout=REQUEST_TIMEOUT_S) as client:
        results = run_property(http_cases(limits), http_check(client, url, item_errors), examples, seed)
    results["item_errors_in_200_answers"] = dict(item_errors.most_common())
    results["five_xx"] = sum(count for status, count in results["by_result"].items() if status.startswith("5"))
    results["end"] = alive_at_end(url)
    return results


# --- the run ------------------------------------------------------------------------------------------------


def fuzz_judge(judge: str, workdir: Path, limits: ApiLimits, examples: int, seed: int) -> dict:
    judge_model = tiny_scalar_judge(tiny_model(workdir), workdir) if judge == "scalar" else None
    log_path = workdir / f"server_{judge}.log"
    server_args = [*judge_server_args(judge_model), *limits.server_flags(), "--batch-timeout", "0"]
    with start_server([*server_args, "--log-level", "warning"], log_path=log_path) as server:
        results = fuzz_server(server.url, limits, examples, seed)
        results["end"]["process_running"] = server.process.poll() is None
    results["server_exceptions_logged"] = logged_exceptions(log_path.read_text(errors="replace"))
    return results


def report(results: dict) -> str:
    parts = ["## Fuzz: the judge server's HTTP API and the judge-answer parsers"]
    for judge, run in results["http"].items():
        statuses = sorted({status for by_result in run["by_kind"].values() for status in by_result})
        rows = [
            [
                kind,
                sum(by_result.values()),
                *(by_result.get(s, 0) for s in statuses),
                run["violations_by_kind"].get(kind, 0),
            ]
            for kind, by_result in run["by_kind"].items()
        ]
        rows.append(["all", run["inputs_tried"], *(run["by_result"].get(s, 0) for s in statuses), run["violations"]])
        end = run["end"]
        parts += [
            f"### HTTP API, {judge} judge: {run['inputs_tried']} requests, {run['five_xx']} answered 5xx, "
            f"{run['violations']} violations; alive at the end: {end['alive']}",
            markdown_table(["request kind", "sent", *statuses, "violations"], rows),
            f"Exceptions in the server log: {run['server_exceptions_logged'] or 'none'}. Item errors in 200 "
            f"answers, most frequent first: {dict(list(run['item_errors_in_200_answers'].items())[:6]) or 'none'}.",
        ]
        parts += [_violation_lines(run)]
    client = results["client"]
    rows = [
        [
            kind,
            sum(by_source.values()),
            by_source.get("judge", 0),
            by_source.get("rule_fallback", 0),
            client["violations_by_kind"].get(kind, 0),
        ]
        for kind, by_source in client["by_kind"].items()
    ]
    parts += [
        f"### Reward adapter under malformed judge answers: {client['inputs_tried']} rewards in {client['wall_s']} s, "
        f"{client['violations']} violations",
        markdown_table(["scripted answer", "rewards", "source judge", "source rule_fallback", "violations"], rows),
        _violation_lines(client),
    ]
    rows = [
        [name, run["inputs_tried"], ", ".join(f"{k}: {v}" for k, v in run["by_result"].items()), run["violations"]]
        for name, run in results["parsers"].items()
    ]
    parts += ["### Parsers and reward functions", markdown_table(["function", "inputs", "results", "violations"], rows)]
    parts += [_violation_lines(run) for run in results["parsers"].values()]
    load = results["load_average"]
    parts.append(f"Load average (1, 5, 15 min) before: {load['before']}, after: {load['after']}.")
    return "\n\n".join(part for part in parts if part)


def _violation_lines(run: dict) -> str:
    """One example of each kind of input that broke a property."""
    first = {v["kind"]: v for v in reversed(run["violation_examples"])}
    return "\n".join(
        f"- {kind}: {v['problem'][:240]} (input: `{v['input'][:160].replace('`', chr(39))}`)"
        for kind, v in sorted(first.items())
    )


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--judges", nargs="+", choices=["rule", "scalar"], default=["rule", "scalar"])
    parser.add_argument("--http-examples", type=int, default=3000, help="requests per judge server")
    parser.add_argument("--client-examples", type=int, default=1000, help="scripted judge answers to the adapter")
    parser.add_argument("--parser-examples", type=int, default=5000, help="inputs per parser / reward function")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--name", default="fuzz", help="result file name")
    args = parser.parse_args()

    logging.getLogger("JudgeReward").setLevel(logging.ERROR)  # the adapter's warnings of scripted failures
    limits = ApiLimits()
    before = load_average()
    with tempfile.TemporaryDirectory() as workdir:
        http = {judge: fuzz_judge(judge, Path(workdir), limits, args.http_examples, args.seed) for judge in args.judges}
    results = {
        "config": {**vars(args), "server_limits": vars(limits)},
        "http": http,
        "client": fuzz_client(args.client_examples, args.seed),
        "parsers": fuzz_parsers(args.parser_examples, args.seed),
        "load_average": {"before": before, "after": load_average()},
    }
    paths = write_results(args.name, results, report(results))
    print(f"wrote {paths[0]} and {paths[1]}")


if __name__ == "__main__":
    main()
