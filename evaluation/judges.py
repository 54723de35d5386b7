"""The two ways evaluation reaches a judge, behind one method, `score_batch(items) -> verdicts`:
the HTTP API of a running judge server, or the serving module's own judge classes in this process
(so "how a judge scores" is written once, in serving/)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import httpx

from judge_rewards.protocol import judge_api
from serving.judges import JudgeItem, Verdict


class EvaluationError(RuntimeError):
    """The evaluation cannot go on (judge unreachable at the start, rejected credentials or requests)."""


class JudgeBackend(Protocol):
    identity: dict  # kind, backend, model_id, model_version, and how the judge was reached
    parallel_calls: int  # score_batch calls that may run at once

    def score_batch(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        """One verdict per item, in order; a failed judgement is a verdict with an error."""


@dataclass(frozen=True)
class HttpJudgeOptions:
    url: str
    api_key: str | None = None
    timeout_s: float = 300.0
    max_retries: int = 2
    concurrency: int = 1

    def __post_init__(self):
        if not self.url.startswith(("http://", "https://")):
            raise ValueError(f"the judge URL must start with http:// or https://, got {self.url!r}")
        if self.timeout_s <= 0 or self.max_retries < 0 or self.concurrency < 1:
            raise ValueError("timeout must be > 0, max_retries >= 0 and concurrency >= 1")


class HttpJudge:
    """POST /batch_judge of a running judge server; results matched to items by request_id."""

    def __init__(self, options: HttpJudgeOptions):
        self._options = options
        self._url = options.url.rstrip("/")
        headers = {"Authorization": f"Bearer {options.api_key}"} if options.api_key else {}
        self._client = httpx.Client(timeout=options.timeout_s, headers=headers)
        self.parallel_calls = options.concurrency
        try:
            self.identity = {**self._health(), "access": f"HTTP {self._url}"}
        except EvaluationError:
            self._client.close()
            raise

    def _health(self) -> dict:
        try:
            response = self._client.get(f"{self._url}/health")
        except httpx.TransportError as err:
            raise EvaluationError(
                f"cannot reach the judge server at {self._url}: {type(err).__name__}: {err}"
            ) from None
        if response.status_code != 200:
            raise EvaluationError(
                f"{self._url}/health answered HTTP {response.status_code}: {judge_api.excerpt(response.text)}"
            )
        try:
            health = response.json()
            return {
                "kind": health["judge_kind"],
                "backend": health["backend"],
                "model_id": health["model_id"],
                "model_version": health["model_version"],
            }
        except (ValueError, KeyError, TypeError):
            raise EvaluationError(
                f"{self._url}/health is not a judge server's answer: {judge_api.excerpt(response.text)}"
            ) from None

    def score_batch(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        request_ids = [str(index) for index in range(len(items))]
        body = {
            "requests": [item.request_body(request_id) for item, request_id in zip(items, request_ids, strict=True)]
        }
        responses, failure = self._post(body)
        if failure is not None:
            return [Verdict.failed(failure) for _ in items]
        return [_verdict(judge_api.item_answer(responses.get(request_id), request_id)) for request_id in request_ids]

    def _post(self, body: dict) -> tuple[dict[str, dict], str | None]:
        """(responses, None), or ([], why the batch failed) after the retries of transient failures."""
        failure = ""
        for attempt in range(self._options.max_retries + 1):
            if attempt:
                time.sleep(2 ** (attempt - 1))
            try:
                response = self._client.post(f"{self._url}/batch_judge", json=body)
            except httpx.TransportError as err:
                failure = f"judge request failed: {type(err).__name__}: {err}"
                continue
            if response.status_code == 200:
                return _responses(response), None
            failure = f"judge answered HTTP {response.status_code}: {judge_api.excerpt(response.text)}"
            if response.status_code != 429 and response.status_code < 500:
                raise EvaluationError(failure)  # wrong key, batch too large, invalid request: every batch would fail
        return {}, f"{failure} (after {self._options.max_retries + 1} attempts)"

    def __enter__(self) -> HttpJudge:
        return self

    def __exit__(self, *exc_info) -> None:
        self._client.close()


def _responses(response) -> dict[str, dict]:
    try:
        return judge_api.responses_by_request_id(response.json())
    except ValueError as err:  # not JSON, or judge_api.MalformedAnswer
        reason = err if isinstance(err, judge_api.MalformedAnswer) else "a body that is not JSON"
        raise EvaluationError(f"/batch_judge answered with {reason}: {judge_api.excerpt(response.text)}") from None


def _verdict(answer: judge_api.ItemAnswer) -> Verdict:
    if answer.error is not None:
        return Verdict.failed(answer.error)
    return Verdict(score=answer.score, explanation=answer.explanation, metadata=answer.metadata)


class InProcessJudge:
    """A judge loaded by serving's own loader; a failing model call fails only its items, as on the server."""

    parallel_calls = 1  # one model, one worker thread

    def __init__(self, config):
        from serving.batching import score_isolating_failures
        from serving.judges import load_judge

        self._isolate = score_isolating_failures
        self._judge = load_judge(config)
        identity = self._judge.identity
        self.identity = {
            "kind": identity.kind,
            "backend": identity.backend,
            "model_id": identity.model_id,
            "model_version": identity.model_version,
            "access": f"in-process from {config.model or 'rules'}",
        }

    def score_batch(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        return self._isolate(self._judge.score_batch, items)
