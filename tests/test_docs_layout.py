"""The house stays readable: READMEs within their length, every relative link and #anchor of the docs resolving,
recipes only in cookbooks/, and no function longer than a screen and a half."""

from __future__ import annotations

import ast
import re
import subprocess

import pytest

from tests.conftest import REPO_ROOT

README_LIMITS = {"README.md": 250}  # lines; every other README named below: 300
USER_READMES = ("serving/README.md", "judge_rewards/README.md", "data_prep/README.md", "evaluation/README.md")
LONGEST_FUNCTION = 80  # lines
COOKBOOKS_SHARE = 0.10  # of the repository's lines
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
FENCED = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)


def tracked(*patterns: str) -> list[str]:
    listed = subprocess.run(["git", "ls-files", "--", *patterns], cwd=REPO_ROOT, capture_output=True, text=True)
    return [path for path in listed.stdout.split() if (REPO_ROOT / path).is_file()]


def readme_limits() -> dict[str, int]:
    recipes = [path for path in tracked("cookbooks/**/README.md")]
    return {**dict.fromkeys((*recipes, *USER_READMES), 300), **README_LIMITS}


def test_every_user_readme_fits_its_limit():
    over = {path: lines for path, limit in readme_limits().items() if (lines := len(read(path).splitlines())) > limit}
    assert over == {}, "READMEs over their limit (the story goes to experiments/<topic>/LOG.md)"


def test_cookbooks_hold_recipes_only():
    lines = {path: len(read(path, errors="replace").splitlines()) for path in tracked()}
    cookbooks = sum(count for path, count in lines.items() if path.startswith("cookbooks/"))
    assert cookbooks <= COOKBOOKS_SHARE * sum(lines.values())
    assert not [path for path in lines if path.startswith("cookbooks/") and "/results/" in path]


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, markup and punctuation dropped, spaces as hyphens."""
    text = re.sub(r"`|\*\*|\[|\]\([^)]*\)", "", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    found, seen = set(), {}
    for line in FENCED.sub("", text).splitlines():
        if match := HEADING.match(line):
            base = slug(match[1])
            found.add(base if base not in seen else f"{base}-{seen[base]}")
            seen[base] = seen.get(base, 0) + 1
    return found


def broken_links(page: str, text: str) -> list[str]:
    problems = []
    for target in LINK.findall(FENCED.sub("", text)):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, fragment = target.partition("#")
        resolved = (REPO_ROOT / page).parent / path
        if path and not resolved.exists():
            problems.append(f"{page}: {target}: no such file")
        elif (
            fragment
            and (not path or resolved.suffix == ".md")
            and fragment not in anchors(resolved.read_text() if path else text)
        ):
            problems.append(f"{page}: {target}: no heading #{fragment}")
    return problems


def read(path: str, errors: str = "strict") -> str:
    return (REPO_ROOT / path).read_text(errors=errors)


def test_every_relative_link_of_the_docs_resolves():
    pages = [path for path in tracked("*.md") if "/results/" not in path]
    assert len(pages) > 20
    problems = [problem for page in pages for problem in broken_links(page, read(page))]
    assert problems == [], "\n".join(problems)


def test_a_broken_link_or_anchor_is_found():
    text = "# Quick start\n\n[ok](#quick-start) [gone](#knobs) [file](no/such.md)\n```\n[not a link](x.md)\n```\n"
    assert broken_links("README.md", text) == [
        "README.md: #knobs: no heading #knobs",
        "README.md: no/such.md: no such file",
    ]


@pytest.mark.parametrize("heading", ["## `--flag` and **bold**: [a link](x.md)!", "### 2026-11-22: a run (CPU)"])
def test_anchors_follow_githubs_slugs(heading):
    expected = {"## `--flag` and **bold**: [a link](x.md)!": "--flag-and-bold-a-link"}
    assert slug(heading.lstrip("# ")) == expected.get(heading, "2026-11-22-a-run-cpu")


def test_no_function_is_longer_than_the_limit():
    long = []
    for path in tracked("*.py"):
        for node in ast.walk(ast.parse(read(path), filename=path)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > LONGEST_FUNCTION:
                    long.append(f"{path}:{node.lineno} {node.name}: {lines} lines")
    assert long == [], f"functions over {LONGEST_FUNCTION} lines:\n" + "\n".join(long)
