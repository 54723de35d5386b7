"""A judge prompt the user brings (`python -m serving --judge-template FILE`): a YAML file of the judge's messages
and how to read its answer.

    system: You grade answers to questions strictly.            # optional
    user: |
      Question: {prompt}
      Answer to grade: {completion}
      Reference answer: {answer}
      Criteria: {rubric}
      Give a score from 1 to 10 as <score>N</score>.
    parser:
      tag: score          # or regex: 'Score: (\\d+)' (its first group), or json_field: score (a JSON object's key)
      range: [1, 10]      # the lowest and the highest score: the reward is (N - low) / (high - low)

Placeholders: `{prompt}` (the conversation as a transcript), `{completion}`, `{answer}` (the request's reference
answer: a request without one is an error) and `{rubric}` (the request's rubric: then every request must carry one,
and a judge without `{rubric}` refuses a request that does); `{{` and `}}` are literal braces. A score outside the
range, or an answer the parser cannot read, is that judgement's error, never a score.

A pairwise template compares two responses: `{response_a}` and `{response_b}` instead of `{completion}` and
`{answer}`, and, instead of a range, the parser's `verdicts`: what the answer says when response A is better, when
B is, and optionally when they tie, e.g. `verdicts: [A, B, tie]`.

`load_template` renders and parses a sample at start-up; a bad file fails there, naming the file and the key or
placeholder.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .protocol.templates import Conversation, Message, as_messages, render_transcript

PLACEHOLDERS = ("prompt", "completion", "answer", "rubric", "response_a", "response_b")
PAIRWISE_PLACEHOLDERS = ("response_a", "response_b")
VERDICT_WORTH = (1.0, 0.0, 0.5)  # P(response A is better) of each pairwise verdict: A better, B better, tie
PARSERS = ("tag", "regex", "json_field")
KEYS = ("system", "user", "parser")


class TemplateError(ValueError):
    """A judge template file that cannot be used; the message names the file and what is wrong."""


@dataclass(frozen=True)
class Reading:
    """What a judge's answer says: its score in [0, 1] (pairwise: that response A is better, a tie counting half)
    and the value read, or why it cannot be read."""

    score: float | None
    value: float | str | None
    error: str | None = None


@dataclass(frozen=True)
class JudgeTemplate:
    path: str
    system: str | None
    user: str
    parser: str  # tag | regex | json_field
    pattern: str  # the tag, the regex or the JSON field
    low: float = 0.0
    high: float = 1.0
    verdicts: tuple[str, ...] = ()  # pairwise: the answer when A is better, when B is, and for a tie if offered

    @property
    def pairwise(self) -> bool:
        return bool(self.verdicts)

    @property
    def placeholders(self) -> set[str]:
        return {name for text in (self.system or "", self.user) for name in _placeholders(text)}

    @property
    def reads_rubric(self) -> bool:
        return "rubric" in self.placeholders

    @property
    def reads_answer(self) -> bool:
        return "answer" in self.placeholders

    def messages(self, prompt: Conversation, completion: str, answer: str | None, rubric: str | None) -> list[Message]:
        return self._render(prompt, rubric, completion=completion, answer=answer or "")

    def pair_messages(
        self, prompt: Conversation, response_a: str, response_b: str, rubric: str | None
    ) -> list[Message]:
        return self._render(prompt, rubric, response_a=response_a, response_b=response_b)

    def _render(self, prompt: Conversation, rubric: str | None, **texts: str) -> list[Message]:
        values = {"prompt": render_transcript(as_messages(prompt)), "rubric": rubric or "", **texts}
        system = [{"role": "system", "content": self.system.format_map(values)}] if self.system else []
        return [*system, {"role": "user", "content": self.user.format_map(values)}]

    def read(self, text: str) -> Reading:
        found = self._find(text)
        if isinstance(found, str) and found.startswith("!"):
            return Reading(None, None, found[1:])
        if self.pairwise:
            return self._verdict(found)
        try:
            value = float(found)
        except (TypeError, ValueError):
            return Reading(None, None, f"the {self.parser} {self.pattern!r} holds {found!r}, not a number")
        if not self.low <= value <= self.high:
            bounds = f"[{self.low:g}, {self.high:g}]"
            return Reading(None, value, f"score {value:g} is outside the template's range {bounds}")
        return Reading((value - self.low) / (self.high - self.low), value)

    def _verdict(self, found: Any) -> Reading:
        verdict = str(found).strip()
        if verdict not in self.verdicts:
            return Reading(None, verdict, f"the verdict {verdict!r} is none of the template's {list(self.verdicts)}")
        return Reading(VERDICT_WORTH[self.verdicts.index(verdict)], verdict)

    def _find(self, text: str) -> Any:
        """The answer's value as found, or '!why not'."""
        if self.parser == "tag":
            values = re.findall(rf"<{re.escape(self.pattern)}>\s*(.*?)\s*</{re.escape(self.pattern)}>", text, re.DOTALL)
            return values[-1] if len(values) == 1 else f"!{len(values)} <{self.pattern}> tags in the answer, not 1"
        if self.parser == "regex":
            match = re.search(self.pattern, text)
            return match.group(1) if match else f"!the regex {self.pattern!r} does not match the answer"
        start, end = text.find("{"), text.rfind("}")
        try:
            value = json.loads(text[start : end + 1]) if start >= 0 else None
        except ValueError:
            value = None
        if not isinstance(value, dict) or self.pattern not in value:
            return f"!no JSON object with the field {self.pattern!r} in the answer"
        return value[self.pattern]


def load_template(path: str | Path) -> JudgeTemplate:
    """The checked template of a YAML file: a sample rendered and a sample answer read, or TemplateError."""
    import yaml

    name = str(path)
    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as err:
        raise TemplateError(f"{name}: cannot read the judge template: {err}") from None
    _need(isinstance(raw, Mapping), name, "", f"must be a YAML mapping with {KEYS}")
    unknown = sorted(set(raw) - set(KEYS))
    _need(not unknown, name, "", f"unknown keys {unknown}; a judge template has {KEYS}")
    _need(isinstance(raw.get("user"), str) and raw["user"].strip(), name, "user", "the user message is required")
    _need(raw.get("system") is None or isinstance(raw["system"], str), name, "system", "must be text")
    for key in ("system", "user"):
        for placeholder in _placeholders(raw.get(key) or "", name, key):
            _need(placeholder in PLACEHOLDERS, name, key, f"unknown placeholder {{{placeholder}}}; use {PLACEHOLDERS}")
    in_user = set(_placeholders(raw["user"], name, "user"))
    pairwise = bool(in_user & set(PAIRWISE_PLACEHOLDERS))
    if pairwise:
        _need(
            in_user >= set(PAIRWISE_PLACEHOLDERS),
            name,
            "user",
            "a pairwise template needs {response_a} and {response_b}",
        )
        mixed = sorted(
            {"completion", "answer"} & {p for key in ("system", "user") for p in _placeholders(raw.get(key) or "")}
        )
        _need(not mixed, name, "user", f"a pairwise template compares {{response_a}} with {{response_b}}; drop {mixed}")
    else:
        _need("completion" in in_user, name, "user", "needs {completion} (or {response_a} and {response_b})")
    parser = _pairwise_parser(raw.get("parser"), name) if pairwise else _parser(raw.get("parser"), name)
    template = JudgeTemplate(name, raw.get("system"), raw["user"], **parser)
    _check_sample(template)
    return template


def _pairwise_parser(raw: Any, name: str) -> dict:
    parser = _answer_parser(raw, name, "verdicts")
    verdicts = raw.get("verdicts")
    _need(
        isinstance(verdicts, list)
        and len(verdicts) in (2, 3)
        and all(isinstance(v, str) and v.strip() == v and v for v in verdicts)
        and len(set(verdicts)) == len(verdicts),
        name,
        "parser.verdicts",
        f"must be 2 or 3 distinct texts (A better, B better, tie), got {verdicts!r}",
    )
    return {**parser, "verdicts": tuple(verdicts)}


def _parser(raw: Any, name: str) -> dict:
    parser = _answer_parser(raw, name, "range")
    bounds = raw.get("range")
    _need(
        isinstance(bounds, list) and len(bounds) == 2 and all(isinstance(b, int | float) for b in bounds),
        name,
        "parser.range",
        f"must be [lowest, highest] score, got {bounds!r}",
    )
    _need(bounds[0] < bounds[1], name, "parser.range", f"the lowest score must be below the highest, got {bounds}")
    return {**parser, "low": float(bounds[0]), "high": float(bounds[1])}


def _answer_parser(raw: Any, name: str, values: str) -> dict:
    """Where the answer's value is: the `parser` and `pattern` of the mapping whose other key is `values`."""
    _need(isinstance(raw, Mapping), name, "parser", f"must be a mapping: one of {PARSERS}, and {values}")
    kinds = [kind for kind in PARSERS if kind in raw]
    _need(len(kinds) == 1, name, "parser", f"needs exactly one of {PARSERS}, got {sorted(raw)}")
    unknown = sorted(set(raw) - {*PARSERS, values})
    _need(not unknown, name, "parser", f"unknown keys {unknown}")
    kind, pattern = kinds[0], raw[kinds[0]]
    _need(isinstance(pattern, str) and pattern, name, f"parser.{kind}", "must be non-empty text")
    if kind == "regex":
        try:
            groups = re.compile(pattern).groups
        except re.error as err:
            raise TemplateError(f"{name}: parser.regex: not a regular expression: {err}") from None
        _need(groups >= 1, name, "parser.regex", "needs a group around the value, e.g. 'Score: (\\d+)'")
    return {"parser": kind, "pattern": pattern}


def _check_sample(template: JudgeTemplate) -> None:
    """Renders a sample request and reads a sample answer of the highest score (pairwise: A is better), as the judge
    will."""
    if template.pairwise:
        template.pair_messages("What is 2 + 2?", "4", "5", "correct")
        best: Any = template.verdicts[0]
    else:
        template.messages("What is 2 + 2?", "4", "4", "correct")
        best = template.high
    tag, text = template.pattern, best if isinstance(best, str) else f"{best:g}"
    samples = {"tag": f"<{tag}>{text}</{tag}>", "json_field": json.dumps({tag: best})}
    if template.parser in samples:  # a regex: no sample answer can be made for it
        reading = template.read(samples[template.parser])
        key = f"parser.{template.parser}"
        _need(reading.score == 1.0, template.path, key, f"cannot read a sample answer: {reading.error}")


def _placeholders(text: str, name: str = "", key: str = "") -> list[str]:
    try:
        return [field for _, field, _, _ in string.Formatter().parse(text) if field is not None]
    except ValueError as err:
        raise TemplateError(f"{name}: {key}: {err} (write literal braces as {{{{ and }}}})") from None


def _need(condition: Any, name: str, key: str, message: str) -> None:
    if not condition:
        raise TemplateError(f"{name}: {key + ': ' if key else ''}{message}")
