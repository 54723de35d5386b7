"""The facts behind the offline dataset: categories of short questions a small instruct model knows.

A fact has one correct answer and wrong answers of the same kind (another capital, another number...),
so a good and a flawed answer differ only in substance: same sentence, same style, similar length.
Where the wrong answers are other facts' correct answers, every answer word is right in one place and
wrong in others, so no token gives the label away.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Phrasing:
    question: str  # e.g. "What is the capital of {country}?"
    answer: str  # e.g. "The capital of {country} is {x}."; {x} is the answer slot


@dataclass(frozen=True)
class Fact:
    key: str  # unique within its category; the unit of the train / val / eval split
    slots: dict
    answer: str
    wrong: tuple[str, ...]
    phrasings: tuple[Phrasing, ...]
    working: str | None = None  # how the answer is worked out ("17 + 5 = 22"); None: it is recalled

    def question(self, phrasing: Phrasing) -> str:
        return phrasing.question.format(**self.slots)

    def statement(self, phrasing: Phrasing, value: str) -> str:
        text = phrasing.answer.format(**self.slots, x=value)
        return text[0].upper() + text[1:]


@dataclass(frozen=True)
class Category:
    name: str
    facts: tuple[Fact, ...]


def _with_others_wrong(phrasings: tuple[Phrasing, ...], rows: list[tuple[str, dict, str]]) -> tuple[Fact, ...]:
    """Facts whose wrong answers are the other facts' correct answers."""
    answers = sorted({answer for _, _, answer in rows})
    return tuple(
        Fact(key, slots, answer, tuple(a for a in answers if a != answer), phrasings) for key, slots, answer in rows
    )


CAPITALS = {
    "France": "Paris",
    "Germany": "Berlin",
    "Italy": "Rome",
    "Spain": "Madrid",
    "Japan": "Tokyo",
    "China": "Beijing",
    "Russia": "Moscow",
    "Egypt": "Cairo",
    "the United Kingdom": "London",
    "Greece": "Athens",
    "Portugal": "Lisbon",
    "Ireland": "Dublin",
    "Austria": "Vienna",
    "Norway": "Oslo",
    "Sweden": "Stockholm",
    "Finland": "Helsinki",
    "Denmark": "Copenhagen",
    "Poland": "Warsaw",
    "Hungary": "Budapest",
    "the Czech Republic": "Prague",
    "the Netherlands": "Amsterdam",
    "Belgium": "Brussels",
    "Canada": "Ottawa",
    "Argentina": "Buenos Aires",
    "Peru": "Lima",
    "Chile": "Santiago",
    "Colombia": "Bogota",
    "Cuba": "Havana",
    "Kenya": "Nairobi",
    "South Korea": "Seoul",
    "Thailand": "Bangkok",
    "India": "New Delhi",
    "Indonesia": "Jakarta",
    "the Philippines": "Manila",
    "Vietnam": "Hanoi",
    "Iran": "Tehran",
    "Iraq": "Baghdad",
    "Turkey": "Ankara",
    "Saudi Arabia": "Riyadh",
    "Australia": "Canberra",
    "New Zealand": "Wellington",
    "Brazil": "Brasilia",
    "the United States": "Washington",
    "Romania": "Bucharest",
    "Bulgaria": "Sofia",
    "Serbia": "Belgrade",
    "Iceland": "Reykjavik",
    "Ethiopia": "Addis Ababa",
    "Pakistan": "Islamabad",
    "Afghanistan": "Kabul",
    "Nepal": "Kathmandu",
    "Syria": "Damascus",
    "Lebanon": "Beirut",
    "Venezuela": "Caracas",
    "Uruguay": "Montevideo",
    "Malaysia": "Kuala Lumpur",
    "Switzerland": "Bern",
    "Scotland": "Edinburgh",
    "Ukraine": "Kyiv",
    "Morocco": "Rabat",
}
_CAPITAL_PHRASINGS = (
    Phrasing("What is the capital of {country}?", "The capital of {country} is {x}."),
    Phrasing("Which city is the capital of {country}?", "{x} is the capital of {country}."),
    Phrasing("Name the capital city of {country}.", "The capital city of {country} is {x}."),
)

OPPOSITES = {
    "hot": "cold",
    "big": "small",
    "up": "down",
    "fast": "slow",
    "happy": "sad",
    "open": "closed",
    "light": "dark",
    "tall": "short",
    "rich": "poor",
    "hard": "soft",
    "wet": "dry",
    "full": "empty",
    "early": "late",
    "strong": "weak",
    "high": "low",
    "black": "white",
    "inside": "outside",
    "push": "pull",
    "win": "lose",
    "love": "hate",
    "buy": "sell",
    "true": "false",
    "clean": "dirty",
    "thick": "thin",
    "loud": "quiet",
    "cheap": "expensive",
    "first": "last",
    "north": "south",
    "east": "west",
    "good": "bad",
    "begin": "end",
    "enter": "exit",
    "friend": "enemy",
    "laugh": "cry",
    "remember": "forget",
    "safe": "dangerous",
    "sweet": "sour",
    "wide": "narrow",
    "deep": "shallow",
    "near": "far",
    "above": "below",
    "before": "after",
    "always": "never",
    "accept": "refuse",
    "increase": "decrease",
    "arrive": "leave",
    "asleep": "awake",
    "alive": "dead",
    "give": "take",
    "young": "old",
}
_OPPOSITE_PHRASINGS = (
    Phrasing("What is the opposite of {word}?", "The opposite of {word} is {x}."),
    Phrasing("Which word means the opposite of {word}?", "The word that means the opposite of {word} is {x}."),
)

UNITS = [  # (smaller unit, one larger unit, how many smaller units make it)
    ("seconds", "a minute", "60"),
    ("minutes", "an hour", "60"),
    ("hours", "a day", "24"),
    ("days", "a week", "7"),
    ("months", "a year", "12"),
    ("weeks", "a year", "52"),
    ("days", "a year", "365"),
    ("years", "a decade", "10"),
    ("years", "a century", "100"),
    ("centimeters", "a meter", "100"),
    ("millimeters", "a centimeter", "10"),
    ("meters", "a kilometer", "1000"),
    ("grams", "a kilogram", "1000"),
    ("milliliters", "a liter", "1000"),
    ("inches", "a foot", "12"),
    ("feet", "a yard", "3"),
    ("ounces", "a pound", "16"),
    ("cents", "a dollar", "100"),
    ("days", "a fortnight", "14"),
    ("years", "a millennium", "1000"),
    ("bits", "a byte", "8"),
    ("eggs", "a dozen", "12"),
    ("quarts", "a gallon", "4"),
    ("pints", "a quart", "2"),
    ("teaspoons", "a tablespoon", "3"),
    ("seconds", "an hour", "3600"),
    ("minutes", "a day", "1440"),
    ("millimeters", "a meter", "1000"),
]
_UNIT_PHRASINGS = (
    Phrasing("How many {small} are in {large}?", "There are {x} {small} in {large}."),
    Phrasing("How many {small} make {large}?", "{large} is {x} {small}."),
)

# (question, answer sentence, correct, wrong answers of the same kind), kept as data beside this module
GENERAL = [
    (row["question"], row["sentence"], row["answer"], tuple(row["wrong"]))
    for row in json.loads(Path(__file__).with_name("general_facts.json").read_text())
]


def _arithmetic_facts() -> tuple[Fact, ...]:
    """Sums and differences up to 20 and products up to 12 x 12; a + b and b + a are one fact."""
    operations = {
        "+": (
            Phrasing("What is {a} plus {b}?", "{a} plus {b} is {x}."),
            Phrasing("What is {a} + {b}?", "{a} + {b} is {x}."),
            Phrasing("How much is {a} plus {b}?", "{a} plus {b} equals {x}."),
        ),
        "-": (
            Phrasing("What is {a} minus {b}?", "{a} minus {b} is {x}."),
            Phrasing("What is {a} - {b}?", "{a} - {b} is {x}."),
            Phrasing("How much is {a} minus {b}?", "{a} minus {b} equals {x}."),
        ),
        "*": (
            Phrasing("What is {a} times {b}?", "{a} times {b} is {x}."),
            Phrasing("What is {a} multiplied by {b}?", "{a} multiplied by {b} is {x}."),
            Phrasing("How much is {a} times {b}?", "{a} times {b} equals {x}."),
        ),
    }
    operands = {
        "+": [(a, b) for a in range(1, 21) for b in range(a, 21)],
        "-": [(a, b) for a in range(2, 21) for b in range(1, a)],
        "*": [(a, b) for a in range(2, 13) for b in range(a, 13)],
    }
    results = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}
    facts = []
    for op, pairs in operands.items():
        for a, b in pairs:
            result = results[op](a, b)
            # slips a person makes: off by one or two, or a carry error of ten
            wrong = sorted({result + d for d in (-10, -2, -1, 1, 2, 10)} - {result}, key=lambda w: abs(w - result))
            wrong_values = tuple(str(w) for w in wrong if w >= 0)
            working = f"{a} {op} {b} = {result}"
            facts.append(Fact(f"{a}{op}{b}", {"a": a, "b": b}, str(result), wrong_values, operations[op], working))
    return tuple(facts)


CATEGORIES = (
    Category(
        "capitals",
        _with_others_wrong(
            _CAPITAL_PHRASINGS, [(country, {"country": country}, city) for country, city in CAPITALS.items()]
        ),
    ),
    Category(
        "opposites",
        _with_others_wrong(
            _OPPOSITE_PHRASINGS, [(word, {"word": word}, opposite) for word, opposite in OPPOSITES.items()]
        ),
    ),
    Category(
        "units",
        _with_others_wrong(
            _UNIT_PHRASINGS,
            [(f"{small}/{large}", {"small": small, "large": large}, count) for small, large, count in UNITS],
        ),
    ),
    Category(
        "general",
        tuple(
            Fact(question, {}, answer, wrong, (Phrasing(question, sentence),))
            for question, sentence, answer, wrong in GENERAL
        ),
    ),
    Category("arithmetic", _arithmetic_facts()),
)
