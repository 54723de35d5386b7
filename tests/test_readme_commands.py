"""Every command a README shows works as shown, or the README says why it cannot run here.

Blocks. A shell block is a fenced block tagged bash, sh, shell or console, or an untagged one whose first line is a
`$ ` prompt (a recorded session); a python block is one tagged python or py. Each of them, in every tracked
README.md and experiments log (experiments/<topic>/LOG.md), is either
- run here (RUN below), in a scratch copy of the repository's layout, on small stand-ins where it needs models or
  data:
  - a shell block in a fresh bash after the documented setup (this environment's bin first on PATH, nothing else
    of the caller's environment), recipe launchers with `--dry-run`, servers until `/health` answers;
  - a python block in a fresh `python` of this environment, the main .venv (no README names another for its
    python blocks), as the interactive interpreter runs it: the value of a last bare expression is printed.
    What a block takes as given (a trainer's `config`, ...) is set first by its RUN entry (`given`), and a
    block that calls a judge finds it in `JUDGE_MODEL_URL`, as the READMEs say;
- or marked in the README: the last line above it reads `Not run by the tests: <the reason>`.
A new block that is neither fails the suite, and so does a RUN entry whose block is gone.

Exit status. Every command of a block must exit 0, except in a recorded session that shows another exit status:
the line right after the command's output reads `[exit N]` (N its exit status). A command that exits otherwise
than its session shows fails the block.

Recorded output. A recorded session shows each `$ ` command followed by what it printed (stdout and stderr
interleaved, as a terminal shows them; a server started in the session shows its log up to when it answers
/health). The shown lines are matched in order: they must be a subsequence of the printed lines, each line whole
(trailing spaces and a log line's leading timestamp `2026-11-24 19:48:28,379 ` aside; a part of the output may be
left out, never reordered). Lines of JSON (a server's responses) are compared as JSON instead: their keys, or
their values, numbers within 1e-5 (float32 forwards differ in their last digits from run to run) and leaving out
the timings and ids that differ from run to run (the RUN entry's `varying`). A python block's shown output is
the fenced block after it, introduced by a paragraph that starts "Real output" or "Recorded output": what the
block printed, compared as a Python value (as JSON is) where it reads as one, else line by line as above.

Markers. A reason says why the block cannot run here in more than 10 characters of its own (test names aside).
A marker that hands its block to another test (it names a file of tests/, or says "handed to" or "another
test") names each such test as `tests/<file>.py::<test>`; that test must exist and read the block with
tests/support/readme_blocks.py's `readme_block`, `readme_command` or `readme_arguments` called with the README and
the start of the block as literals or module constants, in its own body or in a fixture, helper or constant of its
module that it uses (read from the test's source here): it runs the block's command, or asserts the values the
block shows. A RUN entry that names a test of this module is held to the same. A block run here needs no marker.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import math
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.support.readme_blocks import Block, commands, fenced_blocks, readme_block, session
from tests.support.servers import free_port, start_server

VENV_BIN = Path(sys.executable).parent
RUNNABLE_KINDS = ("shell", "python")


def tracked_readmes() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", "README.md", "**/README.md"]
        + ["experiments/*/LOG.md", "serving/API.md"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return sorted(path for path in listed if (REPO_ROOT / path).is_file())


def runnable_blocks(readme: str, text: str | None = None) -> list[Block]:
    """The shell and python blocks of `readme` (or of `text`, read as that README)."""
    return [block for block in fenced_blocks(readme, text) if block.kind in RUNNABLE_KINDS]


def all_runnable_blocks() -> list[Block]:
    return [block for readme in tracked_readmes() for block in runnable_blocks(readme)]


# ---- markers: a block handed to another test --------------------------------------------------------------

TEST_NAME = re.compile(r"\btests/[\w/.-]+\.py(?:::(?P<test>\w+))?")
HANDOFF = re.compile(r"\btests/|\bhanded\b|\banother test\b", re.IGNORECASE)
READERS = {"readme_block", "readme_command", "readme_arguments"}


def _string(node: ast.AST, constants: dict[str, ast.AST]) -> str | None:
    """The string a source expression stands for, where a literal, a module constant or a sum of them gives it."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name) and node.id in constants:
        return _string(constants[node.id], constants)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _string(node.left, constants), _string(node.right, constants)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.JoinedStr):
        parts = [_string(v.value if isinstance(v, ast.FormattedValue) else v, constants) for v in node.values]
        return None if None in parts else "".join(parts)
    return None


def blocks_read_by(test: str) -> set[tuple[str, str]] | None:
    """The (README, start of the first line) of each block that the test `tests/<file>.py::<name>` reads with
    readme_block / readme_command, in its body or in what it uses of its module (fixtures it takes, functions
    and constants it names, and what those use in turn); None if there is no such test."""
    path, _, name = test.partition("::")
    source = REPO_ROOT / path
    if not name.startswith("test") or not source.is_file():
        return None
    tree = ast.parse(source.read_text())
    definitions: dict[str, ast.AST] = {}
    constants: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            definitions[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in (t for t in targets if isinstance(t, ast.Name)):
                definitions[target.id] = node
                if node.value is not None:
                    constants[target.id] = node.value
    methods = [
        item
        for node in tree.body
        if isinstance(node, ast.ClassDef)
        for item in node.body
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == name
    ]
    test_node = definitions.get(name) if isinstance(definitions.get(name), ast.FunctionDef) else None
    if test_node is None and not methods:
        return None
    read, seen, pending = set(), set(), [test_node or methods[0]]
    while pending:
        node = pending.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        for inner in ast.walk(node):
            used = inner.id if isinstance(inner, ast.Name) else inner.arg if isinstance(inner, ast.arg) else None
            if used in definitions:
                pending.append(definitions[used])
            if isinstance(inner, ast.Call) and len(inner.args) >= 2:
                callee = inner.func.id if isinstance(inner.func, ast.Name) else getattr(inner.func, "attr", None)
                readme, start = (_string(argument, constants) for argument in inner.args[:2])
                if callee in READERS and readme is not None and start is not None:
                    read.add((readme, start))
    return read


def marker_problems(block: Block) -> list[str]:
    """What is wrong with a block's marker: a reason too short, a test named that does not exist or does not
    read the block, a hand-off to a test that is not named."""
    reason = block.not_runnable or ""
    where = f"{block.readme}:{block.line}"
    problems = []
    if len(re.sub(r"\W", "", TEST_NAME.sub("", reason))) <= 10:
        problems.append(f"{where}: the marker gives no reason of its own (more than 10 characters): {reason!r}")
    if not HANDOFF.search(reason):
        return problems
    named = list(TEST_NAME.finditer(reason))
    if not named or any(match["test"] is None for match in named):
        problems.append(
            f"{where}: the marker hands the block to a test without naming it as tests/<file>.py::<test>: {reason!r}"
        )
    for match in (match for match in named if match["test"]):
        read = blocks_read_by(match[0])
        if read is None:
            problems.append(f"{where}: the marker names {match[0]}, which is no test")
        elif not any(readme == block.readme and block.starts_with(start) for readme, start in read):
            problems.append(
                f"{where}: the marker names {match[0]}, which does not read this block "
                f"(readme_block({block.readme!r}, {block.first_line[:40]!r}...))"
            )
    return problems


# ---- how a block runs -------------------------------------------------------------------------------

# Commands that make what the workspace already holds: a model (the tiny model stands in for SmolLM2, which
# `tests/test_data_prep_smollm2.py` builds; the tiny one is the session's, built by the same code and seed)
# or the offline data (made once, by the README command that makes it, see `offline_data`).
STAND_IN = re.compile(
    r"python -m data_prep (?:base-model (?P<model>smollm2|tiny)|(?P<data>offline)) --out (?P<out>\S+)"
)
SERVER = re.compile(r"python -m serving(?:\.ray_serve)?\s")
LAUNCHER = re.compile(r"\bbash \S*run_\w+\.sh\b")
DOCUMENTED_PORT = "8888"
EXIT_LINE = re.compile(r"\[exit (?P<status>\d+)\]")
LOG_TIME = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ")
STATUS_FILE = ".readme-block-status"  # a session's commands' exit statuses, one a line, in the workspace


def shown_exits(text: str) -> list[int]:
    """The exit status a recorded session shows for each of its commands: N where the line right after the
    command's output reads `[exit N]`, else 0."""
    statuses = []
    for _, output in session(text):
        shown = [line.strip() for line in output if line.strip()]
        last = EXIT_LINE.fullmatch(shown[-1]) if shown else None
        statuses.append(int(last["status"]) if last else 0)
    return statuses


def runnable_script(text: str, port: int, stand_ins: dict[str, Path], status_file: Path | None = None) -> str:
    """The block as a bash script that can run here: the documented port replaced by `port`, stand-in
    commands replaced by links to what they would have made (those `stand_ins` has; the others run),
    launchers given `--dry-run`, each server started in the background and waited for (and stopped when
    the script ends). With `status_file` (a recorded session) the script goes on after a failed command:
    each command's exit status is appended to that file, and printed as `[exit N]` after its output where
    not 0; a server's log is printed once it answers."""
    script = ["set -uo pipefail" if status_file else "set -euo pipefail"]
    script.append("trap 'kill $(jobs -p) 2>/dev/null || true; wait' EXIT")
    for command in commands(text.replace(f":{DOCUMENTED_PORT}", f":{port}")):
        stand_in = STAND_IN.fullmatch(command)
        source = stand_in and stand_ins.get("data" if stand_in["data"] else "model")
        after = []
        if source:
            out = stand_in["out"]
            script.append(f'[ -e {out} ] || {{ mkdir -p "$(dirname {out})"; ln -s {source} {out}; }}')
        elif SERVER.match(command):
            command = command.replace(f"--port {DOCUMENTED_PORT}", f"--port {port}")
            if f"--port {port}" not in command:
                command += f" --port {port}"
            script.append(f"{command} --host 127.0.0.1 >> server.log 2>&1 &")
            script.append(
                f"for _ in $(seq 240); do curl -sf 127.0.0.1:{port}/health >/dev/null && break; "
                "kill -0 $! 2>/dev/null || { cat server.log; exit 1; }; sleep 0.5; done; "
                f"curl -sf 127.0.0.1:{port}/health >/dev/null"
            )
            after = ["cat server.log"]
        elif LAUNCHER.search(command) and "--dry-run" not in command:
            script.append(f"{command} --dry-run")
        else:
            script.append(command)
        if status_file:  # `echo`: what follows on a line of its own, as after a terminal's next prompt
            script += [
                "status=$?",
                "echo",
                *after,
                f'[ "$status" = 0 ] || echo "[exit $status]"; echo "$status" >> {status_file}',
            ]
    return "\n".join(script) + "\n"


def fresh_shell_env(home: Path) -> dict[str, str]:
    """A new login's environment after the documented setup (`source .venv/bin/activate`); Python's output
    unbuffered, as on a terminal (stdout and stderr then interleave as a terminal shows them)."""
    return {
        "HOME": str(home),
        "PATH": f"{VENV_BIN}:/usr/bin:/bin",
        "OMP_NUM_THREADS": "1",
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
    }


def workspace(root: Path) -> Path:
    """A scratch copy of the repository's tracked layout: cookbooks/ and experiments/ copied (blocks `cd` into
    them and write there), the rest linked; nothing of a checkout's own runs, data or models."""
    root.mkdir(parents=True, exist_ok=True)
    listed = subprocess.run(["git", "ls-files"], cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout
    tracked = [path for path in listed.splitlines() if (REPO_ROOT / path).exists()]
    copied = ("cookbooks", "experiments")
    for path in (path for path in tracked if path.split("/", 1)[0] in copied):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / path, root / path)
    for name in sorted({path.split("/", 1)[0] for path in tracked} - {*copied, ".ci", ".gitignore"}):
        (root / name).symlink_to(REPO_ROOT / name)
    return root


def run_block(
    block: Block, root: Path, stand_ins: dict[str, Path], port: int | None = None, cwd: str = "."
) -> subprocess.CompletedProcess:
    """Run a shell block; every command must exit 0, or, in a recorded session, with the status it shows. A
    recorded session's stdout holds its stderr too, interleaved as printed."""
    recorded = block.text.startswith("$ ")
    status_file = root / STATUS_FILE if recorded else None
    script = runnable_script(block.text, port or free_port(), stand_ins, status_file)
    result = subprocess.run(
        ["bash", "-c", script],
        cwd=root / cwd,
        env=fresh_shell_env(root),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if recorded else subprocess.PIPE,
        text=True,
        timeout=300,
    )
    printed = f"{result.stdout[-3000:]}\n{(result.stderr or '')[-3000:]}"
    if recorded:
        statuses = [int(status) for status in status_file.read_text().split()] if status_file.exists() else []
        assert statuses == shown_exits(block.text), (
            f"{block.readme}:{block.line}: the commands exited {statuses}, the session shows {shown_exits(block.text)}"
            f" (a non-zero status is shown as `[exit N]` right after the command's output):\n{script}\n{printed}"
        )
    else:
        assert result.returncode == 0, (
            f"{block.readme}:{block.line} failed (exit {result.returncode}):\n{script}\n{printed}"
        )
    return result


# A python block runs as the interactive interpreter runs it: what its RUN entry gives first (argv[1]), then the
# block (argv[2]); the value of a last bare expression is printed (its repr), unless None.
PYTHON_DRIVER = """
import ast, sys
namespace = {"__name__": "__main__"}
exec(compile(sys.argv[1], "<given by the test>", "exec"), namespace)
tree = ast.parse(sys.argv[2], "<README block>")
last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
exec(compile(tree, "<README block>", "exec"), namespace)
if last is not None:
    value = eval(compile(ast.Expression(last.value), "<README block>", "eval"), namespace)
    if value is not None:
        print(repr(value))
"""


def run_python_block(block: Block, root: Path, given: str, cwd: str, judge_url: str | None):
    env = fresh_shell_env(root) | ({"JUDGE_MODEL_URL": judge_url} if judge_url else {})
    result = subprocess.run(
        [sys.executable, "-c", PYTHON_DRIVER, given, block.text],
        cwd=root / cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    printed = f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert result.returncode == 0, f"{block.readme}:{block.line} failed (exit {result.returncode}):\n{printed}"
    return result


def runnable_blocks_named(key: tuple[str, str], blocks: list[Block]) -> list[Block]:
    readme, first_line_start = key
    return [b for b in blocks if not b.not_runnable and b.readme == readme and b.starts_with(first_line_start)]


def run_entry(key: tuple[str, str]) -> Block:
    [found] = runnable_blocks_named(key, runnable_blocks(key[0]))
    return found


def missing_in_order(shown: list[str], printed: list[str]) -> list[str]:
    """The shown lines from the first that `printed` does not hold after the ones before it (none: all are
    there, in order). Lines compare whole, without trailing spaces or a log line's leading timestamp."""
    printed = [LOG_TIME.sub("", line.rstrip()) for line in printed]
    position = 0
    for index, line in enumerate(LOG_TIME.sub("", line.rstrip()) for line in shown):
        try:
            position = printed.index(line, position) + 1
        except ValueError:
            return shown[index:]
    return []


def same_values(answered, recorded) -> bool:
    """Equal values, numbers within 1e-5."""
    if isinstance(recorded, dict):
        return (
            isinstance(answered, dict)
            and answered.keys() == recorded.keys()
            and all(same_values(answered[key], recorded[key]) for key in recorded)
        )
    if isinstance(recorded, (list, tuple)):
        return (
            type(answered) is type(recorded)
            and len(answered) == len(recorded)
            and all(same_values(a, r) for a, r in zip(answered, recorded, strict=True))
        )
    numbers = (int, float)
    if isinstance(recorded, numbers) and not isinstance(recorded, bool):
        return (
            isinstance(answered, numbers)
            and not isinstance(answered, bool)
            and math.isclose(answered, recorded, rel_tol=1e-5, abs_tol=1e-5)
        )
    return type(answered) is type(recorded) and answered == recorded


@dataclass(frozen=True)
class Run:
    """How a block runs here beyond the workspace and its stand-in models and data."""

    links: tuple[tuple[str, str], ...] = ()  # (workspace path, stand-in: a key of STAND_IN_FIXTURES)
    judge: str | None = None  # a judge of that kind (a `<kind>_judge` fixture) answers at the documented port
    responses: str | None = None  # keys or values: the JSON it prints matches the recorded one's keys or values
    cwd: str = "."  # where the block's own text says it runs
    varying: tuple[str, ...] = ("latency",)  # keys left out of compared values: timings and ids of the run
    given: str = ""  # a python block: what it takes as given (the README says what), run before it


GRPO = "cookbooks/training_judge_model/grpo"
SMOLLM2_FIRST = "python -m data_prep base-model smollm2 --out ./models/smollm2"
JUDGE_REQUEST = "$ curl -s localhost:8888/judge -H 'Content-Type: application/json' -d '{\"prompt\": "
SCALAR_JUDGE_REQUEST = JUDGE_REQUEST + '"What is 2+2?", "completion": "The answer is **boxed{4}**", "answer"'
REWARD_SYSTEM = "from judge_rewards import JudgeRewardSystem as RewardSystem"
# A trainer's config without reward settings: the adapter reads the judge's address from JUDGE_MODEL_URL.
NO_REWARD_CONFIG = "config = {}\n"


def recorded_judge_curves(readme: str, results: str, runs: tuple[str, ...]) -> dict[tuple[str, str], Run]:
    """The recorded `python -m evaluation.judge_curves` blocks of a README, each named by the first run it plots."""
    return {(readme, f"$ python -m evaluation.judge_curves {results}/{run}"): Run() for run in runs}


# The blocks run here, by (README, start of the first line): a Run, or the test of this module that runs it.
# A block that starts with a `$ ` prompt is a recorded session: its shown output is checked (see above).
RUN: dict[tuple[str, str], Run | str] = {
    ("README.md", "source .venv/bin/activate"): "test_entering_the_environment",
    ("README.md", "python -m serving --model ./runs/demo/bt/hf"): Run(links=(("runs/demo/bt/hf", "scalar"),)),
    ("README.md", REWARD_SYSTEM): Run(
        judge="rule",
        given=NO_REWARD_CONFIG + 'prompt, completion, answer = "What is 2+2?", "The answer is **boxed{4}**", "4"\n',
    ),
    ("cookbooks/rl_with_judge_reward/README.md", "python -m serving --model runs/demo/bt/hf"): Run(
        links=(("runs/demo/bt/hf", "scalar"),)
    ),
    ("cookbooks/rl_with_judge_reward/README.md", "python -m data_prep offline --out ./data"): (
        "test_the_offline_data_command_writes_the_policy_data"
    ),
    ("cookbooks/rl_with_judge_reward/README.md", SMOLLM2_FIRST): Run(links=(("data", "offline"),), judge="rule"),
    ("cookbooks/rl_with_judge_reward/README.md", "import pandas as pd"): Run(),
    (  # the committed runs' own validation dumps: the recorded figures must come out of them
        "experiments/policy-rl/LOG.md",
        "$ python -m evaluation.reward_plots experiments/policy-rl/results/learn-seed1/validation "
        "experiments/policy-rl/results/learn-seed2/validation --out experiments/policy-rl/plots",
    ): Run(),
    (  # the runs with the hard-negative judge
        "experiments/policy-rl/LOG.md",
        "$ python -m evaluation.reward_plots experiments/policy-rl/results/hard-negatives-seed1/validation "
        "experiments/policy-rl/results/hard-negatives-seed2",
    ): Run(),
    (  # a rerun of seed 1 beside the first run
        "experiments/policy-rl/LOG.md",
        "$ python -m evaluation.reward_plots experiments/policy-rl/results/hard-negatives-seed1/validation "
        "experiments/policy-rl/results/hard-negatives-seed1-rerun/validation",
    ): Run(),
    (  # and the demo judge's training rollouts, for the judge's pair accuracy
        "experiments/policy-rl/LOG.md",
        "$ python -m evaluation.reward_plots experiments/policy-rl/results/learn-seed1/rollouts",
    ): Run(),
    (  # the judge mixed with the arithmetic rule: per subset of the offline policy questions, and per component
        "experiments/policy-rl/LOG.md",
        "$ python -m evaluation.reward_plots experiments/policy-rl/results/judge-and-rule-seed1/validation",
    ): Run(links=(("data", "offline"),)),
    (  # the judge-only runs beside them, per subset
        "experiments/policy-rl/LOG.md",
        "$ python -m evaluation.reward_plots experiments/policy-rl/results/hard-negatives-seed2/validation",
    ): Run(links=(("data", "offline"),)),
    (  # and the mixed runs' training rollouts, each component per step
        "experiments/policy-rl/LOG.md",
        "$ python -m evaluation.reward_plots experiments/policy-rl/results/judge-and-rule-seed1/rollouts",
    ): Run(),
    ("cookbooks/training_judge_model/bradley-terry/README.md", SMOLLM2_FIRST): Run(),
    ("cookbooks/training_judge_model/bradley-terry/README.md", "import json"): Run(),
    ("cookbooks/training_judge_model/bradley-terry/README.md", "from transformers import AutoModelFor"): Run(
        links=(("checkpoints/bt-cpu-smollm2/hf", "scalar"),)
    ),
    (  # the measured laptop run and its evaluation
        "experiments/scalar-judges/LOG.md",
        "bash cookbooks/training_judge_model/bradley-terry",
    ): Run(links=(("data", "small_eval"), ("checkpoints/bt-cpu-smollm2/hf", "scalar"), ("models/smollm2", "tiny"))),
    (f"{GRPO}/README.md", "cd cookbooks/training_judge_model/grpo"): Run(),
    (f"{GRPO}/README.md", "$ TRAIN_BATCH_SIZE=50 bash pointwise/run_pointwise.sh"): Run(
        links=((f"{GRPO}/data", "offline"),), cwd=GRPO
    ),
    (f"{GRPO}/README.md", "python -m serving --model checkpoints/grpo"): Run(
        links=(("checkpoints/grpo/pointwise/hf", "generative"),)
    ),
    (f"{GRPO}/README.md", "import pandas as pd"): Run(),
    ("cookbooks/training_judge_model/multi-aspect/README.md", SMOLLM2_FIRST): Run(),
    ("cookbooks/training_judge_model/multi-aspect/README.md", "import json"): Run(),
    ("cookbooks/training_judge_model/sft/README.md", SMOLLM2_FIRST): Run(),
    ("cookbooks/training_judge_model/sft/README.md", "import pandas as pd"): Run(),
    (  # the judge warm starts' data and configs
        "cookbooks/training_judge_model/sft/README.md",
        "python -m data_prep offline --out ./data-pointwise-arithmetic",
    ): Run(links=(("models/smollm2", "tiny"),)),
    # the committed evaluations, metrics and validation dumps must make the recorded curves
    **recorded_judge_curves(
        "experiments/sft-judges/LOG.md",
        "experiments/sft-judges/results/pairwise-warm-start",
        ("better-first", "a-then-b", "answer-first-seed1", "answer-first-epoch2", "ties-seed1"),
    ),
    **recorded_judge_curves(
        "experiments/grpo-judges/LOG.md",
        "experiments/grpo-judges/results",
        (
            "pairwise-lr1e-5-seed1",
            "pairwise-lr2e-6-seed1",
            "pairwise-paired-seed1",
            "pairwise-answer-first-seed1",
            "pointwise-reference-seed1",
            "pointwise-answer-first-seed1",
            "pointwise-short-confident-seed1",
            "pointwise-hard-seed1/val249",
            "pointwise-hard-seed1/val ",  # the space: not the val249 block
            "pointwise-arithmetic-working-seed1/val249",
            "pairwise-arithmetic-working-seed1/val249",
            "pairwise-arithmetic-drawn640-seed1/val249",
            "pairwise-step-seeded-rollouts-seed1/val249",
            "pairwise-ties-seed1/val249",
            "pairwise-ties640-seed1/val249",
            "pointwise-seeded-seed1/val249",
            "pointwise-recall-seed1/val249",
            "pointwise-seeded-seed1/test",
            "pairwise-ties640-seed1/test",
            "pairwise-no-reference-seed1/val249",
            "pairwise-wrong-ties-seed1/val249",
        ),
    ),
    ("data_prep/README.md", "$ python -m data_prep offline --out data/offline --seed 0"): Run(),
    ("data_prep/README.md", "python -m data_prep offline --out ./data"): Run(),
    (  # a malformed row, on the stand-in files of tests/test_data_prep_helpsteer2.py
        "data_prep/README.md",
        "$ python -m data_prep helpsteer2 --train bad_train.jsonl.gz",
    ): Run(links=(("HelpSteer2", "helpsteer2"), ("bad_train.jsonl.gz", "helpsteer2_bad_train"))),
    ("experiments/data-prep/LOG.md", "$ python -m data_prep helpsteer2 --train HelpSteer2/"): Run(
        links=(("HelpSteer2", "helpsteer2"),)
    ),
    ("experiments/data-prep/LOG.md", "$ python -m data_prep rewardbench2 --input reward-bench-2/"): Run(
        links=(("reward-bench-2/data/test-00000-of-00001.parquet", "rewardbench2"),)
    ),
    ("evaluation/README.md", "$ python -m data_prep offline --out ./data"): Run(),
    ("experiments/evaluation/LOG.md", "$ python -m data_prep offline --out offline"): Run(),
    ("judge_rewards/README.md", "export JUDGE_MODEL_URL="): Run(),
    ("judge_rewards/README.md", REWARD_SYSTEM): Run(judge="rule", given=NO_REWARD_CONFIG, varying=("request_id",)),
    ("serving/API.md", SCALAR_JUDGE_REQUEST): Run(judge="scalar", responses="keys"),
    ("serving/API.md", "$ curl -s localhost:8888/batch_judge"): Run(judge="rule", responses="values"),
    ("serving/API.md", "$ curl -s localhost:8888/compare"): Run(judge="scalar", responses="keys"),
    ("serving/API.md", "$ curl -s localhost:8888/judge_group"): Run(judge="scalar", responses="keys"),
    ("serving/API.md", "$ curl -s localhost:8888/health"): Run(judge="scalar", responses="keys"),
    ("serving/README.md", "python -m serving.ray_serve --model checkpoints/bt_judge --replicas 2"): Run(
        links=(("checkpoints/bt_judge", "scalar"),)
    ),
    # the recorded responses of the tests' scripted judges and of an untrained multi-attribute judge
    (
        "experiments/serving/LOG.md",
        JUDGE_REQUEST + '"What is the capital of France?", "completion": "Paris. <split>"',
    ): (Run(judge="scripted", responses="values")),
    ("experiments/serving/LOG.md", JUDGE_REQUEST + '"What is 2+2?", "completion": "It is 4. <good>"'): Run(
        judge="scripted_pairwise", responses="values"
    ),
    ("experiments/serving/LOG.md", JUDGE_REQUEST + '"What is 2+2?", "completion": "The answer is **boxed{4}**"'): Run(
        judge="attributes", responses="values"
    ),
    (  # a reward model trained elsewhere, on a tiny stand-in of its layout
        "experiments/serving/LOG.md",
        '$ PYTHONPATH=. python -c "from tests.support import reward_models',
    ): Run(responses="values", varying=("latency", "uptime_s", "replica")),
}


def test_every_block_is_run_here_or_marked_not_runnable():
    blocks = all_runnable_blocks()
    assert len({block.readme for block in blocks}) >= 8, "the READMEs' shell blocks are not found"
    assert len([block for block in blocks if block.kind == "python"]) >= 8, "the READMEs' python blocks are not found"
    problems = [
        f"{block.readme}:{block.line}: neither run by {Path(__file__).name} (RUN) nor marked "
        f"`Not run by the tests: <reason>` on the line above: {block.key[1]!r}"
        for block in blocks
        if not block.not_runnable and not any(runnable_blocks_named(key, [block]) for key in RUN)
    ]
    problems += [
        f"RUN names {key}, which matches {len(matching)} unmarked blocks, not 1"
        for key in RUN
        if len(matching := runnable_blocks_named(key, blocks)) != 1
    ]
    problems += [
        f"RUN names {key} as run by {run}, which does not read it (readme_block)"
        for key, run in RUN.items()
        if isinstance(run, str) and key not in (blocks_read_by(f"tests/{Path(__file__).name}::{run}") or set())
    ]
    problems += [
        f"{block.readme}:{block.line}: a python block's shown output is checked only where RUN runs it"
        for block in blocks
        if block.kind == "python" and block.shown is not None and block.not_runnable
    ]
    assert not problems, "\n".join(problems)


def test_every_marker_gives_a_reason_and_names_the_test_it_hands_its_block_to():
    problems = [problem for block in all_runnable_blocks() if block.not_runnable for problem in marker_problems(block)]
    assert not problems, "\n".join(problems)


def test_a_new_block_is_found_and_a_marker_needs_a_reason():
    text = """Intro:

```bash
python -m serving --judge rule
```

Not run by the tests: needs 8 GPUs per node.

```console
$ nvidia-smi
```

Not run by the tests:

```
$ make demo
output
```

```python
print("a python block")
```

Real output:

```
a python block
```

- in a list:

  ```python
  x = 1
  ```

```yaml
not: run
```
"""
    found = [
        (block.line, block.kind, block.key[1], block.not_runnable, block.shown)
        for block in runnable_blocks("README.md", text)
    ]
    assert found == [
        (3, "shell", "python -m serving --judge rule", None, None),
        (9, "shell", "$ nvidia-smi", "needs 8 GPUs per node.", None),
        (15, "shell", "$ make demo", None, None),
        (20, "python", 'print("a python block")', None, "a python block"),
        (32, "python", "x = 1", None, None),
    ]


def marked(reason: str, first_line: str = "source .venv/bin/activate") -> Block:
    return Block("README.md", 1, "bash", first_line, reason)


def test_a_marker_that_hands_its_block_to_a_test_names_a_test_that_reads_it():
    this = f"tests/{Path(__file__).name}"
    assert marker_problems(marked("needs 8 GPUs per node.")) == []
    assert (
        marker_problems(marked(f"it changes the caller's shell; {this}::test_entering_the_environment runs it")) == []
    )
    assert marker_problems(marked("handed to another test")) == [
        "README.md:1: the marker hands the block to a test without naming it as tests/<file>.py::<test>: "
        "'handed to another test'"
    ]
    assert marker_problems(marked(f"handed to {this}::test_entering_the_environment")) == [
        f"README.md:1: the marker gives no reason of its own (more than 10 characters): "
        f"'handed to {this}::test_entering_the_environment'"
    ]
    assert marker_problems(marked(f"a long run here; {this} runs it")) == [
        f"README.md:1: the marker hands the block to a test without naming it as tests/<file>.py::<test>: "
        f"'a long run here; {this} runs it'"
    ]
    assert marker_problems(marked(f"a long run here; {this}::test_no_such_test runs it")) == [
        f"README.md:1: the marker names {this}::test_no_such_test, which is no test"
    ]
    assert marker_problems(marked(f"a long run here; {this}::test_entering_the_environment", "make demo")) == [
        f"README.md:1: the marker names {this}::test_entering_the_environment, which does not read this block "
        "(readme_block('README.md', 'make demo'...))"
    ]


def test_a_session_shows_a_failed_commands_exit_status_after_its_output():
    text = "$ true\n$ false \\\n    --flag\nan error\n[exit 1]\n$ echo '[exit 2]'\n[exit 2]\nmore\n"
    assert session(text) == [
        ("true", []),
        ("false --flag", ["an error", "[exit 1]"]),
        ("echo '[exit 2]'", ["[exit 2]", "more"]),
    ]
    assert shown_exits(text) == [0, 1, 0]


def test_shown_lines_are_matched_whole_and_in_order():
    printed = ["2026-12-07 15:24:37,102 WARNING a: b", "table", "| row | 1 |", "done  "]
    assert missing_in_order(["2026-11-24 19:48:28,379 WARNING a: b", "| row | 1 |", "done"], printed) == []
    assert missing_in_order(["done", "table"], printed) == ["table"]  # out of order
    assert missing_in_order(["| row |"], printed) == ["| row |"]  # a part of a line
    assert same_values({"a": [1.0, "x", None]}, {"a": [1.000001, "x", None]})
    assert not same_values({"a": [1.0]}, {"a": [1.1]}) and not same_values({"a": 1}, {"a": 1, "b": 2})


def test_every_python_m_module_that_a_readme_names_imports():
    named = {
        (readme, module)
        for readme in tracked_readmes()
        for module in re.findall(r"\bpython3? -m ([A-Za-z_][\w.]*\w)", (REPO_ROOT / readme).read_text())
    }
    assert {"serving", "data_prep", "evaluation", "training.export"} <= {module for _, module in named}
    missing = sorted(
        f"{path}: python -m {module}" for path, module in named if importlib.util.find_spec(module) is None
    )
    assert not missing, "\n".join(missing)


def test_entering_the_environment(tmp_path):
    """README.md's `source .venv/bin/activate`, in a new shell at the repository root, gives this environment."""
    venv = REPO_ROOT / ".venv"
    if Path(sys.prefix) != venv:
        pytest.skip(f"the tests run from {sys.prefix}, not the repository's {venv}")
    entered = subprocess.run(
        ["env", "-i", f"HOME={tmp_path}", "PATH=/usr/bin:/bin", "bash", "-c"]
        + [readme_block("README.md", "source .venv/bin/activate").text + "\npython -c 'import sys; print(sys.prefix)'"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert entered.returncode == 0, entered.stderr
    assert entered.stdout.strip() == str(venv)


@pytest.fixture(scope="module")
def offline_data(tmp_path_factory) -> Path:
    """The offline data, made by the rl_with_judge_reward README's own command."""
    block = readme_block("cookbooks/rl_with_judge_reward/README.md", "python -m data_prep offline --out ./data")
    root = workspace(tmp_path_factory.mktemp("offline_data") / "ws")
    run_block(block, root, stand_ins={})
    return root / "data"


def test_the_offline_data_command_writes_the_policy_data(offline_data):
    """The command's comment: `writes data/policy/{train,val,test}.parquet (377 / 45 / 100 questions)`."""
    import pyarrow.parquet as pq

    written = {path.name: pq.read_metadata(path).num_rows for path in (offline_data / "policy").iterdir()}
    assert written == {"train.parquet": 377, "val.parquet": 45, "test.parquet": 100}


@pytest.fixture(scope="module")
def generative_judge_dir(tiny_model_dir, tmp_path_factory) -> Path:
    """The tiny model as an (untrained) generative pointwise judge."""
    from judge_core.protocol.judge_spec import JudgeSpec

    out = tmp_path_factory.mktemp("generative_judge") / "judge"
    shutil.copytree(tiny_model_dir, out)
    JudgeSpec(kind="generative", prompt_format="pointwise").save(out)
    return out


@pytest.fixture(scope="module")
def rule_judge(tmp_path_factory):
    with start_server(["--judge", "rule"], tmp_path_factory.mktemp("rule_judge") / "server.log") as server:
        yield server


@pytest.fixture(scope="module")
def scalar_judge(tiny_scalar_judge_dir, tmp_path_factory):
    log = tmp_path_factory.mktemp("scalar_judge") / "server.log"
    with start_server(["--model", str(tiny_scalar_judge_dir)], log) as server:
        yield server


# The judges of experiments/serving/LOG.md's recorded responses, in folders of the names it shows (model_id).
@pytest.fixture(scope="module")
def scripted_judge(tiny_model_dir, tmp_path_factory):
    """The scripted pointwise judge of tests/test_serving_generative.py."""
    from tests.test_serving_generative import POINTWISE_SCRIPT, build_script_judge

    folder = tmp_path_factory.mktemp("scripted_judge")
    judge = build_script_judge(tiny_model_dir, folder / "scripted", POINTWISE_SCRIPT, "Response to rate")
    with start_server(["--model", str(judge)], folder / "server.log") as server:
        yield server


@pytest.fixture(scope="module")
def scripted_pairwise_judge(tiny_model_dir, tmp_path_factory):
    """The scripted pairwise judge of tests/test_serving_pairwise.py."""
    from tests.test_serving_generative import build_script_judge
    from tests.test_serving_pairwise import PAIRWISE_SCRIPT

    folder = tmp_path_factory.mktemp("scripted_pairwise_judge")
    judge = build_script_judge(
        tiny_model_dir, folder / "scripted_pairwise", PAIRWISE_SCRIPT, "Response A", prompt_format="pairwise"
    )
    with start_server(["--model", str(judge)], folder / "server.log") as server:
        yield server


@pytest.fixture(scope="module")
def attributes_judge(tiny_model_dir, tmp_path_factory):
    """An untrained multi-attribute judge of HelpSteer2's attributes with the weights the multi-aspect recipe's
    export writes by default (training.attributes.score_weights)."""
    from judge_core.protocol.judge_spec import HELPSTEER2_ATTRIBUTES
    from tests.support.models import build_attribute_judge
    from training.attributes import score_weights

    folder = tmp_path_factory.mktemp("attributes_judge")
    weights = score_weights(HELPSTEER2_ATTRIBUTES, None)
    judge = build_attribute_judge(tiny_model_dir, folder / "tiny_attributes", weights)
    with start_server(["--model", str(judge)], folder / "server.log") as server:
        yield server


def json_lines(text: str) -> list:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def without(value, names: set[str] | tuple[str, ...]):
    """`value` with the dict keys of `names` dropped, at any depth."""
    if isinstance(value, dict):
        return {key: without(item, names) for key, item in value.items() if key not in names}
    if isinstance(value, list):
        return [without(item, names) for item in value]
    return value


def key_shape(value):
    """The dict keys of `value`, at any depth (values left out)."""
    if isinstance(value, dict):
        return {key: key_shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [key_shape(item) for item in value]
    return None


@pytest.fixture(scope="module")
def small_eval(offline_data, tmp_path_factory) -> Path:
    """The offline data with an eval file of its first 8 rows: a judge scores it in seconds."""
    import pyarrow.parquet as pq

    data = tmp_path_factory.mktemp("small_eval") / "data"
    shutil.copytree(offline_data, data)
    eval_file = data / "eval" / "test.parquet"
    pq.write_table(pq.read_table(eval_file).slice(0, 8), eval_file)
    return data


@pytest.fixture(scope="module")
def helpsteer2(tmp_path_factory) -> Path:
    """HelpSteer2's three files as tests/test_data_prep_helpsteer2.py's stand-ins, under their upstream names."""
    from tests.test_data_prep_helpsteer2 import PREFERENCES, TRAIN, VALIDATION, write_jsonl_gz

    folder = tmp_path_factory.mktemp("helpsteer2") / "HelpSteer2"
    (folder / "preference").mkdir(parents=True)
    write_jsonl_gz(folder / "train.jsonl.gz", TRAIN)
    write_jsonl_gz(folder / "validation.jsonl.gz", VALIDATION)
    write_jsonl_gz(folder / "preference" / "preference.jsonl.gz", PREFERENCES)
    return folder


@pytest.fixture(scope="module")
def helpsteer2_bad_train(tmp_path_factory) -> Path:
    """The stand-in train file with a rating of 'x' for helpfulness on its line 3."""
    from tests.test_data_prep_helpsteer2 import TRAIN, write_jsonl_gz

    bad = dict(TRAIN[2], helpfulness="x")
    return write_jsonl_gz(tmp_path_factory.mktemp("helpsteer2_bad") / "bad_train.jsonl.gz", [*TRAIN[:2], bad])


@pytest.fixture(scope="module")
def rewardbench2(tmp_path_factory) -> Path:
    """RewardBench 2's file as tests/test_data_prep_rewardbench2.py's stand-in."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.test_data_prep_rewardbench2 import UPSTREAM, UPSTREAM_SCHEMA

    path = tmp_path_factory.mktemp("rewardbench2") / "test-00000-of-00001.parquet"
    pq.write_table(pa.Table.from_pylist(UPSTREAM, schema=UPSTREAM_SCHEMA), path)
    return path


STAND_IN_FIXTURES = {
    "scalar": "tiny_scalar_judge_dir",
    "generative": "generative_judge_dir",
    "offline": "offline_data",
    "small_eval": "small_eval",
    "tiny": "tiny_model_dir",
    "helpsteer2": "helpsteer2",
    "helpsteer2_bad_train": "helpsteer2_bad_train",
    "rewardbench2": "rewardbench2",
}
RUN_HERE = [key for key, run in RUN.items() if isinstance(run, Run)]


@pytest.mark.e2e
@pytest.mark.parametrize("key", RUN_HERE, ids=[f"{readme}:{line[:40]}" for readme, line in RUN_HERE])
def test_a_readme_block_runs_here(key, request, tmp_path, offline_data, tiny_model_dir):
    block, run = run_entry(key), RUN[key]
    root = workspace(tmp_path / "ws")
    for path, stand_in in run.links:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).symlink_to(request.getfixturevalue(STAND_IN_FIXTURES[stand_in]))
    judge = request.getfixturevalue(f"{run.judge}_judge") if run.judge else None
    if block.kind == "python":
        check_python_block(block, run, root, judge and judge.url)
    else:
        port = int(judge.url.rsplit(":", 1)[1]) if judge else free_port()
        check_shell_block(block, run, root, {"model": tiny_model_dir, "data": offline_data}, port)


def check_shell_block(block: Block, run: Run, root: Path, stand_ins: dict[str, Path], port: int) -> None:
    result = run_block(block, root, stand_ins, port, run.cwd)
    printed = (result.stdout + (result.stderr or "")).replace(f":{port}", f":{DOCUMENTED_PORT}")
    if block.text.startswith("$ "):  # a recorded session: what it shows was printed, in that order
        shown = [
            line
            for _, output in session(block.text)
            for line in output
            if line.strip() and not (run.responses and line.startswith("{"))
        ]
        missing = missing_in_order(shown, printed.splitlines())
        assert not missing, f"not printed, in this order: {missing[:3]}\n--- printed:\n{printed[-4000:]}"
    if run.responses:
        recorded, answered = json_lines(block.text), json_lines(printed)
        assert len(answered) == len(recorded) > 0, printed[-3000:]
        if run.responses == "values":
            assert same_values(without(answered, run.varying), without(recorded, run.varying)), (
                f"answered:\n{json.dumps(answered)}\nrecorded:\n{json.dumps(recorded)}"
            )
        else:
            assert key_shape(answered) == key_shape(recorded)
    launchers = sum(bool(LAUNCHER.search(command)) for command in commands(block.text))
    if not block.text.startswith("$ "):
        assert printed.count("dry run: the config is valid; nothing was started") == launchers, printed[-3000:]


def check_python_block(block: Block, run: Run, root: Path, judge_url: str | None) -> None:
    result = run_python_block(block, root, run.given, run.cwd, judge_url)
    if block.shown is None:
        return
    try:
        shown, printed = ast.literal_eval(block.shown), ast.literal_eval(result.stdout.strip())
    except (ValueError, SyntaxError):
        missing = missing_in_order(
            [line for line in block.shown.splitlines() if line.strip()], result.stdout.splitlines()
        )
        assert not missing, f"not printed, in this order: {missing[:3]}\n--- printed:\n{result.stdout[-4000:]}"
    else:
        assert same_values(without(printed, run.varying), without(shown, run.varying)), (
            f"printed:\n{result.stdout}\nshown:\n{block.shown}"
        )
