"""The judge API's wire format in one place (the API of the judge integration guide): `JudgeItem`, the
content of one judge request, shared by the server's judges and every client; the one text form of the
scalar fields `answer` and `request_id`, which the client and the server both apply; and what a
/batch_judge answer must look like, checked once for the reward adapter's batching client and
evaluation's HTTP judge. Each client turns a failed item or a malformed answer into its own kind of failure."""

from __future__ import annotations

import json
import math
import numbers
from dataclasses import dataclass, field
from typing import Any

from . import content
from .templates import Conversation, as_messages

BODY_EXCERPT_CHARS = 200


def prompt_key(prompt: Conversation) -> str:
    """A prompt's identity, the same for equal conversations (a text prompt is its one user turn), on the client
    and on the server alike: what gathers a GRPO group's completions, keeps the items that share a prompt together
    in a batch (the scalar judge computes it once), and keys the client's cache. An image counts by its digest."""
    return json.dumps(content.keyed(as_messages(prompt)), ensure_ascii=False, sort_keys=True)


@dataclass(frozen=True)
class JudgeItem:
    """One judgement to make: a request's content, without its HTTP wrapping or request_id."""

    prompt: Conversation
    completion: str
    answer: str | None = None
    answer_type: str | None = None
    rubric: str | None = None  # for a judge whose template reads one (serving's --judge-template)

    @classmethod
    def create(
        cls,
        prompt: Conversation,
        completion: str,
        answer: Any = None,
        answer_type: str | None = None,
        rubric: Any = None,
    ) -> JudgeItem:
        """A checked item from a caller's values: a text or message-list prompt, a text completion, the
        answer in its wire text form (`answer_text`), the rubric as text (`rubric_text`)."""
        if not isinstance(completion, str):
            raise TypeError(f"completion must be a string, got {type(completion).__name__}")
        if not isinstance(prompt, str):
            prompt = tuple(as_messages(prompt))
        if answer_type is not None and not isinstance(answer_type, str):
            raise TypeError(f"answer_type must be a string or None, got {type(answer_type).__name__}")
        return cls(prompt, completion, answer_text(answer), answer_type, rubric_text(rubric))

    def key(self) -> str:
        """Identity of the judgement: the adapter's cache key and in-flight de-duplication key."""
        fields = [prompt_key(self.prompt), self.completion, self.answer, self.answer_type]
        return json.dumps(fields + ([self.rubric] if self.rubric is not None else []), ensure_ascii=False)

    def request_body(self, request_id: str) -> dict:
        """This item as one request of a /judge or /batch_judge body."""
        prompt = self.prompt if isinstance(self.prompt, str) else list(self.prompt)
        return {
            "prompt": prompt,
            "completion": self.completion,
            "answer": self.answer,
            "answer_type": self.answer_type,
            "request_id": request_id,
            **({"rubric": self.rubric} if self.rubric is not None else {}),
        }


@dataclass(frozen=True)
class ComparisonItem:
    """One comparison to make (/compare): which of two responses to the same prompt is better."""

    prompt: Conversation
    response_a: str
    response_b: str
    rubric: str | None = None  # for a judge whose pairwise template reads one (serving's --judge-template)


def scalar_text(value: Any, field: str) -> str | None:
    """The one text form of a scalar request field on the wire: text as it is; true/false for a boolean;
    an integer's digits; a finite float's shortest round-trip form, without the ".0" of an integral one
    (4.0 -> "4", 2.5 -> "2.5", 1e20 -> "1e+20"). None stays None. ValueError for a non-finite number,
    TypeError for anything else (lists, objects), both naming `field`."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        number = float(value)
        if not math.isfinite(number):
            raise ValueError(f"{field} must be a finite number, got {number!r}")
        return repr(number).removesuffix(".0")
    raise TypeError(f"{field} must be a string, a number or a boolean, got {type(value).__name__}")


def rubric_text(rubric: Any) -> str | None:
    """A rubric's one text form: text as it is; a list of criteria as one `- criterion` line each. TypeError
    naming the field for anything else, or a list of anything but text."""
    if rubric is None or isinstance(rubric, str):
        return rubric
    if hasattr(rubric, "tolist"):  # a list read from parquet arrives as a numpy array
        rubric = rubric.tolist()
    if isinstance(rubric, list | tuple) and all(isinstance(criterion, str) for criterion in rubric):
        return "\n".join(f"- {criterion}" for criterion in rubric)
    raise TypeError(f"rubric must be text or a list of criteria (text), got {type(rubric).__name__}")


def answer_text(answer: Any) -> str | None:
    """The reference answer's wire text (`scalar_text`); a non-finite number is no answer (NaN is how
    pandas marks a missing value), never the text "nan" that a rule would match."""
    if isinstance(answer, numbers.Real) and not isinstance(answer, numbers.Integral) and not math.isfinite(answer):
        return None
    return scalar_text(answer, "answer")


class MalformedAnswer(ValueError):
    """The judge server's answer breaks the API; the message says how."""


def excerpt(text: str) -> str:
    return text[:BODY_EXCERPT_CHARS]


def responses_by_request_id(body: Any) -> dict[str, dict]:
    """The responses of a /batch_judge answer body by request_id (the first, if an id repeats)."""
    responses = body.get("responses") if isinstance(body, dict) else None
    if not isinstance(responses, list) or not all(isinstance(r, dict) for r in responses):
        raise MalformedAnswer(f"malformed /batch_judge body (no list of responses): {excerpt(str(body))}")
    by_id: dict[str, dict] = {}
    for response in responses:
        request_id = response.get("request_id")
        if not isinstance(request_id, str):
            shown = excerpt(repr(request_id))
            raise MalformedAnswer(f"malformed /batch_judge body: request_id {shown} is not a string")
        by_id.setdefault(request_id, response)
    return by_id


@dataclass(frozen=True)
class ItemAnswer:
    """The judge's answer for one request: a score in [0, 1], or the reason there is none."""

    score: float | None
    error: str | None = None
    explanation: str = ""
    detailed_scores: dict | None = None
    metadata: dict = field(default_factory=dict)


def item_answer(response: dict | None, request_id: str) -> ItemAnswer:
    if response is None:
        return ItemAnswer(None, f"no result for request_id {request_id}")
    score, error = response.get("score"), response.get("error")
    if error or score is None:
        return ItemAnswer(None, str(error or "no score and no error given"))
    # The range check also refuses NaN, infinities and integers too large for a float.
    if isinstance(score, bool) or not isinstance(score, numbers.Real) or not 0 <= score <= 1:
        return ItemAnswer(None, f"invalid score {excerpt(repr(score))}")
    detailed, metadata = response.get("detailed_scores"), response.get("metadata")
    return ItemAnswer(
        float(score),
        None,
        str(response.get("explanation") or ""),
        detailed if isinstance(detailed, dict) else None,
        metadata if isinstance(metadata, dict) else {},
    )
