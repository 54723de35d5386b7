"""Every command a README shows works as shown, or the README says why it cannot run here.

A shell block is a fenced block tagged bash, sh, shell or console, or an untagged one whose first line is a
`$ ` prompt (a recorded session). Each shell block of every tracked README.md and experiments log
(experiments/<topic>/LOG.md) is either
- run here (RUN below): in a fresh bash after the documented setup (this environment's bin first on PATH,
  nothing else of the caller's environment), in a scratch copy of the repository's layout, on small
  stand-ins where it needs models or data, recipe launchers with `--dry-run`, servers until `/health`
  answers; or
- marked in the README: the last line above it reads `Not run by the tests: <the reason>`.
A new block that is neither fails the suite, and so does a RUN entry whose block is gone.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.support.servers import free_port, start_server

SHELL_TAGS = {"bash", "sh", "shell", "console"}
MARKER = re.compile(r"Not run by the tests: (?P<reason>\S.{9,})")
FENCE = re.compile(r"(?P<fence>`{3,}|~{3,})(?P<tag>[^`\s]*)\s*$")
VENV_BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class ShellBlock:
    readme: str  # relative to the repository
    line: int  # of the opening fence
    text: str
    not_runnable: str | None  # the marker's reason

    @property
    def key(self) -> tuple[str, str]:
        """(README, first line): what RUN names a block by, whatever moves around it."""
        return self.readme, self.text.splitlines()[0].strip()


def tracked_readmes() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", "README.md", "**/README.md"]
        + ["experiments/*/LOG.md"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return sorted(path for path in listed if (REPO_ROOT / path).is_file())


def shell_blocks(readme: str, text: str | None = None) -> list[ShellBlock]:
    """The shell blocks of `readme` (or of `text`, read as that README)."""
    lines = (REPO_ROOT / readme).read_text().splitlines() if text is None else text.splitlines()
    blocks, number = [], 0
    while number < len(lines):
        opening = FENCE.fullmatch(lines[number].strip())
        if opening is None:
            number += 1
            continue
        end = next(
            (i for i in range(number + 1, len(lines)) if lines[i].strip().startswith(opening["fence"])), len(lines)
        )
        body = lines[number + 1 : end]
        tag = opening["tag"].lower()
        if tag in SHELL_TAGS or (tag == "" and body and body[0].startswith("$ ")):
            above = next((line.strip() for line in reversed(lines[:number]) if line.strip()), "")
            marker = MARKER.fullmatch(above)
            blocks.append(ShellBlock(readme, number + 1, "\n".join(body), marker and marker["reason"]))
        number = end + 1
    return blocks


def all_shell_blocks() -> list[ShellBlock]:
    return [block for readme in tracked_readmes() for block in shell_blocks(readme)]


# ---- how a block runs -------------------------------------------------------------------------------

# Commands that make what the workspace already holds: a model (the tiny model stands in for SmolLM2, which
# `tests/test_data_prep_smollm2.py` builds; the tiny one is the session's, built by the same code and seed)
# or the offline data (made once, by the README command that makes it, see `offline_data`).
STAND_IN = re.compile(
    r"python -m data_prep (?:base-model (?P<model>smollm2|tiny)|(?P<data>offline)) --out (?P<out>\S+)"
)
SERVER = re.compile(r"python -m serving(?:\.ray_serve)?\s")
LAUNCHER = re.compile(r"\bbash \S*run_\w+\.sh\b")
TRAILING_COMMENT = re.compile(r"\s+#\s.*$")
DOCUMENTED_PORT = "8888"


def commands(text: str) -> list[str]:
    """The block's commands: continuation lines joined, comments dropped; of a recorded session, only the
    `$ ` lines (and their continuations)."""
    if text.startswith("$ "):
        text = "\n".join(part.split("\n")[0] for part in re.sub(r"\\\n", "", text).split("$ ")[1:])
    joined = re.sub(r"\\\n\s*", "", text)
    lines = (TRAILING_COMMENT.sub("", line).strip() for line in joined.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def runnable_script(text: str, port: int, stand_ins: dict[str, Path]) -> str:
    """The block as a bash script that can run here: the documented port replaced by `port`, stand-in
    commands replaced by links to what they would have made (those `stand_ins` has; the others run),
    launchers given `--dry-run`, each server started in the background and waited for (and stopped when
    the script ends)."""
    script = ["set -euo pipefail", "trap 'kill $(jobs -p) 2>/dev/null || true; wait' EXIT"]
    for command in commands(text.replace(f":{DOCUMENTED_PORT}", f":{port}")):
        stand_in = STAND_IN.fullmatch(command)
        source = stand_in and stand_ins.get("data" if stand_in["data"] else "model")
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
        elif LAUNCHER.search(command) and "--dry-run" not in command:
            script.append(f"{command} --dry-run")
        else:
            script.append(command)
    return "\n".join(script) + "\n"


def fresh_shell_env(home: Path) -> dict[str, str]:
    """A new login's environment after the documented setup (`source .venv/bin/activate`)."""
    return {"HOME": str(home), "PATH": f"{VENV_BIN}:/usr/bin:/bin", "OMP_NUM_THREADS": "1", "LANG": "C.UTF-8"}


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
    block: ShellBlock, root: Path, stand_ins: dict[str, Path], port: int | None = None, cwd: str = ".", check=True
) -> subprocess.CompletedProcess:
    script = runnable_script(block.text, port or free_port(), stand_ins)
    result = subprocess.run(
        ["bash", "-c", script], cwd=root / cwd, env=fresh_shell_env(root), capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0 or not check, (
        f"{block.readme}:{block.line} failed (exit {result.returncode}):\n{script}\n"
        f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
    return result


def runnable_blocks_named(key: tuple[str, str], blocks: list[ShellBlock]) -> list[ShellBlock]:
    readme, first_line_start = key
    return [b for b in blocks if not b.not_runnable and b.readme == readme and b.key[1].startswith(first_line_start)]


def run_entry(key: tuple[str, str]) -> ShellBlock:
    [found] = runnable_blocks_named(key, shell_blocks(key[0]))
    return found


@dataclass(frozen=True)
class Run:
    """How a block runs here beyond the workspace and its stand-in models and data."""

    links: tuple[tuple[str, str], ...] = ()  # (workspace path, stand-in: scalar, generative, offline, small_eval)
    judge: str | None = None  # rule or scalar: a judge of that kind answers at the documented port
    responses: str | None = None  # keys or values: the JSON it prints matches the recorded one's keys or values
    cwd: str = "."  # where the block's own text says it runs
    recorded: bool = False  # a recorded session: its output lines must appear in what the commands print


GRPO = "cookbooks/training_judge_model/grpo"
SMOLLM2_FIRST = "python -m data_prep base-model smollm2 --out ./models/smollm2"
SCALAR_JUDGE_REQUEST = (
    '$ curl -s localhost:8888/judge -H \'Content-Type: application/json\' -d \'{"prompt": "What is 2+2?", '
    '"completion": "The answer is **boxed{4}**", "answer"'
)


def recorded_judge_curves(readme: str, results: str, runs: tuple[str, ...]) -> dict[tuple[str, str], Run]:
    """The recorded `python -m evaluation.judge_curves` blocks of a README, each named by the first run it plots."""
    return {(readme, f"$ python -m evaluation.judge_curves {results}/{run}"): Run(recorded=True) for run in runs}


# The blocks run here, by (README, start of the first line): a Run, or the test that runs it.
RUN: dict[tuple[str, str], Run | str] = {
    ("README.md", "source .venv/bin/activate"): "test_entering_the_environment",
    ("README.md", "python -m serving --model ./runs/demo/bt/hf"): Run(links=(("runs/demo/bt/hf", "scalar"),)),
    ("cookbooks/rl_with_judge_reward/README.md", "python -m serving --model runs/demo/bt/hf"): Run(
        links=(("runs/demo/bt/hf", "scalar"),)
    ),
    ("cookbooks/rl_with_judge_reward/README.md", "python -m data_prep offline --out ./data"): (
        "test_the_offline_data_command_writes_the_policy_data"
    ),
    ("cookbooks/rl_with_judge_reward/README.md", SMOLLM2_FIRST): Run(links=(("data", "offline"),), judge="rule"),
    (  # the committed runs' own validation dumps: the recorded figures must come out of them
        "experiments/policy-rl/LOG.md",
        "$ python -m evaluation.reward_plots experiments/policy-rl/results/learn-seed1/validation "
        "experiments/policy-rl/results/learn-seed2/validation --out experiments/policy-rl/plots",
    ): Run(recorded=True),
    (  # the runs with the hard-negative judge
        "experiments/policy-rl/LOG.md",
        "$ python -m evaluation.reward_plots experiments/policy-rl/results/hard-negatives-seed1/validation "
        "experiments/policy-rl/results/hard-negatives-seed2",
    ): Run(recorded=True),
    (  # a rerun of seed 1 beside the first run
        "experiments/policy-rl/LOG.md",
        "$ python -m evaluation.reward_plots experiments/policy-rl/results/hard-negatives-seed1/validation "
        "experiments/policy-rl/results/hard-negatives-seed1-rerun/validation",
    ): Run(recorded=True),
    (  # and the demo judge's training rollouts, for the judge's pair accuracy
        "experiments/policy-rl/LOG.md",
        "$ python -m evaluation.reward_plots experiments/policy-rl/results/learn-seed1/rollouts",
    ): Run(recorded=True),
    ("cookbooks/training_judge_model/bradley-terry/README.md", SMOLLM2_FIRST): Run(),
    (  # the measured laptop run and its evaluation
        "experiments/scalar-judges/LOG.md",
        "bash cookbooks/training_judge_model/bradley-terry",
    ): Run(links=(("data", "small_eval"), ("checkpoints/bt-cpu-smollm2/hf", "scalar"), ("models/smollm2", "tiny"))),
    (f"{GRPO}/README.md", "cd cookbooks/training_judge_model/grpo"): Run(),
    (f"{GRPO}/README.md", "$ TRAIN_BATCH_SIZE=50 bash pointwise/run_pointwise.sh"): Run(
        links=((f"{GRPO}/data", "offline"),), cwd=GRPO, recorded=True
    ),
    (f"{GRPO}/README.md", "python -m serving --model checkpoints/grpo"): Run(
        links=(("checkpoints/grpo/pointwise/hf", "generative"),)
    ),
    ("cookbooks/training_judge_model/multi-aspect/README.md", SMOLLM2_FIRST): Run(),
    ("cookbooks/training_judge_model/sft/README.md", SMOLLM2_FIRST): Run(),
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
        ),
    ),
    ("data_prep/README.md", "$ python -m data_prep offline --out data/offline --seed 0"): Run(recorded=True),
    ("evaluation/README.md", "$ python -m data_prep offline --out ./data"): Run(recorded=True),
    ("data_prep/README.md", "python -m data_prep offline --out ./data"): Run(),
    ("judge_rewards/README.md", "export JUDGE_MODEL_URL="): Run(),
    ("serving/README.md", SCALAR_JUDGE_REQUEST): Run(judge="scalar", responses="keys"),
    ("serving/README.md", "$ curl -s localhost:8888/batch_judge"): Run(judge="rule", responses="values"),
    ("serving/README.md", "$ curl -s localhost:8888/compare"): Run(judge="scalar", responses="keys"),
    ("serving/README.md", "$ curl -s localhost:8888/judge_group"): Run(judge="scalar", responses="keys"),
    ("serving/README.md", "$ curl -s localhost:8888/health"): Run(judge="scalar", responses="keys"),
}


def test_every_shell_block_is_run_here_or_marked_not_runnable():
    blocks = all_shell_blocks()
    assert len({block.readme for block in blocks}) >= 8, "the READMEs' shell blocks are not found"
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
        f"RUN names {key} as run by {run}, which is no test here"
        for key, run in RUN.items()
        if isinstance(run, str) and not callable(globals().get(run))
    ]
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
print("not a shell block")
```
"""
    found = [(block.line, block.key[1], block.not_runnable) for block in shell_blocks("README.md", text)]
    assert found == [
        (3, "python -m serving --judge rule", None),
        (9, "$ nvidia-smi", "needs 8 GPUs per node."),
        (15, "$ make demo", None),
    ]


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
        + [run_entry(("README.md", "source .venv/bin/activate")).text + "\npython -c 'import sys; print(sys.prefix)'"],
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
    key = ("cookbooks/rl_with_judge_reward/README.md", "python -m data_prep offline --out ./data")
    assert RUN[key] == "test_the_offline_data_command_writes_the_policy_data"
    root = workspace(tmp_path_factory.mktemp("offline_data") / "ws")
    run_block(run_entry(key), root, stand_ins={})
    return root / "data"


def test_the_offline_data_command_writes_the_policy_data(offline_data):
    assert (offline_data / "policy" / "val.parquet").is_file()


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


def json_lines(text: str) -> list:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def without(value, names: set[str]):
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


STAND_IN_FIXTURES = {
    "scalar": "tiny_scalar_judge_dir",
    "generative": "generative_judge_dir",
    "offline": "offline_data",
    "small_eval": "small_eval",
    "tiny": "tiny_model_dir",
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
    port = int(request.getfixturevalue(f"{run.judge}_judge").url.rsplit(":", 1)[1]) if run.judge else None

    result = run_block(block, root, {"model": tiny_model_dir, "data": offline_data}, port, run.cwd, not run.recorded)

    printed = result.stdout + result.stderr
    if run.recorded:
        recorded = [line for line in block.text.splitlines() if not line.startswith("$ ") and line.strip()]
        assert [line for line in recorded if line not in printed] == [], printed[-3000:]
    if run.responses:
        recorded, answered = json_lines(block.text), json_lines(result.stdout)
        assert len(answered) == len(recorded) > 0, printed[-3000:]
        if run.responses == "values":  # all but the timing
            assert without(answered, {"latency"}) == without(recorded, {"latency"})
        else:
            assert key_shape(answered) == key_shape(recorded)
    launchers = sum(bool(LAUNCHER.search(command)) for command in commands(block.text))
    if not run.recorded:
        assert printed.count("dry run: the config is valid; nothing was started") == launchers, printed[-3000:]
