"""The real judge server (rule judge) against misuse: numbers where text is expected, non-finite answers,
oversized items, bodies that are not JSON objects, unicode, a full queue, clients that leave mid-request,
and SIGTERM with requests in flight.

The "held" servers never run a batch before it is full (--batch-timeout 60), so a test decides exactly
when the judgements it sent are answered: no timing, no sleeps."""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import signal
import socket
import time

import httpx
import pytest

from judge_rewards import JudgeRewardSystem, JudgeUnavailableError
from tests.support.servers import free_port, start_server
from tests.test_serving_scalar import assert_clean_shutdown

MAX_TEXT_CHARS = 200
MAX_BATCH_REQUESTS = 8
HELD_BATCH_SIZE = 5  # held servers: a batch runs once it holds this many judgements
WAIT_S = 30  # bounds a wait for the server's state; never reached when the server behaves


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    running = start_server(
        [
            "--judge",
            "rule",
            "--batch-timeout",
            "0",
            "--max-text-chars",
            str(MAX_TEXT_CHARS),
            "--max-batch-requests",
            str(MAX_BATCH_REQUESTS),
        ],
        log_path=tmp_path_factory.mktemp("hardening_server") / "server.log",
    )
    yield running
    assert_clean_shutdown(running)


HELD_SERVER_ARGS = ["--judge", "rule", "--max-batch-size", str(HELD_BATCH_SIZE), "--batch-timeout", "60"]


@pytest.fixture(scope="module")
def held_server(tmp_path_factory):
    running = start_server(
        [*HELD_SERVER_ARGS, "--max-queue-size", str(HELD_BATCH_SIZE)],
        log_path=tmp_path_factory.mktemp("held_server") / "server.log",
    )
    yield running
    assert_clean_shutdown(running)


def four(request_id: str) -> dict:
    return {"prompt": "What is 2+2?", "completion": "The answer is 4", "answer": "4", "request_id": request_id}


def judge_raw(url: str, path: str, body: bytes) -> httpx.Response:
    return httpx.post(f"{url}{path}", content=body, headers={"content-type": "application/json"}, timeout=WAIT_S)


def wait_for_queue_depth(url: str, depth: int) -> None:
    deadline = time.monotonic() + WAIT_S
    while (seen := httpx.get(f"{url}/health").json()["queue_depth"]) != depth:
        assert time.monotonic() < deadline, f"queue_depth stayed {seen}, expected {depth}"
        time.sleep(0.05)


def raw_request(url: str, path: str, body: bytes, declared_length: int | None = None) -> bytes:
    """The bytes of an HTTP/1.1 POST: a client can send them in parts, or only some of them."""
    length = len(body) if declared_length is None else declared_length
    head = f"POST {path} HTTP/1.1\r\nHost: {url.removeprefix('http://')}\r\nContent-Type: application/json\r\n"
    return f"{head}Content-Length: {length}\r\n\r\n".encode() + body


def connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=WAIT_S)


# ---- numbers and non-finite values ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer, request_id, completion, echoed_id",
    [
        (4, 7, "The answer is 4", "7"),
        (4.0, 7.0, "The answer is 4", "7"),
        (2.5, -1, "The answer is 2.5", "-1"),
        (True, "b", "Yes, it is.", "b"),
    ],
)
def test_numbers_and_booleans_are_accepted_as_answer_and_request_id(server, answer, request_id, completion, echoed_id):
    body = {"prompt": "q", "completion": completion, "answer": answer, "request_id": request_id}
    for path, payload in (("/judge", body), ("/batch_judge", {"requests": [body]})):
        response = httpx.post(f"{server.url}{path}", json=payload)
        assert response.status_code == 200, response.text
        result = response.json() if path == "/judge" else response.json()["responses"][0]
        assert (result["score"], result["request_id"], result["error"]) == (1.0, echoed_id, None)


def test_a_whole_float_answer_is_shown_as_an_integer(server):
    result = httpx.post(f"{server.url}/judge", json={"prompt": "q", "completion": "So 5.", "answer": 4.0}).json()
    assert result["explanation"].endswith("differs from reference 4")


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_a_non_finite_answer_is_no_answer(server, literal):
    body = f'{{"prompt": "q", "completion": "The answer is nan", "answer": {literal}}}'.encode()
    response = judge_raw(server.url, "/judge", body)
    assert response.status_code == 200
    assert response.json()["score"] is None and "no reference answer" in response.json()["error"]


@pytest.mark.parametrize("literal", ["NaN", "Infinity"])
def test_a_non_finite_request_id_is_refused_naming_it(server, literal):
    response = judge_raw(
        server.url, "/judge", f'{{"prompt": "q", "completion": "c", "request_id": {literal}}}'.encode()
    )
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "request_id"]
    assert "request_id must be a finite number" in response.text


@pytest.mark.parametrize("field", ["answer", "request_id"])
@pytest.mark.parametrize("value", [[4], {"value": 4}])
def test_a_non_scalar_answer_or_request_id_is_refused_naming_it(server, field, value):
    response = httpx.post(f"{server.url}/judge", json={"prompt": "q", "completion": "c", field: value})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", field]


def test_nan_anywhere_in_a_refused_body_is_a_422_not_a_500(server):
    response = judge_raw(server.url, "/judge", b'{"prompt": "q", "completion": NaN}')
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "completion"]


@pytest.mark.parametrize("via", ["judge server", "rule fallback"])
def test_the_adapter_never_rewards_the_text_nan_for_a_nan_ground_truth(server, via):
    url = server.url if via == "judge server" else f"http://127.0.0.1:{free_port()}"
    with (
        JudgeRewardSystem({"judge_url": url, "max_retries": 0, "timeout": 10.0}) as system,
        pytest.raises(JudgeUnavailableError, match="the rule fallback cannot score it either: no reference answer"),
    ):
        system.reward("What is 0/0?", "The answer is nan", float("nan"))


def test_the_adapter_sends_a_number_ground_truth_the_server_reads_the_same(server):
    with JudgeRewardSystem({"judge_url": server.url, "max_retries": 0}) as system:
        result = system.reward("What is 2+2?", "The answer is 4", 4.0)
    assert (result["reward"], result["source"]) == (1.0, "judge")
    assert result["explanation"].endswith("matches reference 4")


# ---- item-level text limit -------------------------------------------------------------------------------


def test_an_oversized_item_is_an_item_error_and_its_neighbours_are_judged(server):
    too_long = "x" * (MAX_TEXT_CHARS + 1)
    requests = [
        four("ok-1"),
        {**four("long-completion"), "completion": too_long},
        {**four("long-turn"), "prompt": [{"role": "user", "content": "hi"}, {"role": "user", "content": too_long}]},
        {**four("long-answer"), "answer": too_long},
        four("ok-2"),
    ]
    response = httpx.post(f"{server.url}/batch_judge", json={"requests": requests})
    assert response.status_code == 200
    responses = response.json()["responses"]
    assert [r["request_id"] for r in responses] == [r["request_id"] for r in requests]
    assert [r["score"] for r in responses] == [1.0, None, None, None, 1.0]
    limit = f"has {MAX_TEXT_CHARS + 1} characters; the limit is {MAX_TEXT_CHARS} (--max-text-chars)"
    assert [r["error"] for r in responses] == [
        None,
        f"completion {limit}",
        f"prompt[1].content {limit}",
        f"answer {limit}",
        None,
    ]


def test_an_oversized_judge_request_is_answered_with_its_error(server):
    response = httpx.post(f"{server.url}/judge", json={**four("long"), "prompt": "p" * (MAX_TEXT_CHARS + 1)})
    assert response.status_code == 200
    assert response.json()["score"] is None and response.json()["request_id"] == "long"
    assert response.json()["error"].startswith(f"prompt has {MAX_TEXT_CHARS + 1} characters")


def test_too_many_requests_in_one_batch_is_still_413(server):
    response = httpx.post(
        f"{server.url}/batch_judge", json={"requests": [four(str(n)) for n in range(MAX_BATCH_REQUESTS + 1)]}
    )
    assert response.status_code == 413 and "--max-batch-requests" in response.text


# ---- bodies that are not a JSON object --------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/judge", "/batch_judge"])
@pytest.mark.parametrize("body", [b"[1, 2]", b'"text"', b"3", b"null", b"true"])
def test_a_body_that_is_not_a_json_object_is_refused_saying_so(server, path, body):
    response = judge_raw(server.url, path, body)
    assert response.status_code == 422
    assert "the request body must be a JSON object" in response.json()["detail"][0]["msg"]


@pytest.mark.parametrize("body", [b'{"prompt": ', b"\xff\xfe{}", b"{'prompt': 'p'}"])
def test_a_body_that_is_not_json_is_refused_saying_so(server, body):
    response = judge_raw(server.url, "/judge", body)
    assert response.status_code == 422 and "JSON decode error" in response.text


# ---- unicode and empty texts ------------------------------------------------------------------------------

STRANGE = "🦄 مرحبا بالعالم e\u0301 \u202eflipped\u202c a\x00b 𝔘𝔫𝔦"


def test_unicode_and_empty_texts_travel_end_to_end(server):
    requests = [
        {"prompt": STRANGE, "completion": f"{STRANGE} The answer is 4", "answer": "4", "request_id": STRANGE},
        {"prompt": [{"role": "user", "content": STRANGE}], "completion": "4 🦄", "answer": "4", "request_id": "🦄"},
        {"prompt": "", "completion": "", "answer": "4", "request_id": ""},
        {"prompt": "q", "completion": STRANGE, "answer": STRANGE, "request_id": "e\u0301"},
    ]
    single = httpx.post(f"{server.url}/judge", json=requests[0]).json()
    assert (single["score"], single["request_id"]) == (1.0, STRANGE)
    responses = httpx.post(f"{server.url}/batch_judge", json={"requests": requests}).json()["responses"]
    assert [r["request_id"] for r in responses] == [STRANGE, "🦄", "", "e\u0301"]
    assert [r["score"] for r in responses] == [1.0, 1.0, 0.0, 1.0]


@pytest.mark.parametrize(
    "body, field, reason",
    [
        ({"prompt": "p", "completion": "a\ud800b"}, "completion", "lone surrogate U+D800 at character 1"),
        ({"prompt": [{"role": "user", "content": "\udfff"}], "completion": "c"}, "content", "lone surrogate U+DFFF"),
        ({"prompt": "p", "completion": "c", "answer": "\ud83d"}, "answer", "lone surrogate U+D83D"),
        # pydantic's own check of a length-limited string comes first here
        ({"prompt": "p", "completion": "c", "request_id": "id\udc00"}, "request_id", "unable to parse raw data"),
    ],
)
def test_a_lone_surrogate_is_refused_naming_its_field(server, body, field, reason):
    response = judge_raw(server.url, "/judge", json.dumps(body).encode())  # escaped: "\ud800" is valid JSON
    assert response.status_code == 422
    reasons = response.json()["detail"]
    assert any(field in r["loc"] and reason in r["msg"] for r in reasons), reasons


def test_an_empty_request_id_is_a_request_id_and_must_be_unique(server):
    response = httpx.post(f"{server.url}/batch_judge", json={"requests": [four(""), four("")]})
    assert response.status_code == 422 and "request ids must be unique" in response.text


# ---- a full queue, clients that leave ---------------------------------------------------------------------


def test_a_full_queue_answers_503_saying_what_is_full(held_server):
    url = held_server.url
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        held_body = {"requests": [four(f"h{n}") for n in range(4)]}
        held = pool.submit(httpx.post, f"{url}/batch_judge", json=held_body, timeout=WAIT_S)
        wait_for_queue_depth(url, 4)
        refused = httpx.post(f"{url}/batch_judge", json={"requests": [four("r1"), four("r2")]})
        assert refused.status_code == 503
        assert refused.json()["detail"] == "4 judgements are queued; 2 more would exceed --max-queue-size 5"
        last = httpx.post(f"{url}/judge", json=four("last"), timeout=WAIT_S)  # the fifth: the batch is full and runs
        assert (last.status_code, last.json()["score"]) == (200, 1.0)
        assert [r["score"] for r in held.result(WAIT_S).json()["responses"]] == [1.0] * 4


def test_a_client_that_leaves_mid_upload_costs_nothing(held_server):
    body = json.dumps(four("gone")).encode()
    with connect(held_server.url) as sock:
        sock.sendall(raw_request(held_server.url, "/judge", body[:10], declared_length=len(body)))
    assert_answers_a_full_batch(held_server.url)


def test_a_client_that_leaves_while_judged_frees_its_place_in_the_queue(held_server):
    with connect(held_server.url) as sock:
        sock.sendall(raw_request(held_server.url, "/judge", json.dumps(four("gone")).encode()))
        wait_for_queue_depth(held_server.url, 1)
    wait_for_queue_depth(held_server.url, 0)  # its judgement is dropped, not kept until a batch runs
    assert_answers_a_full_batch(held_server.url)


def assert_answers_a_full_batch(url: str) -> None:
    requests = [four(f"after-{n}") for n in range(HELD_BATCH_SIZE)]
    response = httpx.post(f"{url}/batch_judge", json={"requests": requests}, timeout=WAIT_S)
    assert response.status_code == 200
    assert [r["score"] for r in response.json()["responses"]] == [1.0] * HELD_BATCH_SIZE


# ---- SIGTERM with requests in flight ----------------------------------------------------------------------


def test_sigterm_answers_the_requests_in_flight_then_exits_0(tmp_path):
    running = start_server(HELD_SERVER_ARGS, log_path=tmp_path / "server.log")
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            judged = pool.submit(httpx.post, f"{running.url}/judge", json=four("judged"), timeout=WAIT_S)
            wait_for_queue_depth(running.url, 1)
            # A second request is still uploading when the signal comes; its 4 judgements complete the batch.
            uploading = http.client.HTTPConnection(running.url.removeprefix("http://"), timeout=WAIT_S)
            body = json.dumps({"requests": [four(f"u{n}") for n in range(HELD_BATCH_SIZE - 1)]}).encode()
            uploading.putrequest("POST", "/batch_judge")
            uploading.putheader("Content-Type", "application/json")
            uploading.putheader("Content-Length", str(len(body)))
            uploading.endheaders(body[:20])
            # The server must have read the headers first: a connection with nothing read yet is idle to it.
            wait_until_read(running.url, client_port=uploading.sock.getsockname()[1])
            running.process.send_signal(signal.SIGTERM)
            wait_for_log_line(running, "Shutting down")
            uploading.send(body[20:])
            answer = uploading.getresponse()
            assert answer.status == 200
            assert [r["score"] for r in json.loads(answer.read())["responses"]] == [1.0] * (HELD_BATCH_SIZE - 1)
            assert judged.result(WAIT_S).json()["score"] == 1.0
        assert running.process.wait(WAIT_S) == 0
        assert "Traceback" not in running.log()
    finally:
        running.kill()


def wait_until_read(url: str, client_port: int) -> None:
    """Waits until the server's end of the connection from `client_port` has nothing unread in its receive
    queue (Linux's /proc/net/tcp: `rx_queue` of the socket whose local port is the server's)."""
    server_port = int(url.rsplit(":", 1)[1])
    deadline = time.monotonic() + WAIT_S
    while (unread := _server_side_unread(server_port, client_port)) != 0:
        assert time.monotonic() < deadline, f"the server left {unread} bytes unread"
        time.sleep(0.01)


def _server_side_unread(server_port: int, client_port: int) -> int | None:
    with open("/proc/net/tcp") as table:
        for line in table.readlines()[1:]:
            fields = line.split()
            local_port, remote_port = (int(address.split(":")[1], 16) for address in fields[1:3])
            if (local_port, remote_port) == (server_port, client_port):
                return int(fields[4].split(":")[1], 16)
    return None


def wait_for_log_line(running, line: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while line not in running.log():
        assert time.monotonic() < deadline, f"the server never logged {line!r}:\n{running.log()[-2000:]}"
        time.sleep(0.05)
