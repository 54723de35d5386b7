"""The order `make test` hands modules to its workers (tests/conftest.py): every module named as one of the
longest exists, so a renamed one cannot silently drop back to the end of the run."""

from tests.conftest import LONGEST_MODULES, REPO_ROOT


def test_every_longest_module_exists():
    assert [name for name in LONGEST_MODULES if not (REPO_ROOT / "tests" / name).is_file()] == []
