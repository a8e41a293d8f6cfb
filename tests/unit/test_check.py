"""``python build.py check`` fails, naming the file, on each kind of finding it is there
for: a layering violation, an unused import, a type error and a JavaScript reference to
an undefined name. Each case runs the command on a copy of the tree with one fault added.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: what the checks read; the environment (Python and Node packages) is the tree's own
COPIED = [
    "py",
    "web",
    "tests",
    "bench",
    "tools",
    "build.py",
    "hatch_build.py",
    "pyproject.toml",
    "requirements-lock.txt",
    "package.json",
    "package-lock.json",
    ".importlinter",
    "eslint.config.mjs",
    ".mypy_cache",
]
SHARED = [".venv", "node_modules"]


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the tree that passes the check, sharing the tree's installed tools."""
    from tools.environment import ensure_venv
    from tools.static_site import npm_ci

    # the copy finds both environments current (their stamps match its lock files), so
    # its check installs nothing into them
    ensure_venv("test,dev")
    npm_ci()
    dst = tmp_path_factory.mktemp("tree")
    skip = shutil.ignore_patterns("__pycache__", "data", "*.pyc")
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dst / name, ignore=skip)
        elif src.exists():
            shutil.copy2(src, dst / name)
    for name in SHARED:
        (dst / name).symlink_to(ROOT / name)
    return dst


def failed_steps(out: subprocess.CompletedProcess[str]) -> list[str]:
    """The steps the check names as failed (``[build] check failed: a, b``)."""
    lines = [line for line in out.stdout.splitlines() if "check failed: " in line]
    return lines[-1].split("check failed: ", 1)[1].split(", ") if lines else []


def check(tree: Path) -> subprocess.CompletedProcess[str]:
    # the copy's package, not the editable install of the tree's, is the one imported
    env = {**os.environ, "PYTHONPATH": str(tree / "py")}
    return subprocess.run(
        [sys.executable, "build.py", "check"], cwd=tree, env=env, capture_output=True, text=True, timeout=600
    )


class FaultyTree:
    """The copy with faults added to its files, each file restored by ``restore()``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._saved: dict[Path, str] = {}

    def add(self, rel: str, text: str) -> None:
        """Append ``text`` to the file ``rel``."""
        path = self.root / rel
        self._saved.setdefault(path, path.read_text(encoding="utf-8"))
        path.write_text(self._saved[path] + text, encoding="utf-8")

    def restore(self) -> None:
        for path, text in self._saved.items():
            path.write_text(text, encoding="utf-8")


@pytest.fixture
def faulty(tree: Path) -> Iterator[FaultyTree]:
    copy = FaultyTree(tree)
    yield copy
    copy.restore()


def test_the_copy_passes(tree: Path) -> None:
    """Without a fault the check passes, so each failure below is the fault's."""
    out = check(tree)
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_layering_violation_fails(faulty: FaultyTree) -> None:
    faulty.add(
        "py/chatmem/errors.py", "\n\nfrom chatmem.records import models as _models  # noqa: E402, F401\n"
    )
    out = check(faulty.root)
    assert out.returncode != 0
    assert "chatmem.errors is not allowed to import chatmem.records" in out.stdout + out.stderr
    assert failed_steps(out) == ["layers"], out.stdout


def test_an_unused_import_fails(faulty: FaultyTree) -> None:
    faulty.add("py/chatmem/text/tokenize.py", "\n\nimport fractions\n")
    out = check(faulty.root)
    assert out.returncode != 0
    assert "py/chatmem/text/tokenize.py" in out.stdout and "F401" in out.stdout
    assert failed_steps(out) == ["ruff check"], out.stdout


def test_a_type_error_fails(faulty: FaultyTree) -> None:
    faulty.add("py/chatmem/records/ids.py", '\n\ndef _wrong() -> int:\n    return "not an int"\n')
    out = check(faulty.root)
    assert out.returncode != 0
    assert "py/chatmem/records/ids.py" in out.stdout and "Incompatible return value type" in out.stdout
    assert failed_steps(out) == ["mypy"], out.stdout


def test_an_undefined_javascript_name_fails(faulty: FaultyTree) -> None:
    faulty.add("web/js/locks.js", "\nexport const broken = () => notDefinedAnywhere + 1;\n")
    out = check(faulty.root)
    assert out.returncode != 0
    assert "web/js/locks.js" in out.stdout and "'notDefinedAnywhere' is not defined" in out.stdout
    assert failed_steps(out) == ["eslint"], out.stdout
