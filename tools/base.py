"""What every part of the build shares: the paths, the browser it tests in, logging and
running commands. Standard library only."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DIST = ROOT / "dist"
CACHE = ROOT / ".build"
VENV = ROOT / ".venv"
NODE = ROOT / "node_modules"

#: pure-Python wheels the page loads, pinned; fetched from PyPI for Python 3.14
PAGE_WHEELS = {"micropip": "0.11.1", "snowballstemmer": "3.1.1"}
#: those chatmem depends on in the page (micropip is there for PyScript)
PAGE_DEPS = {"snowballstemmer"}
PYODIDE_PY = "3.14"
#: exact BPE counters shipped for the browser (gpt-tokenizer, ranks bundled; loaded on demand)
BPE_ENCODINGS = ("o200k_base", "cl100k_base")

#: how tests and benchmarks launch Debian's Chromium: quiet, and with nothing but
#: loopback resolvable (proves the site needs no other host)
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
]

MIME = {
    ".wasm": "application/wasm",
    ".mjs": "text/javascript",
    ".js": "text/javascript",
    ".json": "application/json",
    ".whl": "application/zip",
    ".zip": "application/zip",
    ".webmanifest": "application/manifest+json",
    ".svg": "image/svg+xml",
    ".css": "text/css",
    ".html": "text/html",
}


def log(msg: str) -> None:
    print(f"[build] {msg}", flush=True)


def run(cmd: list[str], **kw: object) -> None:
    log(" ".join(str(c) for c in cmd))
    subprocess.run(cmd, check=True, cwd=kw.pop("cwd", ROOT), **kw)  # type: ignore[arg-type]


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def apt_install(package: str) -> None:
    """Install a Debian package (as root, or through sudo)."""
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    run(sudo + ["apt-get", "update", "-q"], env=env)
    run(sudo + ["apt-get", "install", "-y", "-q", package], env=env)
