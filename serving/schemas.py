"""The HTTP API's request and response bodies (the judge-server guide's shapes; FastAPI publishes them
as the OpenAPI schema at /openapi.json)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from judge_core.protocol import content
from judge_core.protocol.chat_markup import RolloutTextError, split_rollout
from judge_core.protocol.judge_api import answer_text, rubric_text, scalar_text

from .judges import ComparisonItem, JudgeItem, Verdict

REQUEST_ID_MAX_CHARS = 256


def _numbers_as_text(to_text):
    """A before-validator that gives a JSON number or boolean its wire text (judge_api); anything else
    meets the field's own type check, so a list or an object is refused naming the field."""
    return BeforeValidator(
        lambda value: to_text(value) if isinstance(value, (int, float)) else value,
        json_schema_input_type=str | int | float | bool | None,
    )


def _unicode(text: str | None) -> str | None:
    """Refuses a lone surrogate (JSON can escape one, as "\\ud800"): it is no Unicode character, and a
    tokenizer or the response's UTF-8 encoding would fail on it later, far from the field that holds it."""
    if text is not None:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as err:
            where = f"U+{ord(text[err.start]):04X} at character {err.start}"
            raise ValueError(f"not valid Unicode: a lone surrogate {where}") from None
    return text


Text = Annotated[str, AfterValidator(_unicode)]
AnswerText = Annotated[str | None, _numbers_as_text(answer_text), AfterValidator(_unicode)]
RequestIdText = Annotated[
    str | None, _numbers_as_text(lambda value: scalar_text(value, "request_id")), AfterValidator(_unicode)
]


def _data_url(url: str) -> str:
    content.image_bytes(url, "url")
    return url


class TextPart(BaseModel):
    type: Literal["text"]
    text: Text


class ImageURL(BaseModel):
    url: Annotated[str, AfterValidator(_data_url)] = Field(description="data:image/{png,jpeg,gif,webp};base64,...")
    detail: Literal["auto", "low", "high"] | None = None


class ImagePart(BaseModel):
    type: Literal["image_url"]
    image_url: ImageURL


ContentPart = Annotated[TextPart | ImagePart, Field(discriminator="type")]


class ChatMessage(BaseModel):
    role: Literal["system", "user", "assistant"]
    content: Text | Annotated[list[ContentPart], Field(min_length=1)] = Field(
        description="text, or OpenAI-style content parts: text, and images as data URLs"
    )


Prompt = Text | Annotated[list[ChatMessage], Field(min_length=1)]


def _rubric_field():
    return Field(
        None,
        description="for a judge served with --judge-template whose template reads {rubric} (then required): the "
        "criteria to judge by, as text or a list of criteria (one `- criterion` line each); other judges refuse it",
    )


RubricText = Annotated[
    str | None,
    BeforeValidator(
        lambda value: rubric_text(value) if isinstance(value, list) else value,
        json_schema_input_type=str | list[str] | None,
    ),
    AfterValidator(_unicode),
]


def _request_id_field():
    return Field(
        None,
        max_length=REQUEST_ID_MAX_CHARS,
        description='echoed in the response (a number as its text: 7 as "7"); the server generates one when absent',
    )


def _named_prompt(prompt: str | list[ChatMessage]) -> dict[str, str]:
    """The prompt's texts, named for error messages."""
    if isinstance(prompt, str):
        return {"prompt": prompt}
    named = {}
    for i, message in enumerate(prompt):
        if isinstance(message.content, str):
            named[f"prompt[{i}].content"] = message.content
        else:
            parts = enumerate(message.content)
            named.update({f"prompt[{i}].content[{j}].text": p.text for j, p in parts if isinstance(p, TextPart)})
    return named


def _prompt_value(prompt: str | list[ChatMessage]):
    return prompt if isinstance(prompt, str) else [m.model_dump(exclude_none=True) for m in prompt]


class JudgeRequest(BaseModel):
    prompt: Prompt = Field(description="the user prompt, or the conversation before the completion as chat messages")
    completion: Text = Field(description="the response to judge")
    answer: AnswerText = Field(
        None,
        description="reference answer (the rule judge needs it); a number or boolean is read as its text "
        '(4 and 4.0 as "4", 2.5 as "2.5", true as "true"); NaN or Infinity is no answer',
    )
    answer_type: Text | None = Field(
        None,
        description="rule judge: NUMBER, MATH_EXPRESSIONS, MULTIPLE_CHOICE, BOOLEAN or TEXT; "
        "inferred from the answer when absent",
    )
    rubric: RubricText = _rubric_field()
    request_id: RequestIdText = _request_id_field()

    def texts(self) -> dict[str, str]:
        """Every free text of the request, named for error messages."""
        named = {"completion": self.completion, "answer": self.answer or "", "rubric": self.rubric or ""}
        return {**named, **_named_prompt(self.prompt)}

    def conversation(self):
        """The prompt as the judges take it (text, or chat messages as dicts)."""
        return _prompt_value(self.prompt)

    def item(self) -> JudgeItem:
        return JudgeItem(
            prompt=_prompt_value(self.prompt),
            completion=self.completion,
            answer=self.answer,
            answer_type=self.answer_type,
            rubric=self.rubric,
        )


class CompareRequest(BaseModel):
    prompt: Prompt = Field(description="the user prompt, or the conversation before the responses as chat messages")
    response_a: Text = Field(description="the first response to the prompt")
    response_b: Text = Field(description="the second response to the prompt")
    rubric: RubricText = _rubric_field()
    request_id: RequestIdText = _request_id_field()

    def texts(self) -> dict[str, str]:
        """Every free text of the request, named for error messages."""
        return {"response_a": self.response_a, "response_b": self.response_b, **_named_prompt(self.prompt)}

    def conversation(self):
        """The prompt as the judges take it (text, or chat messages as dicts)."""
        return _prompt_value(self.prompt)

    def item(self) -> ComparisonItem:
        return ComparisonItem(_prompt_value(self.prompt), self.response_a, self.response_b, self.rubric)


class VerdictResponse(BaseModel):
    """What /judge and /compare answer for one request."""

    score: float | None
    request_id: str
    explanation: str = ""
    metadata: dict[str, Any] = Field(
        description="latency (seconds, queue + model), batch_size, judge, model_id, and judge-specific values"
    )
    error: str | None = Field(None, description="why this request has no score; null on success")

    @classmethod
    def of(cls, verdict: Verdict, request_id: str, metadata: dict[str, Any]):
        fields = {"detailed_scores": verdict.detailed_scores} if "detailed_scores" in cls.model_fields else {}
        return cls(
            score=verdict.score,
            request_id=request_id,
            explanation=verdict.explanation,
            metadata={**metadata, **verdict.metadata},
            error=verdict.error,
            **fields,
        )


class JudgeResponse(VerdictResponse):
    score: float | None = Field(description="in [0, 1]; null when this judgement failed (see `error`)")
    metadata: dict[str, Any] = Field(
        description="latency (seconds, queue + model), batch_size, judge, model_id, and judge-specific values: "
        "raw_reward (scalar judge), attribute_predictions and attribute_weights (multi-attribute judge)"
    )
    detailed_scores: dict[str, float] | None = Field(
        None, description="per-attribute scores in [0, 1], for judges that give them (multi-attribute scalar judge)"
    )


class CompareResponse(VerdictResponse):
    score: float | None = Field(
        description="the probability that response_a is better, in [0, 1]; null when the comparison failed"
    )
    metadata: dict[str, Any] = Field(
        description="latency (seconds, queue + model), batch_size, judge, model_id, and judge-specific values: "
        "raw_reward_a and raw_reward_b (scalar judge)"
    )


class BatchJudgeRequest(BaseModel):
    requests: list[JudgeRequest] = Field(min_length=1, description="judged together; answered in this order")


class BatchJudgeResponse(BaseModel):
    responses: list[JudgeResponse] = Field(description="one per request, in request order, each with its request_id")


class BatchCompareRequest(BaseModel):
    requests: list[CompareRequest] = Field(min_length=1, description="compared together; answered in this order")


class BatchCompareResponse(BaseModel):
    responses: list[CompareResponse] = Field(description="one per request, in request order, each with its request_id")


class GroupJudgeRequest(BaseModel):
    prompt: Prompt = Field(description="the user prompt, or the conversation before the completions as chat messages")
    completions: list[Text] = Field(min_length=2, description="the group's completions of this prompt (2 or more)")
    schedule: Literal["all_pairs", "k_random"] = Field(
        "all_pairs",
        description="all_pairs: every pair once, N(N-1)/2 comparisons; k_random: each completion against k "
        "random siblings, N*k/2 to N*k comparisons",
    )
    k: int | None = Field(None, ge=1, description="k_random: siblings each completion meets (1 to N-1)")
    seed: int = Field(0, description="k_random: seed of the draw")
    rubric: RubricText = _rubric_field()
    request_id: RequestIdText = _request_id_field()

    def texts(self) -> dict[str, str]:
        """Every free text of the request, named for error messages."""
        return {**{f"completions[{i}]": c for i, c in enumerate(self.completions)}, **_named_prompt(self.prompt)}

    def conversation(self):
        """The prompt as the judges take it (text, or chat messages as dicts)."""
        return _prompt_value(self.prompt)


class GroupReward(BaseModel):
    score: float | None = Field(
        description="mean win probability against the siblings it was compared with, over the comparisons that "
        "answered; null when none answered (see error)"
    )
    comparisons: int = Field(description="comparisons of this completion that answered")
    failed: int = Field(description="comparisons of this completion that failed")
    error: str | None = Field(None, description="what failed; null when every comparison answered")
    orders_agreed: int | None = Field(
        None,
        description="comparisons that answered whose two orders chose the same response (pairwise generative "
        "judges); null for a judge that compares in one order",
    )


class GroupJudgeResponse(BaseModel):
    request_id: str
    rewards: list[GroupReward] = Field(description="one per completion, in order")
    schedule: str
    comparisons_run: int = Field(description="comparisons judged (a pairwise judge judges each in both orders)")
    metadata: dict[str, Any] = Field(
        description="latency (seconds, queue + model), judge, model_id, and position_consistency (pairwise "
        "judges: share of answered comparisons whose two orders chose the same response)"
    )


class HealthResponse(BaseModel):
    status: Literal["ok"]
    model_loaded: bool
    replica: str = Field(description="the process that answered: host:pid, or the Ray Serve replica id")
    judge_kind: str
    backend: str
    backend_reason: str = Field("", description="why this backend runs: --backend, or what --backend auto found")
    model_id: str
    model_version: str
    scoring: str = Field("", description="what the score is (scalar judges: how it maps the raw reward)")
    tokenization: str = Field("", description="how judge inputs are tokenized: the BOS the judge reads")
    reads_answer: bool = Field(
        False,
        description="whether a request's `answer` reaches the judge (a reference, the response compared with, a "
        "rule's ground truth); false: it is ignored",
    )
    reads_images: bool = Field(
        False, description="whether the judge reads a prompt's images; false: refused, or dropped (--drop-images)"
    )
    reads_rubric: bool = Field(
        False,
        description="whether every request must carry a `rubric` (a --judge-template with {rubric}); false: refused",
    )
    queue_depth: int = Field(description="judgements accepted and not answered yet")
    max_batch_size: int
    batch_timeout: float
    batches_run: int
    judgements_answered: int
    uptime_s: float


class OpenRLHFLabel(BaseModel):
    """A label that carries more than the reference answer: OpenRLHF posts the dataset's label column as it is, so
    a column of objects brings each prompt's rubric along."""

    model_config = ConfigDict(extra="forbid")
    answer: AnswerText = Field(None, description="the reference answer")
    rubric: RubricText = _rubric_field()


class OpenRLHFRewardRequest(BaseModel):
    """OpenRLHF's remote reward request (`--reward.remote_url`): per sample, the prompt and response decoded
    together, the prompt text the policy was given, and the dataset's label."""

    query: list[Text] = Field(min_length=1, description="prompt + response, decoded with special tokens kept")
    prompts: list[Text] = Field(description="the prompt text the policy was given (usually chat-templated)")
    labels: list[OpenRLHFLabel | AnswerText] | None = Field(
        None, description="the reference answers, or objects {answer, rubric}; absent or null: none"
    )

    @model_validator(mode="after")
    def _one_per_sample(self):
        sizes = {"query": len(self.query), "prompts": len(self.prompts)}
        if self.labels is not None:
            sizes["labels"] = len(self.labels)
        if len(set(sizes.values())) != 1:
            raise ValueError(f"query, prompts and labels must hold one entry per sample, got lengths {sizes}")
        return self

    def judge_requests(self) -> list[JudgeRequest | str]:
        """Per sample, the judge request (prompt and response recovered as plain text, judge_core.protocol.
        chat_markup; the label as the reference answer), or why there is none."""
        labels = self.labels or [None] * len(self.query)
        requests = []
        for index, (query, prompt, label) in enumerate(zip(self.query, self.prompts, labels, strict=True)):
            try:
                conversation, response = split_rollout(query, prompt)
                answer, rubric = (label.answer, label.rubric) if isinstance(label, OpenRLHFLabel) else (label, None)
                requests.append(JudgeRequest(prompt=conversation, completion=response, answer=answer, rubric=rubric))
            except RolloutTextError as err:
                requests.append(f"sample {index}: {err}")
            except ValidationError as err:
                reasons = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
                requests.append(f"sample {index}: the recovered request is invalid: {reasons}")
        return requests


class OpenRLHFRewardResponse(BaseModel):
    """What OpenRLHF reads back: one reward per sample (`scores`, the same values, for its filtering and logs)."""

    rewards: list[float]
    scores: list[float]
    extra_logs: dict[str, list[float]] = Field(default_factory=dict)
