"""The fenced blocks of the READMEs and experiments logs, as the tests read them.

tests/test_readme_commands.py runs the shell and python blocks, or checks the marker above a block that is not run
here (`Not run by the tests: <reason>`). A marker that hands its block to another test names that test
(`tests/test_x.py::test_y`), and that test reads the block with `readme_block` (or `readme_command`,
`readme_arguments`): it runs the block's command, or asserts the values the block shows. tests/test_readme_commands.py
checks in the named test's source that it does.
"""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SHELL_TAGS = {"bash", "sh", "shell", "console"}
PYTHON_TAGS = {"python", "py"}
MARKER = re.compile(r"Not run by the tests: (?P<reason>\S.{9,})")
FENCE = re.compile(r"(?P<fence>`{3,}|~{3,})(?P<tag>[^`\s]*)\s*$")
# The paragraph between a python block and the fenced block that shows what it printed.
SHOWN = re.compile(r"(?:Real|Recorded) output\b.*:\s*$", re.S)


@dataclass(frozen=True)
class Block:
    readme: str  # relative to the repository
    line: int  # of the opening fence
    tag: str  # the fence's tag, lower case ("" for none)
    text: str  # the body, dedented to the fence's indentation
    not_runnable: str | None  # the marker's reason
    shown: str | None = None  # of a python block: the output shown after it (a "Real output" paragraph, a block)

    @property
    def first_line(self) -> str:
        return self.text.splitlines()[0].strip() if self.text.strip() else ""

    def starts_with(self, start: str) -> bool:
        """Whether the block's text starts with `start` (the start of its first line, or of its first lines)."""
        return self.text.strip().startswith(start)

    @property
    def key(self) -> tuple[str, str]:
        """(README, first line): what tests name a block by, whatever moves around it."""
        return self.readme, self.first_line

    @property
    def kind(self) -> str | None:
        """ "shell", "python" or None (a block of output, data, configuration, ...)."""
        if self.tag in SHELL_TAGS or (self.tag == "" and self.text.startswith("$ ")):
            return "shell"
        return "python" if self.tag in PYTHON_TAGS else None


def fenced_blocks(readme: str, text: str | None = None) -> list[Block]:
    """Every fenced block of `readme` (or of `text`, read as that README), in order."""
    lines = (REPO_ROOT / readme).read_text().splitlines() if text is None else text.splitlines()
    found: list[tuple[int, str, str, str | None]] = []  # (line, tag, body, marker)
    number, ends = 0, []
    while number < len(lines):
        opening = FENCE.fullmatch(lines[number].strip())
        if opening is None:
            number += 1
            continue
        end = next(
            (i for i in range(number + 1, len(lines)) if lines[i].strip().startswith(opening["fence"])), len(lines)
        )
        indent = len(lines[number]) - len(lines[number].lstrip())  # a block inside a list item is indented
        body = "\n".join(line[min(indent, len(line) - len(line.lstrip())) :] for line in lines[number + 1 : end])
        above = next((line.strip() for line in reversed(lines[:number]) if line.strip()), "")
        marker = MARKER.fullmatch(above)
        found.append((number + 1, opening["tag"].lower(), body, marker and marker["reason"]))
        ends.append(end)
        number = end + 1
    blocks = []
    for index, (line, tag, body, marker) in enumerate(found):
        shown = None
        if tag in PYTHON_TAGS and index + 1 < len(found):
            between = "\n".join(lines[ends[index] + 1 : found[index + 1][0] - 1]).strip()
            if SHOWN.fullmatch(between) and found[index + 1][1] == "":
                shown = found[index + 1][2]
        blocks.append(Block(readme, line, tag, body, marker, shown))
    return blocks


def readme_block(readme: str, first_line_start: str) -> Block:
    """The one fenced block of `readme` whose text starts with `first_line_start` (its first line's start, or
    more lines where blocks share a first line)."""
    matching = [block for block in fenced_blocks(readme) if block.starts_with(first_line_start)]
    assert len(matching) == 1, f"{readme}: {len(matching)} blocks start with {first_line_start!r}, not 1"
    return matching[0]


def commands(text: str) -> list[str]:
    """A shell block's commands: continuation lines joined, comments dropped; of a recorded session (`$ ` lines),
    only the commands."""
    return [command for command, _ in session(text)]


TRAILING_COMMENT = re.compile(r"\s+#\s.*$")


def session(text: str) -> list[tuple[str, list[str]]]:
    """A shell block as (command, the output lines shown after it) pairs: continuation lines joined, comments
    dropped. Of a block without `$ ` prompts, every line is a command with no output shown."""
    if not text.startswith("$ "):
        joined = re.sub(r"\\\n\s*", "", text)
        lines = (TRAILING_COMMENT.sub("", line).strip() for line in joined.splitlines())
        return [(line, []) for line in lines if line and not line.startswith("#")]
    steps: list[tuple[str, list[str]]] = []
    lines = text.splitlines()
    number = 0
    while number < len(lines):
        command = lines[number][2:]
        while command.endswith("\\") and number + 1 < len(lines):
            number += 1
            command = command[:-1].rstrip() + " " + lines[number].strip()
        number += 1
        output = []
        while number < len(lines) and not lines[number].startswith("$ "):
            output.append(lines[number])
            number += 1
        steps.append((TRAILING_COMMENT.sub("", command).strip(), output))
    return steps


def readme_command(
    readme: str, first_line_start: str, words: dict[str, str] | None = None, index: int = 0
) -> list[str]:
    """The `index`-th command of a README's shell block as an argument list: each word of `words` (a template's
    placeholder, `OUT`, `$SAVE_DIR`, ..., or a path the test replaces) replaced where it stands alone or starts a
    path, in the order given (the empty string drops it), and `python` as this interpreter."""
    command = commands(readme_block(readme, first_line_start).text)[index]
    for word, value in (words or {}).items():
        command = re.sub(rf"(?<![\w$./-]){re.escape(word)}(?=$|[\s/\"'])", value.replace("\\", "\\\\"), command)
    argv = shlex.split(command)
    return [sys.executable if word in ("python", "python3") else word for word in argv]


def readme_arguments(
    readme: str, first_line_start: str, words: dict[str, str] | None = None, index: int = 0
) -> list[str]:
    """The arguments after `python -m <module>` of a README command (see readme_command): what its `main` takes."""
    argv = readme_command(readme, first_line_start, words, index)
    return argv[argv.index("-m") + 2 :]
