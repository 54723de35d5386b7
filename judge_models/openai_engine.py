"""A generative judge's engine behind an OpenAI-compatible server (`--backend openai`): `vllm serve` (any size:
tensor and pipeline parallel, several nodes), SGLang, or any server whose completions API takes token-id prompts.
A vision judge's prompts that carry images go to `POST /chat/completions` instead, as the judge's conversation
with its images inline: the engine renders them with the model's chat template, as this process would.

The judge stays in this process: its template, chat template and tokenizer (--model's directory) render each
prompt to token ids exactly as for the in-process backends, and the engine's `POST /completions` generates from
those ids (`prompt` as a list of ints). So a judge served elsewhere reads the very tokens it would read in process,
and greedy answers and scores equal the in-process vLLM backend's. With --score-mode expected every request asks
for the top TOP_LOGPROBS log-probabilities of each generated step, the tokens named by id
(`return_tokens_as_token_ids`, vLLM's extension), as the in-process vLLM backend does.

A batch's requests go out together (at most --openai-max-concurrency in flight), so the engine batches them and
its prefix cache serves the prompt a group's judgements share. A request is retried as
judge_core.protocol.http_retry says (--openai-max-retries: timeouts, connection errors, 408, 429, 5xx; backoff with
jitter or the Retry-After); one that still fails is that judgement's error, never a score.

At start-up (`check_engine`) the engine must answer GET /models and list the model, and a one-token probe must
come back; in expected mode with log-probabilities by token id. Otherwise BackendUnavailable names the flag.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
from collections.abc import Coroutine, Sequence
from typing import Any

import httpx

from judge_core.protocol import http_retry
from judge_core.protocol.judge_api import excerpt

from .config import JudgeConfig
from .engine import BackendUnavailable, Generation, GenerationFailure, Images

TOP_LOGPROBS = 20  # the in-process vLLM backend's, and vLLM's default --max-logprobs
TOKEN_ID_PREFIX = "token_id:"  # how vLLM names a token with return_tokens_as_token_ids
START_UP_TIMEOUT_S = 30.0

logging.getLogger("httpx").setLevel(logging.WARNING)  # not a log line per judgement


class OpenAIGenerator:
    """Generation by a remote engine: each prompt one `/completions` request, all of a batch in flight at once."""

    def __init__(self, config: JudgeConfig, candidate_ids: Sequence[int] = ()):
        self._config = config
        self._candidate_ids = tuple(candidate_ids)
        self._url = config.openai_base_url.rstrip("/")
        self._model = config.openai_model or config.model
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, name="openai-engine", daemon=True).start()
        self._client = self._run(_client(config, config.openai_timeout))
        self._limit = asyncio.Semaphore(config.openai_max_concurrency)

    def generate(
        self, prompts: list[list[int]], images: Images | None = None, conversations: Sequence[list[dict]] = ()
    ) -> list[Generation | GenerationFailure]:
        """A prompt with images goes to /chat/completions as its conversation (`conversations`, the images as
        data-URL parts), which the engine renders with the same chat template; the others as token ids."""
        shown = [bool(prompt_images) for prompt_images in images or [()] * len(prompts)]
        return self._run(self._generate_all(prompts, shown, conversations))

    def _run(self, coroutine: Coroutine) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    async def _generate_all(
        self, prompts: list[list[int]], shown: list[bool], conversations: Sequence[list[dict]]
    ) -> list[Generation | GenerationFailure]:
        logprobs = TOP_LOGPROBS if self._candidate_ids else 0
        requests = [
            ("/chat/completions", chat_body(self._config, self._model, conversations[i], logprobs))
            if shown[i]
            else ("/completions", completion_body(self._config, self._model, prompt, logprobs))
            for i, prompt in enumerate(prompts)
        ]
        return list(await asyncio.gather(*(self._generate_one(path, body) for path, body in requests)))

    async def _generate_one(self, path: str, body: dict) -> Generation | GenerationFailure:
        async with self._limit:
            answer = await self._post_with_retries(path, body)
        if isinstance(answer, GenerationFailure):
            return answer
        try:
            if path == "/chat/completions":
                return generation_from_chat(answer, self._candidate_ids)
            return generation_from_completion(answer, self._candidate_ids)
        except (KeyError, IndexError, TypeError, ValueError) as err:
            return GenerationFailure(f"the engine's answer is not a completion: {type(err).__name__}: {err}")

    async def _post_with_retries(self, path: str, body: dict) -> dict | GenerationFailure:
        retries = self._config.openai_max_retries
        for attempt in range(retries + 1):
            retry_after = None
            try:
                response = await self._client.post(f"{self._url}{path}", json=body)
            except httpx.TimeoutException as err:
                failure = (
                    f"the engine at {self._url} timed out after {self._config.openai_timeout}s ({type(err).__name__})"
                )
            except httpx.TransportError as err:
                failure = f"cannot reach the engine at {self._url}: {type(err).__name__}: {err}"
            else:
                if response.status_code < 400:
                    try:
                        return response.json()
                    except ValueError:
                        return GenerationFailure(
                            f"the engine answered a body that is not JSON: {excerpt(response.text)!r}"
                        )
                failure = f"the engine answered HTTP {response.status_code}: {excerpt(response.text)}"
                if not http_retry.is_retried(response.status_code):
                    return GenerationFailure(f"{failure} (not retried)")
                retry_after = http_retry.retry_after_s(response.headers.get("retry-after"))
            if attempt == retries:
                return GenerationFailure(f"{failure} (attempts: {attempt + 1})")
            await asyncio.sleep(http_retry.backoff_s(attempt, retry_after))
        raise AssertionError("unreachable: the last attempt returns")


def completion_body(config: JudgeConfig, model: str, prompt: Sequence[int], logprobs: int) -> dict:
    """The `/completions` request of one judge prompt: the in-process vLLM backend's sampling settings."""
    return {
        "model": model,
        "prompt": list(prompt),
        "max_tokens": config.max_new_tokens,
        "temperature": config.temperature,
        "top_p": config.top_p,
        "seed": config.seed,
        "skip_special_tokens": True,
        "logprobs": logprobs,
        "return_tokens_as_token_ids": True,
    }


def chat_body(config: JudgeConfig, model: str, messages: list[dict], logprobs: int) -> dict:
    """The `/chat/completions` request of one judge conversation (a vision judge's, its images inline)."""
    body = {
        key: value for key, value in completion_body(config, model, [], 0).items() if key not in ("prompt", "logprobs")
    }
    body["messages"] = messages
    return {**body, "logprobs": True, "top_logprobs": logprobs} if logprobs else body


def generation_from_chat(answer: dict, candidate_ids: Sequence[int]) -> Generation:
    """A `/chat/completions` answer's first choice as a Generation, as generation_from_completion reads a
    completion: its steps are `logprobs.content`, each with the step's token and its `top_logprobs` list."""
    choice = answer["choices"][0]
    steps = (choice.get("logprobs") or {}).get("content") or []
    token_ids = token_ids_of([step["token"] for step in steps]) if steps else None
    rows = [{top["token"]: top["logprob"] for top in step.get("top_logprobs") or []} for step in steps]
    return Generation(
        text=choice["message"]["content"] or "",
        token_ids=token_ids or (),
        hit_token_limit=choice.get("finish_reason") == "length",
        candidate_logprobs=tuple(_candidate_row(row, candidate_ids) for row in rows) if candidate_ids else (),
        generated=None if token_ids else int((answer.get("usage") or {}).get("completion_tokens", 0)),
    )


def generation_from_completion(answer: dict, candidate_ids: Sequence[int]) -> Generation:
    """A `/completions` answer's first choice as a Generation: the tokens by id where the engine names them so
    (else none, and the count from `usage`); a candidate missing from a step's top log-probabilities gets -inf."""
    choice = answer["choices"][0]
    logprobs = choice.get("logprobs") or {}
    token_ids = token_ids_of(logprobs.get("tokens") or [])
    steps = logprobs.get("top_logprobs") or [] if candidate_ids else []
    return Generation(
        text=choice["text"],
        token_ids=token_ids or (),
        hit_token_limit=choice.get("finish_reason") == "length",
        candidate_logprobs=tuple(_candidate_row(step or {}, candidate_ids) for step in steps),
        generated=None if token_ids is not None else int((answer.get("usage") or {}).get("completion_tokens", 0)),
    )


def token_ids_of(tokens: Sequence[str]) -> tuple[int, ...] | None:
    """The ids of tokens named `token_id:N`; None when the engine named them otherwise (by their text)."""
    if not all(isinstance(token, str) and token.startswith(TOKEN_ID_PREFIX) for token in tokens):
        return None
    return tuple(int(token.removeprefix(TOKEN_ID_PREFIX)) for token in tokens)


def _candidate_row(step: dict, candidate_ids: Sequence[int]) -> tuple[float, ...]:
    return tuple(float(step.get(f"{TOKEN_ID_PREFIX}{token}", -math.inf)) for token in candidate_ids)


def check_engine(config: JudgeConfig, needs_logprobs: bool) -> str:
    """What the engine serves, once it has answered as a judge needs; BackendUnavailable naming the flag if not."""
    url, model = config.openai_base_url.rstrip("/"), config.openai_model or config.model
    model_flag = "--openai-model" if config.openai_model else "--model (or --openai-model)"
    with httpx.Client(headers=_headers(config), timeout=START_UP_TIMEOUT_S) as http:
        try:
            listed = http.get(f"{url}/models")
        except httpx.HTTPError as err:
            raise BackendUnavailable(f"--openai-base-url {url}: no engine answers GET /models ({err})") from None
        _refuse_errors(listed, url, "GET /models")
        served = [entry.get("id") for entry in listed.json().get("data", [])]
        if model not in served:
            raise BackendUnavailable(f"{model_flag} {model}: the engine at {url} serves {served}, not it")
        logprobs = TOP_LOGPROBS if needs_logprobs else 0
        probe = http.post(f"{url}/completions", json={**completion_body(config, model, [0], logprobs), "max_tokens": 1})
    _refuse_errors(probe, url, "a one-token completion of a token-id prompt")
    if needs_logprobs:
        choice = probe.json()["choices"][0].get("logprobs") or {}
        if token_ids_of(choice.get("tokens") or []) is None or not choice.get("top_logprobs"):
            raise BackendUnavailable(
                f"--score-mode expected needs the engine's top {TOP_LOGPROBS} log-probabilities by token id (vLLM's "
                f"return_tokens_as_token_ids); the engine at {url} returned {excerpt(str(choice))!r}: use "
                "--score-mode sample"
            )
    return f"{model} at {url}"


def _refuse_errors(response: httpx.Response, url: str, what: str) -> None:
    if response.status_code in (401, 403):
        raise BackendUnavailable(
            f"--openai-api-key: the engine at {url} refuses {what} (HTTP {response.status_code}); set the engine's "
            "key in --openai-api-key or OPENAI_API_KEY"
        )
    if response.status_code >= 400:
        raise BackendUnavailable(
            f"--openai-base-url {url}: {what} failed (HTTP {response.status_code}: {excerpt(response.text)})"
        )


async def _client(config: JudgeConfig, timeout: float) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=config.openai_max_concurrency)
    return httpx.AsyncClient(headers=_headers(config), timeout=timeout, limits=limits)


def _headers(config: JudgeConfig) -> dict[str, str]:
    return {"Authorization": f"Bearer {config.openai_api_key}"} if config.openai_api_key else {}
