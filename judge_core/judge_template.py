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

PLACEHOLDERS = ("prompt", "completion", "answer", "rubric")
PARSERS = ("tag", "regex", "json_field")
KEYS = ("system", "user", "parser")


class TemplateError(ValueError):
    """A judge template file that cannot be used; the message names the file and what is wrong."""


@dataclass(frozen=True)
class Reading:
    """What a judge's answer says: its score in [0, 1] and the value read, or why it cannot be read."""

    score: float | None
    value: float | None
    error: str | None = None


@dataclass(frozen=True)
class JudgeTemplate:
    path: str
    system: str | None
    user: str
    parser: str  # tag | regex | json_field
    pattern: str  # the tag, the regex or the JSON field
    low: float
    high: float

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
        values = {
            "prompt": render_transcript(as_messages(prompt)),
            "completion": completion,
            "answer": answer or "",
            "rubric": rubric or "",
        }
        system = [{"role": "system", "content": self.system.format_map(values)}] if self.system else []
        return [*system, {"role": "user", "content": self.user.format_map(values)}]

    def read(self, text: str) -> Reading:
        found = self._find(text)
        if isinstance(found, str) and found.startswith("!"):
            return Reading(None, None, found[1:])
        try:
            value = float(found)
        except (TypeError, ValueError):
            return Reading(None, None, f"the {self.parser} {self.pattern!r} holds {found!r}, not a number")
        if not self.low <= value <= self.high:
            bounds = f"[{self.low:g}, {self.high:g}]"
            return Reading(None, value, f"score {value:g} is outside the template's range {bounds}")
        return Reading((value - self.low) / (self.high - self.low), value)

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
    _need("completion" in _placeholders(raw["user"], name, "user"), name, "user", "needs {completion}")
    template = JudgeTemplate(name, raw.get("system"), raw["user"], *_parser(raw.get("parser"), name))
    _check_sample(template)
    return template


def _parser(raw: Any, name: str) -> tuple[str, str, float, float]:
    _need(isinstance(raw, Mapping), name, "parser", f"must be a mapping: one of {PARSERS}, and range")
    kinds = [kind for kind in PARSERS if kind in raw]
    _need(len(kinds) == 1, name, "parser", f"needs exactly one of {PARSERS}, got {sorted(raw)}")
    unknown = sorted(set(raw) - {*PARSERS, "range"})
    _need(not unknown, name, "parser", f"unknown keys {unknown}")
    kind, pattern = kinds[0], raw[kinds[0]]
    _need(isinstance(pattern, str) and pattern, name, f"parser.{kind}", "must be non-empty text")
    if kind == "regex":
        try:
            groups = re.compile(pattern).groups
        except re.error as err:
            raise TemplateError(f"{name}: parser.regex: not a regular expression: {err}") from None
        _need(groups >= 1, name, "parser.regex", "needs a group around the score, e.g. 'Score: (\\d+)'")
    bounds = raw.get("range")
    _need(
        isinstance(bounds, list) and len(bounds) == 2 and all(isinstance(b, int | float) for b in bounds),
        name,
        "parser.range",
        f"must be [lowest, highest] score, got {bounds!r}",
    )
    _need(bounds[0] < bounds[1], name, "parser.range", f"the lowest score must be below the highest, got {bounds}")
    return kind, pattern, float(bounds[0]), float(bounds[1])


def _check_sample(template: JudgeTemplate) -> None:
    """Renders a sample request and reads a sample answer of the highest score, as the judge will."""
    template.messages("What is 2 + 2?", "4", "4", "correct")
    tag, high = template.pattern, f"{template.high:g}"
    samples = {"tag": f"<{tag}>{high}</{tag}>", "json_field": json.dumps({tag: template.high})}
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
