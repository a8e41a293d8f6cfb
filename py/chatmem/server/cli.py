"""Administration from the command line: accounts and tokens.

::

    python -m chatmem.server accounts add NAME --db DB [--ops-per-minute N] [--max-bytes N]
    python -m chatmem.server accounts list --db DB
    python -m chatmem.server accounts quota NAME --db DB [--ops-per-minute N] [--max-bytes N]
    python -m chatmem.server tokens issue ACCOUNT --db DB [--label L]   # the token is the last line
    python -m chatmem.server tokens list ACCOUNT --db DB                 # ids and labels, never tokens
    python -m chatmem.server tokens revoke TOKEN_ID --db DB

``--db`` defaults to ``CHATMEM_SYNC_DB`` (else ``sync.db``). Exit status 0 on
success, 1 with a message on stderr when the name or id is unknown or taken.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable

from ..errors import ChatmemError
from .accounts import add_account, issue_token, list_tokens, revoke_token
from .backends import open_storage
from .storage import SyncStorage

__all__ = ["admin_main", "ADMIN_COMMANDS"]

ADMIN_COMMANDS = ("accounts", "tokens")


def _when(ms: int | None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000)) if ms else "-"


def _quota(v: int | None) -> str:
    return "default" if v is None else ("unlimited" if v == 0 else str(v))


def _accounts_add(st: SyncStorage, a: argparse.Namespace) -> None:
    acct = add_account(st, a.name, ops_per_minute=a.ops_per_minute, max_bytes=a.max_bytes)
    print(f"account {acct.name} added (id {acct.id})")


def _accounts_list(st: SyncStorage, a: argparse.Namespace) -> None:
    for acct in st.accounts():
        print(
            f"{acct.name}\tid={acct.id}\tcreated={_when(acct.created_at)}\t"
            f"ops_per_minute={_quota(acct.ops_per_minute)}\tmax_bytes={_quota(acct.max_bytes)}"
        )


def _accounts_quota(st: SyncStorage, a: argparse.Namespace) -> None:
    if not st.set_account_quota(a.name, a.ops_per_minute, a.max_bytes):
        raise ChatmemError(f"no account named {a.name!r}")
    print(f"account {a.name}: ops_per_minute={_quota(a.ops_per_minute)} max_bytes={_quota(a.max_bytes)}")


def _tokens_issue(st: SyncStorage, a: argparse.Namespace) -> None:
    rec, token = issue_token(st, a.account, label=a.label)
    print(f"token {rec.id} issued for account {a.account}" + (f" ({rec.label})" if rec.label else ""))
    print("it is shown only now; the server keeps only its hash:")
    print(token)


def _tokens_list(st: SyncStorage, a: argparse.Namespace) -> None:
    for rec in list_tokens(st, a.account):
        state = f"revoked={_when(rec.revoked_at)}" if rec.revoked_at else "active"
        print(f"{rec.id}\t{rec.label or '-'}\tcreated={_when(rec.created_at)}\t{state}")


def _tokens_revoke(st: SyncStorage, a: argparse.Namespace) -> None:
    revoke_token(st, a.token_id)
    print(f"token {a.token_id} revoked")


def _parser() -> argparse.ArgumentParser:
    db = argparse.ArgumentParser(add_help=False)
    db.add_argument(
        "--db",
        default=os.environ.get("CHATMEM_SYNC_DB") or "sync.db",
        help="SQLite file or postgresql:// URL (default: $CHATMEM_SYNC_DB or sync.db)",
    )
    quota = argparse.ArgumentParser(add_help=False)
    quota.add_argument("--ops-per-minute", type=int, default=None, help="0: unlimited; absent: default")
    quota.add_argument("--max-bytes", type=int, default=None, help="0: unlimited; absent: default")
    p = argparse.ArgumentParser(prog="python -m chatmem.server", description="accounts and tokens")
    top = p.add_subparsers(dest="group", required=True)
    acc = top.add_parser("accounts").add_subparsers(dest="cmd", required=True)
    s = acc.add_parser("add", parents=[db, quota], help="add an account (with its own data space)")
    s.add_argument("name")
    s.set_defaults(fn=_accounts_add)
    acc.add_parser("list", parents=[db]).set_defaults(fn=_accounts_list)
    s = acc.add_parser("quota", parents=[db, quota], help="set an account's quotas")
    s.add_argument("name")
    s.set_defaults(fn=_accounts_quota)
    tok = top.add_parser("tokens").add_subparsers(dest="cmd", required=True)
    s = tok.add_parser("issue", parents=[db], help="issue a token (printed once, as the last line)")
    s.add_argument("account")
    s.add_argument("--label", default="", help="e.g. the device's name")
    s.set_defaults(fn=_tokens_issue)
    s = tok.add_parser("list", parents=[db], help="an account's token ids and labels")
    s.add_argument("account")
    s.set_defaults(fn=_tokens_list)
    s = tok.add_parser("revoke", parents=[db], help="revoke a token at once, on every instance")
    s.add_argument("token_id")
    s.set_defaults(fn=_tokens_revoke)
    return p


def admin_main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    fn: Callable[[SyncStorage, argparse.Namespace], None] = args.fn
    storage = open_storage(args.db, pool_size=1)
    try:
        fn(storage, args)
    except ChatmemError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        storage.close()
    return 0
