"""``python -m chatmem.server --port 8787 --db sync.db --api-key KEY [--api-key KEY2 ...]``

Keys may also come from ``CHATMEM_SYNC_API_KEYS`` (comma-separated), which
keeps them out of the process list. Each key gets its own data space.
"""

from __future__ import annotations

import argparse
import os
import sys

from .faults import FaultPlan
from .runner import SyncServer

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m chatmem.server", description=__doc__.splitlines()[0]
    )
    p.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8787)
    p.add_argument(
        "--db", default="sync.db", help="SQLite file (':memory:' for a throwaway server)"
    )
    p.add_argument("--api-key", action="append", default=[], dest="api_keys", metavar="KEY")
    p.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        dest="cors_origins",
        metavar="ORIGIN",
        help="allowed page origin (repeatable; default: any)",
    )
    p.add_argument("--faults", default="", help="fault plan for testing, e.g. '500x3,429:2,drop'")
    p.add_argument("--log-level", default="info")
    args = p.parse_args(argv)
    keys = list(args.api_keys)
    keys += [k for k in os.environ.get("CHATMEM_SYNC_API_KEYS", "").split(",") if k]
    if not keys:
        p.error("give at least one --api-key (or set CHATMEM_SYNC_API_KEYS)")
    try:
        faults = FaultPlan.parse(args.faults) if args.faults else None
    except ValueError as e:
        p.error(str(e))
    server = SyncServer(
        keys,
        db=args.db,
        host=args.host,
        port=args.port,
        faults=faults,
        cors_origins=args.cors_origins or ("*",),
        log_level=args.log_level,
    )
    print(
        f"chatmem sync server on {server.url} ({len(keys)} key(s), db {args.db})", file=sys.stderr
    )
    try:
        server.serve_forever()
    finally:
        server.storage.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
