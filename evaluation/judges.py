"""The ways evaluation reaches a judge, behind one method, `score_batch(items) -> verdicts`: the HTTP API of a
running judge server, through the reward adapter's /batch_judge client; the serving module's own judge classes in
this process (so "how a judge scores" is written once, in serving/); or a language model's own likelihood of each
completion, the baseline a trained judge should beat."""

from __future__ import annotations

import concurrent.futures
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import httpx

from judge_core.protocol import judge_api
from judge_core.protocol.templates import as_messages
from judge_core.settings import option
from judge_rewards.judge_client import BatchingJudgeClient, GroupRequest, JudgeUnavailableError
from judge_rewards.reward_config import JudgeRewardConfig
from judge_rewards.reward_metrics import RewardMetrics
from serving.judges import ComparisonItem, ComparisonUnsupported, JudgeItem, Verdict
from serving.judges.base import ORDERS_AGREE

API_KEY_ENV = "JUDGE_MODEL_API_KEY"  # the reward adapter's variable: one key for every client
# A batch waits for a free connection slot at most as long as one batch ahead of it takes, then takes as long itself.
RESULT_WAIT_BATCHES = 2


class EvaluationError(RuntimeError):
    """The evaluation cannot go on (judge unreachable at the start, rejected credentials or requests)."""


class JudgeBackend(Protocol):
    identity: dict  # kind, backend, model_id, model_version, and how the judge was reached
    parallel_calls: int  # score_batch calls that may run at once

    def score_batch(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        """One verdict per item, in order; a failed judgement is a verdict with an error."""

    def compare_groups(self, groups: Sequence[Group]) -> list[list[Verdict]]:
        """Per group, one verdict per completion: its mean win probability over every sibling (all pairs)."""


@dataclass(frozen=True)
class Group:
    """A prompt and completions to compare with each other, every pair (/judge_group's all_pairs)."""

    prompt: object  # text or chat messages
    completions: tuple[str, ...]


class GroupOutcome(Protocol):
    """A completion's reward in a group: the server's CompletionReward, or the client's GroupReward."""

    score: float | None
    comparisons: int
    failed: int
    error: str | None
    orders_agreed: int | None


def group_verdict(reward: GroupOutcome) -> Verdict:
    """A completion's group reward as its verdict. One failed comparison fails it: a score from the comparisons
    that answered would rank it on fewer siblings than the others. `orders_agree`: every comparison's two orders
    agreed."""
    if reward.failed or reward.score is None:
        return Verdict.failed(reward.error or "none of its comparisons answered")
    metadata: dict = {"comparisons": reward.comparisons}
    if reward.orders_agreed is not None:
        metadata[ORDERS_AGREE] = reward.orders_agreed == reward.comparisons
    return Verdict(score=reward.score, metadata=metadata)


def cannot_compare(identity: dict) -> EvaluationError:
    return EvaluationError(
        f"--all-pairs needs a judge that compares two responses (pairwise or scalar); the {identity['kind']} "
        f"judge {identity['model_id']} does not"
    )


@dataclass(frozen=True)
class HttpJudgeOptions:
    """Score through the HTTP API of a running judge server."""

    judge_url: str | None = option(None, "base URL of the judge server, e.g. http://127.0.0.1:8888")
    api_key: str | None = option(
        None, f"bearer key of the judge server (default: env {API_KEY_ENV})", env=API_KEY_ENV, secret=True
    )
    timeout: float = option(300.0, "seconds one /batch_judge call may take")
    max_retries: int = option(
        2, "retries of a call after a timeout, connection error, 408, 429 or 5xx; then its rows fail"
    )
    concurrency: int = option(1, "/batch_judge calls in flight at once")

    def __post_init__(self):
        if self.judge_url is not None and not self.judge_url.startswith(("http://", "https://")):
            raise ValueError(f"the judge URL must start with http:// or https://, got {self.judge_url!r}")
        if self.timeout <= 0 or self.max_retries < 0 or self.concurrency < 1:
            raise ValueError("timeout must be > 0, max_retries >= 0 and concurrency >= 1")


class HttpJudge:
    """POST /batch_judge of a running judge server through judge_rewards' client (results matched by
    request_id; timeouts, connection errors, 408, 429 and 5xx retried with jittered backoff and Retry-After).
    A request the server refuses for good (401, 403, 413, 422, ...) stops the evaluation: every batch would
    fail the same way; any other failure fails only the items of its batch."""

    def __init__(self, options: HttpJudgeOptions, batch_size: int):
        if options.judge_url is None:
            raise ValueError("HttpJudge needs the judge server's URL")
        self._url = options.judge_url.rstrip("/")
        self.parallel_calls = options.concurrency
        self.identity = {**_health(self._url, options), "access": f"HTTP {self._url}"}
        self._client = BatchingJudgeClient(client_config(options, batch_size), RewardMetrics())
        self._result_wait_s = RESULT_WAIT_BATCHES * self._client.result_timeout

    def score_batch(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        return [self._verdict(future) for future in self._client.submit_all(items)]

    def compare_groups(self, groups: Sequence[Group]) -> list[list[Verdict]]:
        """POST /judge_group per group (all_pairs), up to --concurrency in flight; a judge that cannot compare is
        refused by the server (400), which stops the evaluation."""
        futures = [self._client.submit_group(GroupRequest(group.prompt, group.completions)) for group in groups]
        return [
            self._group_verdicts(future, len(group.completions)) for future, group in zip(futures, groups, strict=True)
        ]

    def _group_verdicts(self, future: concurrent.futures.Future, size: int) -> list[Verdict]:
        result, error = self._result(future)
        if error is not None:
            return [Verdict.failed(error)] * size
        return [group_verdict(reward) for reward in result.rewards]

    def _verdict(self, future: concurrent.futures.Future) -> Verdict:
        result, error = self._result(future)
        if error is not None:
            return Verdict.failed(error)
        return Verdict(
            score=result.score,
            explanation=result.explanation,
            metadata=result.metadata,
            detailed_scores=result.detailed_scores,
        )

    def _result(self, future: concurrent.futures.Future):
        """(the future's result, None), or (None, why there is none); a permanent refusal stops the evaluation."""
        try:
            return future.result(timeout=self._result_wait_s), None
        except JudgeUnavailableError as err:
            if err.permanent:
                raise EvaluationError(str(err)) from None
            return None, str(err)
        except concurrent.futures.TimeoutError:
            return None, f"no judge answer within {self._result_wait_s:.0f}s"

    def __enter__(self) -> HttpJudge:
        return self

    def __exit__(self, *exc_info) -> None:
        self._client.close()


def client_config(options: HttpJudgeOptions, batch_size: int) -> JudgeRewardConfig:
    """The client's settings for an evaluation: a score_batch call's items go out at once in one batch
    (batch_timeout 0, max_batch_size = batch_size), every completion is judged (no cache), and the circuit
    breaker never opens: an evaluation has no fallback to fail fast to, so every batch gets its own
    retries, and a short outage fails only the batches sent during it, never the rest of the run. The queue
    holds the items of the calls in flight and of those just answered (their bookkeeping may lag)."""
    return JudgeRewardConfig(
        judge_url=options.judge_url,
        api_key=options.api_key,
        use_cache=False,
        max_batch_size=batch_size,
        batch_timeout=0.0,
        max_concurrent_requests=options.concurrency,
        timeout=options.timeout,
        max_retries=options.max_retries,
        circuit_breaker_threshold=sys.maxsize,
        max_queue_size=2 * batch_size * options.concurrency,
    )


def identity_record(
    kind: str, backend: str, model_id: str, model_version: str, *, reads_answer: bool | None, access: str | None = None
) -> dict:
    """A judge's identity as results.json records it; `access`: how an in-process judge was loaded."""
    record = {
        "kind": kind,
        "backend": backend,
        "model_id": model_id,
        "model_version": model_version,
        "reads_answer": reads_answer,
    }
    return record if access is None else {**record, "access": access}


def _health(url: str, options: HttpJudgeOptions) -> dict:
    """The judge's identity from GET /health; EvaluationError when the server is not a judge server."""
    headers = {"Authorization": f"Bearer {options.api_key}"} if options.api_key else {}
    try:
        response = httpx.get(f"{url}/health", headers=headers, timeout=options.timeout)
    except httpx.TransportError as err:
        raise EvaluationError(f"cannot reach the judge server at {url}: {type(err).__name__}: {err}") from None
    if response.status_code != 200:
        raise EvaluationError(f"{url}/health answered HTTP {response.status_code}: {judge_api.excerpt(response.text)}")
    try:
        health = response.json()
        return identity_record(
            health["judge_kind"],
            health["backend"],
            health["model_id"],
            health["model_version"],
            reads_answer=health.get("reads_answer"),  # None: a server that does not say
        )
    except (ValueError, KeyError, TypeError):
        raise EvaluationError(
            f"{url}/health is not a judge server's answer: {judge_api.excerpt(response.text)}"
        ) from None


class InProcessJudge:
    """A judge loaded by serving's own loader; a failing model call fails only its items, as on the server."""

    parallel_calls = 1  # one model, one worker thread

    def __init__(self, config):
        from serving.batching import score_isolating_failures
        from serving.judges import load_judge

        self._isolate = score_isolating_failures
        self._judge = load_judge(config)
        identity = self._judge.identity
        self.identity = identity_record(
            identity.kind,
            identity.backend,
            identity.model_id,
            identity.model_version,
            reads_answer=identity.reads_answer,
            access=f"in-process from {config.model or 'rules'}",
        )

    def score_batch(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        return self._isolate(self._judge.score_batch, items)

    def compare_groups(self, groups: Sequence[Group]) -> list[list[Verdict]]:
        """Every group's pairs in one compare_batch call, rewarded as the server's /judge_group rewards them."""
        from serving.group_rewards import group_rewards, pair_schedule

        if not self._judge.can_compare:
            raise cannot_compare(self.identity)
        schedules = [pair_schedule(len(group.completions), "all_pairs") for group in groups]
        items = [
            ComparisonItem(group.prompt, group.completions[i], group.completions[j])
            for group, pairs in zip(groups, schedules, strict=True)
            for i, j in pairs
        ]
        try:
            verdicts = self._isolate(self._judge.compare_batch, items)
        except ComparisonUnsupported:
            raise cannot_compare(self.identity) from None
        outcomes, start = [], 0
        for group, pairs in zip(groups, schedules, strict=True):
            rewards = group_rewards(len(group.completions), pairs, verdicts[start : start + len(pairs)])
            outcomes.append([group_verdict(reward) for reward in rewards])
            start += len(pairs)
        return outcomes


@dataclass(frozen=True)
class LikelihoodOptions:
    """A language model's own likelihood as the judge (no judge training): the baseline a judge should beat."""

    likelihood_model: str | None = option(
        None,
        "score each completion by this causal LM's likelihood of it after the prompt (chat template): "
        "exp(mean log-probability per completion token), in [0, 1]",
        metavar="DIR",
    )


class LikelihoodJudge:
    """Each completion scored by the model's geometric-mean token probability after the chat-formatted prompt; a
    completion that tokenizes to nothing, or that takes the input past the model's positions, fails. Knowledge the
    model has shows here without any judge format."""

    parallel_calls = 1

    def __init__(self, options: LikelihoodOptions):
        import torch
        from transformers import AutoModelForCausalLM

        from judge_models.transformers_engine import resolve_device, resolve_dtype
        from serving.judges import hf

        model_dir = options.likelihood_model
        self._torch = torch
        self._device = resolve_device("auto")
        self._tokenizer = hf.load_chat_tokenizer(model_dir)  # one item per forward pass: no padding
        dtype = resolve_dtype("auto", self._device)
        self._model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(self._device).eval()
        self._max_positions = getattr(self._model.config, "max_position_embeddings", None)
        self.identity = identity_record(
            "likelihood",
            "transformers",
            Path(model_dir).resolve().name,
            hf.fingerprint(Path(model_dir)),
            reads_answer=False,
            access=f"in-process from {model_dir}",
        )

    def score_batch(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        from serving.batching import score_isolating_failures

        return score_isolating_failures(lambda batch: [self._verdict(item) for item in batch], items)

    def compare_groups(self, groups: Sequence[Group]) -> list[list[Verdict]]:
        raise cannot_compare(self.identity)

    def _verdict(self, item: JudgeItem) -> Verdict:
        prompt = self._tokenizer.apply_chat_template(
            as_messages(item.prompt), tokenize=False, add_generation_prompt=True
        )
        prefix = self._tokenizer(prompt, add_special_tokens=False)["input_ids"]
        completion = self._tokenizer(item.completion, add_special_tokens=False)["input_ids"]
        if not completion:
            return Verdict.failed("the completion has no tokens to score")
        tokens = len(prefix) + len(completion)
        if self._max_positions and tokens > self._max_positions:
            # Past its positions a model fails, or (rotary embeddings) scores text it was never trained to read.
            return Verdict.failed(f"prompt and completion are {tokens} tokens, past the model's {self._max_positions}")
        ids = self._torch.tensor([prefix + completion], device=self._device)
        with self._torch.no_grad():
            log_probs = self._model(ids).logits[0, len(prefix) - 1 : -1].float().log_softmax(-1)
        picked = log_probs.gather(1, ids[0, len(prefix) :, None]).mean().item()
        return Verdict(score=math.exp(picked), metadata={"mean_log_prob": picked, "tokens": len(completion)})
