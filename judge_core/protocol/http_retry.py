"""When an HTTP call to an engine or a judge is tried again, and after how long: one policy for the reward client's
judge requests (judge_rewards.judge_client) and the server's requests to an OpenAI-compatible engine
(judge_models.openai_engine).

Timeouts, connection errors, 408, 429 and 5xx are retried; other 4xx are not (the same request would fail again).
The wait is exponential backoff with full jitter, which spreads the retries of many callers instead of
synchronising them; a Retry-After header in seconds sets it instead. Either is capped at BACKOFF_CAP_S.
"""

from __future__ import annotations

import random

BACKOFF_BASE_S = 0.2
BACKOFF_CAP_S = 5.0
RETRIED_4XX = frozenset({408, 429})  # request timeout, too many requests: a later attempt may succeed


def is_retried(status: int) -> bool:
    """Whether an answer with this HTTP status is worth another attempt."""
    return status >= 500 or status in RETRIED_4XX


def backoff_s(attempt: int, retry_after: float | None) -> float:
    """Seconds to wait before attempt `attempt + 1` (attempt 0 is the first)."""
    if retry_after is not None:
        return min(BACKOFF_CAP_S, retry_after)
    return random.uniform(0, min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2**attempt))


def retry_after_s(header: str | None) -> float | None:
    """A Retry-After header's seconds (an HTTP date or garbage: None)."""
    try:
        return max(0.0, float(header or ""))
    except ValueError:
        return None
