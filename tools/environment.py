"""The test environment: ``.venv`` with chatmem and its extras at the locked versions, and
Debian packages (Chromium, PostgreSQL) installed when missing."""

from __future__ import annotations

import sys
from pathlib import Path

from .base import (
    ROOT,
    VENV,
    apt_install,
    run,
    sha256,
)

#: the exact versions of the Python packages the build, tests and benches install
LOCK = ROOT / "requirements-lock.txt"


def venv_python() -> Path:
    return VENV / "bin" / "python"


def ensure_venv(extras: str) -> Path:
    """``.venv`` with chatmem (editable) and ``extras`` at the locked versions; its python."""
    py = venv_python()
    if not py.exists():
        run([sys.executable, "-m", "venv", str(VENV)])
    stamp = VENV / f".chatmem-{extras}"
    want = sha256(ROOT / "pyproject.toml") + sha256(LOCK)
    if not stamp.exists() or stamp.read_text() != want:
        run([str(py), "-m", "pip", "install", "-q", "-c", str(LOCK), "-e", f"{ROOT}[{extras}]"])
        stamp.write_text(want)
    return py


def ensure_test_env(extras: str = "test") -> Path:
    """``ensure_venv(extras)`` and Debian's Chromium, which the browser tests drive."""
    py = ensure_venv(extras)
    if not Path("/usr/bin/chromium").exists():
        apt_install("chromium")
    return py
