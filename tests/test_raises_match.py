"""Every `pytest.raises` of the tests names the message it expects (`match=`): an exception of the right type
raised for another reason (a guard removed, a TypeError from deeper down) must not pass for the one tested."""

from __future__ import annotations

import ast

from tests.conftest import REPO_ROOT


def raises_without_match(source: str) -> list[int]:
    """The lines of the `pytest.raises(...)` calls in `source` that give no `match=`."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "raises"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "pytest"
        and not any(keyword.arg == "match" for keyword in node.keywords)
    ]


def test_every_pytest_raises_names_its_message():
    missing = [
        f"{path.relative_to(REPO_ROOT)}:{line}"
        for path in sorted((REPO_ROOT / "tests").rglob("*.py"))
        for line in raises_without_match(path.read_text())
    ]
    assert missing == []


def test_a_raises_without_match_is_found():
    source = "with pytest.raises(ValueError):\n    f()\nwith pytest.raises(ValueError, match='x'):\n    f()\n"
    assert raises_without_match(source) == [1]
