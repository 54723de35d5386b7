"""The attributes a multi-aspect judge predicts and the weights of its combined score, as the `attributes`
section of configs/attributes.yaml gives them. Standard library only: the launcher checks them, the trainer
names its outputs after them and the export writes them into judge.json."""

from __future__ import annotations

from collections.abc import Sequence

from judge_core.protocol.judge_spec import (
    HELPSTEER2_ATTRIBUTE_WEIGHTS,
    check_attribute_weights,
    parse_attribute_weights,
)


def check_names(names: Sequence) -> tuple[str, ...]:
    """Attribute names: distinct non-empty strings, each a data column and a `name=weight` key."""
    if isinstance(names, str) or not names:
        raise ValueError(f"must be a non-empty list of attribute names, got {names!r}")
    for name in names:
        if not isinstance(name, str) or not name.strip() or any(mark in name for mark in ",="):
            raise ValueError(f"{name!r} is not an attribute name (a non-empty string without ',' or '=')")
    duplicates = sorted({name for name in names if list(names).count(name) > 1})
    if duplicates:
        raise ValueError(f"names {duplicates} more than once")
    return tuple(names)


def score_weights(names: Sequence[str], text: str | None) -> dict[str, float]:
    """The weights judge.json records: `text` (name=weight,...; names it leaves out weigh 0) when given, else
    the HelpSteer2 paper's for the attributes it weighs and 0 for any other; at least one must not be 0."""
    if text is None:
        weights = {name: HELPSTEER2_ATTRIBUTE_WEIGHTS.get(name, 0.0) for name in names}
    else:
        weights = {**dict.fromkeys(names, 0.0), **parse_attribute_weights(text, list(names))}
    check_attribute_weights(weights, list(names))
    return weights
