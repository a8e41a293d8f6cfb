#!/usr/bin/env python3
"""Build, serve, test and benchmark chatmem. Standard library only.

    python build.py build            # npm ci, wheel, runtime files -> dist/
    python build.py serve [--port N] # build if needed, serve dist/ on 127.0.0.1
    python build.py check            # ruff (lint, format), mypy strict, layers, eslint: zero findings
    python build.py test [pytest args...]   # install test deps, build, check, run pytest
                                     # (with pytest args: those tests only, no check)
    python build.py bench [args...]  # install deps, build, run the benchmarks
    python build.py docs             # the documentation site -> site/ (strict; also in dist/docs/)

``dist/`` is a complete static site: copy it to any static host to deploy.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from tools.base import (
    DIST,
    NODE,
    ROOT,
    log,
)
from tools.environment import ensure_test_env
from tools.postgres import with_postgres
from tools.serving import serve
from tools.static_site import build, build_docs, build_if_needed, npm_ci

#: the Python the checks read (the package, the app, tests, benchmarks and the build itself)
PY_SOURCES = ["py", "web/app", "tests", "bench", "tools", "build.py", "hatch_build.py"]


#: import-linter's command (its script is not on PATH in every environment)
_LINT_IMPORTS = (
    "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
)


def check() -> int:
    """ruff (lint and format), mypy strict, the layer contract (``.importlinter``) and
    eslint, at the versions the lock files pin; 0 when none of them finds anything."""
    py = ensure_test_env("test,dev")
    npm_ci()
    steps = [
        ("ruff check", [str(py), "-m", "ruff", "check", *PY_SOURCES]),
        ("ruff format", [str(py), "-m", "ruff", "format", "--check", "--quiet", *PY_SOURCES]),
        ("mypy", [str(py), "-m", "mypy"]),
        ("layers", [str(py), "-c", _LINT_IMPORTS, "--config", ".importlinter", "--no-cache"]),
        ("eslint", ["node", str(NODE / "eslint" / "bin" / "eslint.js"), "--max-warnings", "0", "web"]),
    ]
    failed = []
    for name, cmd in steps:
        log(f"check: {name}")
        if subprocess.call(cmd, cwd=ROOT) != 0:
            failed.append(name)
    if failed:
        log(f"check failed: {', '.join(failed)}")
        return 1
    log("check: no findings")
    return 0


def test(args: list[str]) -> int:
    py = ensure_test_env("test,dev")
    build_if_needed()
    if not args and check() != 0:
        return 1
    env = dict(os.environ, CHATMEM_DIST=str(DIST))
    return with_postgres(env, lambda e: subprocess.call([str(py), "-m", "pytest", *args], cwd=ROOT, env=e))


def bench(args: list[str]) -> int:
    py = ensure_test_env("test,bench")
    build_if_needed()
    # a long bench may serve a copy of the site, so that builds beside it do not change it
    env = dict(os.environ, CHATMEM_DIST=os.environ.get("CHATMEM_DIST") or str(DIST))
    return with_postgres(
        env, lambda e: subprocess.call([str(py), str(ROOT / "bench" / "run.py"), *args], cwd=ROOT, env=e)
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("build", help="write the static site to dist/")
    sp = sub.add_parser("serve", help="build if needed, then serve dist/ on 127.0.0.1")
    sp.add_argument("--port", type=int, default=8000)
    sub.add_parser(
        "check", help="ruff (lint, format), mypy strict, the layer contract, eslint: zero findings"
    )
    sub.add_parser(
        "test", help="install test deps, build, check, run pytest (extra args: those tests, no check)"
    )
    sub.add_parser("bench", help="install deps, build, run the benchmarks (extra args go to bench/run.py)")
    sub.add_parser("docs", help="build the documentation site into site/ (strict)")
    args, rest = ap.parse_known_args()
    if args.cmd == "build":
        build()
        return 0
    if args.cmd == "serve":
        serve(args.port)
        return 0
    if args.cmd == "check":
        return check()
    if args.cmd == "test":
        return test(rest)
    if args.cmd == "bench":
        return bench(rest)
    if args.cmd == "docs":
        log(f"docs: {build_docs(ROOT / 'site')}")
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
