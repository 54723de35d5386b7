"""Rule-based scoring of a completion against a reference answer: the judge server's `rule` judge and
the reward adapter's fallback both call `score_answer`, so a rule reward means the same everywhere.

The rule looks for ONE final answer in the completion, in this order: the last ``\\boxed{...}`` (also
the bare ``boxed{...}`` some models write, e.g. ``**boxed{4}**``), then the last "answer is X" /
"Answer: X" statement, then a type-specific fallback (the last number, a lone choice letter, a yes/no
first word; for text, the whole text or the claim that ends the last sentence, "... is X."). A hedge such as
"A or B" or ``\\boxed{3 or 4}`` is not an answer, and the rule never rewards a completion merely for
containing the reference somewhere.

Answer types: NUMBER, MATH_EXPRESSIONS (math-verify: parse + verify), MULTIPLE_CHOICE, BOOLEAN,
TEXT (normalized exact match). With `answer_type=None` the type is inferred from the reference. A number
or boolean reference is read in its wire text form (judge_api.answer_text: 4.0 is "4", True is "true").
Without a reference answer (None, blank, or a non-finite number such as pandas' NaN) no rule can judge:
`NoReferenceAnswer` is raised, never a score of 0.
"""

from __future__ import annotations

import math
import re
import threading
from dataclasses import dataclass
from fractions import Fraction

from .protocol.judge_api import answer_text

NUMBER = "NUMBER"
MATH_EXPRESSIONS = "MATH_EXPRESSIONS"
MULTIPLE_CHOICE = "MULTIPLE_CHOICE"
BOOLEAN = "BOOLEAN"
TEXT = "TEXT"
ANSWER_TYPES = (NUMBER, MATH_EXPRESSIONS, MULTIPLE_CHOICE, BOOLEAN, TEXT)

# math-verify's timeouts use SIGALRM, which only the main thread may set.
MATH_VERIFY_TIMEOUT_S = 5
# Past these sizes sympy would compute astronomically large integers (e.g. 9^{9^{9}}), which no timeout
# can interrupt off the main thread; such an answer is refused instead of verified.
MAX_EXPONENT = 10_000
MAX_FACTORIAL = 10_000

_TRUE_WORDS = {"yes", "true", "correct"}
_FALSE_WORDS = {"no", "false", "incorrect"}
_HEDGE = r"(?!\s*(?:,|/|\bor\b|\band\b)\s*\(?[A-Za-z0-9])"
_MARKER = r"\banswer\s*(?:is\b|:|=)\s*[:=]?\s*"
_NUMBER_TOKEN = r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+"


class NoReferenceAnswer(ValueError):
    """The rule cannot judge without a reference answer (a missing reference is not a wrong answer)."""


@dataclass(frozen=True)
class RuleScore:
    score: float
    explanation: str
    answer_type: str


def score_answer(completion: str, answer: str | None, answer_type: str | None = None) -> RuleScore:
    """Score `completion` against the reference `answer` in [0, 1] with the rule of `answer_type`."""
    reference = _reference_text(answer)
    resolved = resolve_answer_type(reference, answer_type)
    if not isinstance(completion, str):
        raise TypeError(f"completion must be a string, got {type(completion).__name__}")
    return _SCORERS[resolved](completion, reference)


def resolve_answer_type(answer: str, answer_type: str | None) -> str:
    """The answer type to use: the given one (case-insensitive), or one inferred from the reference."""
    answer = _reference_text(answer)
    if answer_type:
        name = str(answer_type).strip().upper()
        if name not in ANSWER_TYPES:
            raise ValueError(f"answer_type {answer_type!r} is not one of {ANSWER_TYPES}")
        return name
    if _polarity(answer) is not None:
        return BOOLEAN
    if _choice_letter(answer) is not None:
        return MULTIPLE_CHOICE
    if _number_value(answer) is not None:
        return NUMBER
    if re.search(r"\\|\^|[=+*/<>]|\d\s*[a-z]\b|\b[a-z]\s*[-+]", answer):
        return MATH_EXPRESSIONS
    return TEXT


def _reference_text(answer) -> str:
    text = answer_text(answer)  # the wire form: a number as the server sees it; NaN or inf is no answer
    if text is None:
        raise NoReferenceAnswer("no reference answer: the rule-based scorer cannot judge this completion")
    text = text.strip()
    if not text:
        raise NoReferenceAnswer("empty reference answer: the rule-based scorer cannot judge this completion")
    return last_boxed(text) or text


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{..}`` / ``boxed{..}`` / ``\\fbox{..}``, braces balanced."""
    starts = [m.end() for m in re.finditer(r"(?:\\?boxed|\\fbox)\s*\{", text)]
    for start in reversed(starts):
        depth = 1
        for i in range(start, len(text)):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                return text[start:i].strip()
    return None


def _answer_statement(completion: str) -> str | None:
    """What follows the last "answer is" / "Answer:" on its line, if any."""
    matches = list(re.finditer(_MARKER + r"(.+)", completion, flags=re.IGNORECASE))
    return matches[-1].group(1).strip() if matches else None


# ---- NUMBER ----------------------------------------------------------------------------------------


def _number_value(text: str) -> Fraction | None:
    """`text` read as one number: 42, -3.5, 1,000, 1e-3, 50%, $12, 3/4, \\frac{3}{4}."""
    cleaned = re.sub(r"\\[,!; ]|\\?%|\\?\$", "", unwrap_latex_text(text)).strip().rstrip(".").strip()
    cleaned = re.sub(r"^\\[dt]?frac\{([^{}]+)\}\{([^{}]+)\}$", r"\1/\2", cleaned)
    match = re.fullmatch(rf"({_NUMBER_TOKEN})\s*(?:/\s*({_NUMBER_TOKEN}))?", cleaned)
    if not match:
        return None
    try:
        value = Fraction(match.group(1).replace(",", ""))
        if match.group(2):
            value /= Fraction(match.group(2).replace(",", ""))
    except (ValueError, ZeroDivisionError):
        return None
    return value


def _numbers_in(text: str) -> list[Fraction]:
    tokens = re.findall(rf"\\[dt]?frac\{{[^{{}}]+\}}\{{[^{{}}]+\}}|(?:{_NUMBER_TOKEN})(?:/\d+)?", text)
    return [v for v in map(_number_value, tokens) if v is not None]


def _is_hedge(text: str) -> bool:
    return bool(re.search(r"\b(?:or|and)\b|;|,(?!\d{3})|\\(?:pm|mp)|±", text))


def _score_number(completion: str, reference: str) -> RuleScore:
    expected = _number_value(reference)
    if expected is None:
        return _score_math(completion, reference, answer_type=NUMBER)
    boxed = last_boxed(completion)
    if (
        boxed is not None
        and _number_value(boxed) is None
        and not _is_hedge(boxed)
        and re.search(r"\\[a-zA-Z]|\^|\*|\d\s*[-+]\s*\d", unwrap_latex_text(boxed))
    ):
        return _score_math(completion, reference, answer_type=NUMBER)
    found, where = _final_number(completion, boxed)
    if found is None:
        return RuleScore(0.0, f"NUMBER: {where}; reference {reference}", NUMBER)
    same = math.isclose(float(found), float(expected), rel_tol=1e-6, abs_tol=1e-9)
    verdict = "matches" if same else "differs from"
    return RuleScore(float(same), f"NUMBER: {float(found):g} ({where}) {verdict} reference {reference}", NUMBER)


def _final_number(completion: str, boxed: str | None) -> tuple[Fraction | None, str]:
    if boxed is not None:
        values = set(_numbers_in(unwrap_latex_text(boxed)))
        if len(values) != 1 or _is_hedge(boxed):
            return None, f"boxed answer {boxed[:60]!r} is not one number"
        return values.pop(), "boxed"
    statement = _answer_statement(completion)
    if statement is not None:
        number = rf"\\[dt]?frac\{{[^{{}}]+\}}\{{[^{{}}]+\}}|(?:{_NUMBER_TOKEN})(?:/\d+)?"
        match = re.match(rf"[\s*$\\(]*({number})(?![\d^]){_HEDGE}", statement)
        if match:
            return _number_value(match.group(1)), "answer statement"
    values = _numbers_in(completion)
    return (values[-1], "last number") if values else (None, "no number in the completion")


# ---- MATH_EXPRESSIONS --------------------------------------------------------------------------------


def _math_verify_timeout() -> int | None:
    return MATH_VERIFY_TIMEOUT_S if threading.current_thread() is threading.main_thread() else None


def _too_costly(parsed: list) -> str | None:
    """Why verifying these parsed expressions could run unbounded, or None."""
    import sympy

    for expr in parsed:
        if not isinstance(expr, sympy.Basic):
            continue
        for power in expr.atoms(sympy.Pow):
            if power.exp.is_number and abs(float(sympy.N(power.exp, 5))) > MAX_EXPONENT:
                return f"exponent {power.exp} is too large to verify"
        for fact in expr.atoms(sympy.factorial):
            if fact.args[0].is_number and abs(float(sympy.N(fact.args[0], 5))) > MAX_FACTORIAL:
                return f"factorial of {fact.args[0]} is too large to verify"
    return None


def _score_math(completion: str, reference: str, answer_type: str = MATH_EXPRESSIONS) -> RuleScore:
    from math_verify import parse, verify

    timeout = _math_verify_timeout()
    gold = parse(f"${reference}$", parsing_timeout=timeout) or parse(reference, parsing_timeout=timeout)
    if not gold:
        return _score_text(completion, reference, note=f"{answer_type} reference is not parsable math; ")
    boxed = last_boxed(completion)
    target = parse(f"\\boxed{{{boxed}}}" if boxed is not None else completion, parsing_timeout=timeout)
    if not target:
        return RuleScore(0.0, f"{answer_type}: no math answer found in the completion", answer_type)
    refusal = _too_costly(target) or _too_costly(gold)
    if refusal:
        return RuleScore(0.0, f"{answer_type}: {refusal}", answer_type)
    same = verify(gold, target, timeout_seconds=timeout)
    verdict = "equivalent to" if same else "not equivalent to"
    return RuleScore(float(same), f"{answer_type}: {target[-1]} {verdict} reference {reference}", answer_type)


# ---- MULTIPLE_CHOICE ---------------------------------------------------------------------------------


_CHOICE_FORM = re.compile(r"[\s*\[(]*([A-Za-z])\**(?:\s*$|[.:)\]]\**(?:\s.*)?$)", flags=re.DOTALL)
_LINE_CHOICE = re.compile(r"^[\s*\[(]*([A-Z])\**[.:)\]]", flags=re.MULTILINE)


def _choice_letter(text: str) -> str | None:
    """`text` read as one choice letter: B, (B), B., B), **B**, [B], 'B. the option text'."""
    text = unwrap_latex_text(text)
    match = _CHOICE_FORM.fullmatch(text.strip())
    if not match:
        return None
    letter = match.group(1)
    if letter.islower() and len(re.sub(r"[\W_]", "", text)) > 1:
        return None  # "a: x" reads as prose; a lone "(b)" is a choice
    return letter.upper()


def _stated_choice(statement: str) -> str | None:
    """The choice at the start of an answer statement: "B", "(b) because", "option b", not "I think"."""
    match = re.match(
        rf"[\s*\[]*(option\s+|choice\s+|\()?([A-Za-z])\**[\])]?\**(?=$|[\s.,:;!]){_HEDGE}",
        statement,
        flags=re.IGNORECASE,
    )
    if not match:
        return None
    marked, letter = match.group(1), match.group(2)
    is_word = letter in "IAa" and re.match(r"\s+[a-z]", statement[match.end() :])
    if not marked and (letter.islower() or is_word):
        return None
    return letter.upper()


def _final_choice(completion: str) -> tuple[str | None, str]:
    boxed = last_boxed(completion)
    if boxed is not None:
        letter = _choice_letter(boxed)
        return letter, "boxed" if letter else f"boxed answer {boxed[:60]!r} is not one choice letter"
    statement = _answer_statement(completion)
    letter = _stated_choice(statement) if statement is not None else None
    if letter:
        return letter, "answer statement"
    mentioned = set(_LINE_CHOICE.findall(completion)) | set(re.findall(r"\(([A-Z])\)", completion))
    if len(mentioned) > 1:
        return None, f"several choices mentioned: {sorted(mentioned)}"
    letter = _choice_letter(completion)
    if letter:
        return letter, "leading choice"
    if mentioned:
        return mentioned.pop(), "only choice mentioned"
    return None, "no choice letter in the completion"


def _compared(answer_type: str, found, where: str, expected, shown_reference) -> RuleScore:
    """1.0 when the completion's final answer `found` equals `expected`, 0.0 when it differs or there is none."""
    if found is None:
        return RuleScore(0.0, f"{answer_type}: {where}; reference {shown_reference}", answer_type)
    verdict = "matches" if found == expected else "differs from"
    return RuleScore(
        float(found == expected), f"{answer_type}: {found} ({where}) {verdict} reference {expected}", answer_type
    )


def _score_choice(completion: str, reference: str) -> RuleScore:
    expected = _choice_letter(reference)
    if expected is None:
        raise ValueError(f"MULTIPLE_CHOICE reference {reference!r} is not a choice letter")
    return _compared(MULTIPLE_CHOICE, *_final_choice(completion), expected, shown_reference=expected)


# ---- BOOLEAN -----------------------------------------------------------------------------------------


def _polarity(text: str) -> bool | None:
    word = re.sub(r"[^a-z]", "", text.strip().lower())
    return True if word in _TRUE_WORDS else False if word in _FALSE_WORDS else None


def _final_polarity(completion: str) -> tuple[bool | None, str]:
    boxed = last_boxed(completion)
    if boxed is not None:
        value = _polarity(boxed)
        return value, "boxed" if value is not None else f"boxed answer {boxed[:60]!r} is not yes/no"
    statement = _answer_statement(completion)
    if statement is not None:
        match = re.match(rf"[\s*\"'(]*(yes|no|true|false)\b{_HEDGE}", statement, flags=re.IGNORECASE)
        if match:
            return _polarity(match.group(1)), "answer statement"
    first = re.match(r"[\s*\"'(]*(yes|no|true|false)\b", completion, flags=re.IGNORECASE)
    if first:
        return _polarity(first.group(1)), "first word"
    found = {_polarity(w) for w in re.findall(r"\b(yes|no|true|false)\b", completion, flags=re.IGNORECASE)}
    if len(found) == 1:
        return found.pop(), "only yes/no word"
    return None, "both polarities mentioned" if found else "no yes/no in the completion"


def _score_boolean(completion: str, reference: str) -> RuleScore:
    expected = _polarity(reference)
    if expected is None:
        raise ValueError(f"BOOLEAN reference {reference!r} is not yes/no/true/false")
    return _compared(BOOLEAN, *_final_polarity(completion), expected, shown_reference=reference)


# ---- TEXT --------------------------------------------------------------------------------------------


def unwrap_latex_text(text: str) -> str:
    """``\\text{x}`` / ``\\textbf{x}`` / ``\\mathrm{x}`` replaced by x."""
    return re.sub(r"\\(?:text|textbf|mathrm|mathbf)\{([^{}]*)\}", r"\1", text)


def normalize_text(text: str) -> str:
    """Lowercase, LaTeX \\text{} unwrapped, markdown emphasis, articles and outer punctuation dropped."""
    text = unwrap_latex_text(text).lower()
    text = re.sub(r"[*_`]", "", text)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    text = re.sub(r"\s+", " ", text)
    return text.strip(" .,:;!?\"'()[]$")


def _final_claim(completion: str) -> str | None:
    """What follows the last "is" / "are" of the completion's last sentence ("The capital of Spain is Madrid."
    claims "Madrid"), if that sentence has one."""
    lines = [line for line in completion.strip().splitlines() if line.strip()]
    if not lines:
        return None
    last_sentence = re.split(r"(?<=[.!?])\s+", lines[-1].strip())[-1]
    matches = list(re.finditer(r"\b(?:is|are)\s+(.+)", last_sentence, flags=re.IGNORECASE))
    return matches[-1].group(1) if matches else None


def _score_text(completion: str, reference: str, note: str = "TEXT: ") -> RuleScore:
    boxed = last_boxed(completion)
    statement = _answer_statement(completion)
    if boxed is not None:
        candidates = [(boxed, "boxed")]
    elif statement:
        candidates = [(statement, "answer statement")]
    else:  # a text answer may be the whole completion ("Paris") or its closing claim ("It is Paris.")
        claim = _final_claim(completion)
        candidates = [(completion, "whole completion")] + ([(claim, "final claim")] if claim else [])
    matching = [c for c in candidates if normalize_text(c[0]) == normalize_text(reference)]
    candidate, where = (matching or candidates)[-1]
    same = bool(matching)
    verdict = "matches" if same else "differs from"
    return RuleScore(float(same), f"{note}{where} {candidate[:60]!r} {verdict} reference {reference[:60]!r}", TEXT)


_SCORERS = {
    NUMBER: _score_number,
    MATH_EXPRESSIONS: _score_math,
    MULTIPLE_CHOICE: _score_choice,
    BOOLEAN: _score_boolean,
    TEXT: _score_text,
}
