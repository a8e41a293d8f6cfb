"""A throwaway PostgreSQL cluster, run as an unprivileged user on a free port, for the
server tests: started by ``build.py test`` and stopped at its end."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

from .base import (
    apt_install,
    log,
)

PG_VERSIONS = ("17", "16", "15")


def postgres_bin() -> Path:
    """The directory of Debian's PostgreSQL server binaries, installing ``postgresql`` if missing."""

    def found() -> Path | None:
        for v in PG_VERSIONS:
            d = Path("/usr/lib/postgresql") / v / "bin"
            if (d / "initdb").exists() and (d / "pg_ctl").exists():
                return d
        return None

    d = found()
    if d is None:
        apt_install("postgresql")
        d = found()
    if d is None:
        sys.exit("PostgreSQL's initdb was not found after installing Debian's postgresql package")
    return d


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresCluster:
    """A throwaway PostgreSQL cluster in a temporary directory on a free port on 127.0.0.1
    (trust auth, loopback only). As root it runs as the ``postgres`` system user, since
    ``initdb`` refuses root. ``url`` is a ``postgresql://`` URL of its ``postgres`` database."""

    def __init__(self) -> None:
        import pwd
        import tempfile

        self.bin = postgres_bin()
        self.port = free_port()
        self.tmp = Path(tempfile.mkdtemp(prefix="chatmem-pg-"))
        self.data = self.tmp / "data"
        self.user = "postgres"
        self._as: list[str] = []
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            os.chown(self.tmp, pw.pw_uid, pw.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
        else:
            self.user = pwd.getpwuid(os.geteuid()).pw_name
        self.url = f"postgresql://{self.user}@127.0.0.1:{self.port}/postgres"

    def _run(self, *cmd: str) -> None:
        subprocess.run(
            self._as + list(cmd),
            check=True,
            cwd=self.tmp,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )

    def start(self) -> PostgresCluster:
        self._run(
            str(self.bin / "initdb"),
            "-D",
            str(self.data),
            "-A",
            "trust",
            "-U",
            self.user,
            "-E",
            "UTF8",
            "--no-instructions",
        )
        opts = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.tmp} "
            "-c max_connections=300 -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        self._run(
            str(self.bin / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.tmp / "log"),
            "-o",
            opts,
            "-w",
            "-t",
            "60",
            "start",
        )
        log(f"PostgreSQL {self.bin.parent.name} test cluster on 127.0.0.1:{self.port}")
        return self

    def stop(self) -> None:
        try:
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.tmp, ignore_errors=True)


def with_postgres(env: dict[str, str], fn: Callable[[dict[str, str]], int]) -> int:
    """Run ``fn(env)`` with ``CHATMEM_TEST_PG`` set to a throwaway cluster's URL (unless it is set)."""
    if env.get("CHATMEM_TEST_PG"):
        return fn(env)
    cluster = PostgresCluster().start()
    try:
        return fn(dict(env, CHATMEM_TEST_PG=cluster.url))
    finally:
        cluster.stop()
