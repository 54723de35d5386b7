"""`make setup`'s first step, torch's CPU build (the Makefile's torch-cpu target): from the local wheel folder
where it exists, else from PyTorch's CPU index, else a stop that says what to install. Run here with pip's
`--dry-run` on local folders and file:// indexes standing in for the folder and PyTorch's index: nothing is
installed and nothing outside this machine is asked."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.test_install_lock import makefile_setting

TORCH_SPEC = makefile_setting("TORCH_SPEC")
NAME, VERSION = TORCH_SPEC.split("==")
WHEEL = f"{NAME}-{VERSION}-py3-none-any.whl"


def stand_in_wheel(folder: Path) -> Path:
    """An empty wheel of torch's name and CPU version: what pip resolves, not what it would install."""
    folder.mkdir(parents=True, exist_ok=True)
    dist_info = f"{NAME}-{VERSION}.dist-info"
    with zipfile.ZipFile(folder / WHEEL, "w") as wheel:
        wheel.writestr(f"{dist_info}/METADATA", f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {VERSION}\n")
        wheel.writestr(
            f"{dist_info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        wheel.writestr(f"{dist_info}/RECORD", "")
    return folder / WHEEL


def simple_index(root: Path, with_torch: bool) -> str:
    """A file:// package index in PyPI's simple layout, holding the stand-in wheel or nothing."""
    project = root / NAME
    project.mkdir(parents=True)
    links = ""
    if with_torch:
        stand_in_wheel(project)
        links = f'<a href="{WHEEL.replace("+", "%2B")}">{WHEEL}</a>'
    (project / "index.html").write_text(f"<html><body>{links}</body></html>\n")
    return root.as_uri()


def torch_step(wheels: Path, index: str) -> subprocess.CompletedProcess:
    """`make torch-cpu` with pip resolving only (--dry-run, as if nothing were installed), this machine's
    pip settings (its wheel folder among them) left out."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PIP_", "MAKE"))}
    env["PIP_CONFIG_FILE"] = os.devnull
    pip = f"{sys.executable} -m pip install --dry-run --ignore-installed --disable-pip-version-check"
    return subprocess.run(
        ["make", "--no-print-directory", "torch-cpu", f"PIP={pip}", f"TORCH_WHEELS={wheels}", f"TORCH_INDEX={index}"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_torch_comes_from_pytorchs_cpu_index_by_default_where_the_wheel_folder_is_missing():
    assert makefile_setting("TORCH_INDEX") == "https://download.pytorch.org/whl/cpu"


def test_the_wheel_folder_is_used_alone_where_it_exists(tmp_path):
    stand_in_wheel(tmp_path / "wheels")
    step = torch_step(tmp_path / "wheels", simple_index(tmp_path / "index", with_torch=False))
    assert step.returncode == 0, step.stdout + step.stderr
    assert f"Would install {NAME}-{VERSION}" in step.stdout
    assert "Looking in indexes" not in step.stdout  # --no-index: the folder only


def test_without_the_folder_torch_comes_from_the_index(tmp_path):
    index = simple_index(tmp_path / "index", with_torch=True)
    step = torch_step(tmp_path / "missing", index)
    assert step.returncode == 0, step.stdout + step.stderr
    assert f"no wheel folder {tmp_path / 'missing'} (TORCH_WHEELS): {TORCH_SPEC} from {index}" in step.stdout
    assert f"Looking in indexes: {index}" in step.stdout
    assert f"Would install {NAME}-{VERSION}" in step.stdout


@pytest.mark.parametrize("folder", ["missing", "empty"])
def test_where_neither_has_torch_setup_stops_saying_what_to_install(tmp_path, folder):
    (tmp_path / "empty").mkdir()
    index = simple_index(tmp_path / "index", with_torch=False)
    step = torch_step(tmp_path / folder, index)
    assert step.returncode != 0
    message = step.stderr.strip().splitlines()[-2]  # the last line is make's own
    assert message.startswith(f"make setup needs torch's CPU build, {TORCH_SPEC}, found neither in the wheel folder")
    assert f"{tmp_path / folder} (TORCH_WHEELS) nor on {index} (TORCH_INDEX)" in message
    assert f"pip install --no-deps {TORCH_SPEC} --index-url {index}" in message
