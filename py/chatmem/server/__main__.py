"""``python -m chatmem.server [--port 8787] [--db sync.db|postgresql://...] [--api-key KEY ...]``

Serves the sync protocol. Every flag can also come from the environment
(``CHATMEM_SYNC_DB``, ``CHATMEM_SYNC_API_KEYS`` comma-separated, ... see
``settings.py``), which keeps keys out of the process list. Clients authenticate
with account tokens (``python -m chatmem.server accounts add`` / ``tokens issue``)
or, as a single-account shortcut, with an ``--api-key`` key (its own data space).
"""

from __future__ import annotations

import argparse
import logging
import sys

from ..errors import ValidationError
from .backends import open_storage
from .cli import ADMIN_COMMANDS, admin_main
from .faults import FaultPlan
from .runner import SyncServer
from .settings import ServerSettings

__all__ = ["main"]


def banner(url: str, keys: int, accounts: int, db: str) -> str:
    """The line the server starts with: where, who may sync (keys and accounts), which database
    (a PostgreSQL address without its credentials)."""
    who = [f"{keys} API key{'' if keys == 1 else 's'}"]
    if accounts:
        who.append(f"{accounts} account{'' if accounts == 1 else 's'}")
    return f"chatmem sync server on {url} ({', '.join(who)}, db {db.split('@')[-1]})"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ADMIN_COMMANDS:
        return admin_main(argv)
    p = argparse.ArgumentParser(
        prog="python -m chatmem.server",
        description=__doc__.splitlines()[0].replace("``", ""),
        epilog="administration: python -m chatmem.server {accounts,tokens} ... (see --help of each)",
    )
    try:
        env = ServerSettings.from_env()
    except ValidationError as e:
        p.error(str(e))
    p.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8787)
    p.add_argument(
        "--db", default=env.db, help="SQLite file (':memory:' for a throwaway server) or a postgresql:// URL"
    )
    p.add_argument(
        "--api-key",
        action="append",
        default=[],
        dest="api_keys",
        metavar="KEY",
        help="single-account shortcut: a key with its own data space (repeatable)",
    )
    p.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        dest="cors_origins",
        metavar="ORIGIN",
        help="allowed page origin (repeatable; default: any)",
    )
    p.add_argument("--max-body", type=int, default=env.max_body, help="largest request body in bytes")
    p.add_argument(
        "--ops-per-minute",
        type=int,
        default=env.ops_per_minute,
        help="default per-account push quota (0: unlimited; default 6000)",
    )
    p.add_argument(
        "--max-bytes",
        type=int,
        default=env.max_bytes,
        help="default per-account stored-bytes quota (0: unlimited; default 1 GiB)",
    )
    p.add_argument("--pool-size", type=int, default=env.pool_size, help="PostgreSQL connections")
    p.add_argument("--heartbeat", type=float, default=env.heartbeat, help="seconds between stream pings")
    p.add_argument("--faults", default=env.faults, help="fault plan for testing, e.g. '500x3,429:2,drop'")
    p.add_argument("--log-level", default=env.log_level)
    args = p.parse_args(argv)
    keys = list(args.api_keys) + env.api_keys
    try:
        faults = FaultPlan.parse(args.faults) if args.faults else None
    except ValueError as e:
        p.error(str(e))
    storage = open_storage(args.db, pool_size=args.pool_size)
    if not keys and not storage.accounts():
        storage.close()
        p.error(
            "give at least one --api-key (or set CHATMEM_SYNC_API_KEYS), or add an account: "
            "python -m chatmem.server accounts add NAME --db DB"
        )
    logging.basicConfig(level=args.log_level.upper(), format="%(message)s")
    server = SyncServer(
        keys,
        storage=storage,
        host=args.host,
        port=args.port,
        faults=faults,
        cors_origins=args.cors_origins or env.cors_origins,
        log_level=args.log_level,
        max_body=args.max_body,
        heartbeat=args.heartbeat,
        quotas=ServerSettings(ops_per_minute=args.ops_per_minute, max_bytes=args.max_bytes).quotas,
    )
    print(banner(server.url, len(keys), len(storage.accounts()), args.db), file=sys.stderr)
    try:
        server.serve_forever()
    finally:
        server.storage.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
