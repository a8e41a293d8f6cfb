"""One storage contract for the sync server's SQLite and PostgreSQL storages (real databases)."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chatmem.errors import DuplicateId
from chatmem.server import SyncService, open_storage
from chatmem.server.sqlbase import MIGRATIONS
from chatmem.server.storage import Account, StoredRecord, SyncStorage, TokenRecord


@pytest.fixture
def store(sync_db: str) -> Iterator[Any]:
    s = open_storage(sync_db)
    yield s
    s.close()


def rec(rid: str, text: str = "x", resource: str = "message", deleted: bool = False) -> StoredRecord:
    data = None if deleted else {"id": rid, "sessionId": "s1", "content": text}
    return StoredRecord(resource, rid, data, deleted, "h1", "h1", session_id="s1")


def test_open_storage_picks_by_url(sync_db: str, store: Any) -> None:
    """A postgresql:// URL opens PostgreSQL, anything else a SQLite file."""
    assert type(store).__name__ == ("PostgresSyncStorage" if "://" in sync_db else "SQLiteSyncStorage")
    store.ping()


def test_migrations_are_versioned_and_reopening_keeps_data(sync_db: str, store: Any) -> None:
    """The schema is at the newest version; opening again applies nothing and keeps every record."""
    assert store.schema_version() == MIGRATIONS[-1][0]
    with store.transaction("sp") as txn:
        txn.put(rec("m1"))
    store.close()
    again = open_storage(sync_db)
    try:
        assert again.schema_version() == MIGRATIONS[-1][0]
        assert [r.id for r in again.changes("sp", 0, 10)] == ["m1"]
    finally:
        again.close()


def test_put_numbers_the_feed_without_gaps_per_space(store: Any) -> None:
    """Each space has its own gap-free seq; replacing a record moves it to the feed's end."""
    with store.transaction("a") as txn:
        assert [txn.put(rec("m1")), txn.put(rec("m2"))] == [1, 2]
    with store.transaction("b") as txn:
        assert txn.put(rec("m1")) == 1
    with store.transaction("a") as txn:
        assert txn.put(rec("m1", "y")) == 3
        assert txn.cursor() == 3
    feed = store.changes("a", 0, 10)
    assert [(r.id, r.seq) for r in feed] == [("m2", 2), ("m1", 3)]
    assert feed[1].data == {"id": "m1", "sessionId": "s1", "content": "y"}
    assert [r.id for r in store.changes("a", 2, 10)] == ["m1"]
    assert (store.cursor("a"), store.cursor("b"), store.cursor("none")) == (3, 1, 0)


def test_a_failed_transaction_leaves_nothing(store: Any) -> None:
    """An error inside the block rolls back records, cursor and applied ops."""
    with pytest.raises(RuntimeError), store.transaction("a") as txn:
        txn.put(rec("m1"))
        txn.remember_op("o1", "dev", 1)
        raise RuntimeError("boom")
    assert store.changes("a", 0, 10) == [] and store.cursor("a") == 0
    with store.transaction("a") as txn:
        assert not txn.op_seen("o1")


def test_applied_ops_are_remembered_per_space(store: Any) -> None:
    """op_seen is true after remember_op, in that space only."""
    with store.transaction("a") as txn:
        txn.remember_op("o1", "dev", 1)
    with store.transaction("a") as txn:
        assert txn.op_seen("o1") and not txn.op_seen("o2")
    with store.transaction("b") as txn:
        assert not txn.op_seen("o1")
    assert store.applied_op_count("a") == 1


def test_stored_bytes_follow_puts_replacements_and_tombstones(store: Any) -> None:
    """A space's byte count is the size of its current records' data."""
    with store.transaction("a") as txn:
        txn.put(rec("m1", "x" * 100))
        after_one = txn.stored_bytes()
        txn.put(rec("m2", "x" * 100))
        assert txn.stored_bytes() == 2 * after_one > 200
        txn.put(rec("m2", deleted=True))
        assert txn.stored_bytes() == after_one
    assert store.stored_bytes("a") == after_one


def test_usage_counts_per_minute(store: Any) -> None:
    """count_ops returns the count before adding; a new minute starts from zero."""
    with store.transaction("a") as txn:
        assert txn.count_ops(100, 5) == 0
        assert txn.count_ops(100, 3) == 5
    with store.transaction("a") as txn:
        assert txn.count_ops(100, 1) == 8
        assert txn.count_ops(101, 1) == 0


def test_accounts_and_tokens_round_trip(store: Any) -> None:
    """Accounts by name, tokens by id with their account, revocation kept."""
    acct = Account("acc1", "alice", "space-alice", 5)
    store.add_account(acct)
    assert store.account("alice") == acct and store.account("bob") is None
    tok = TokenRecord("tid1", "acc1", "laptop", "ab" * 32, 6)
    store.add_token(tok)
    assert store.token("tid1") == (tok, acct)
    assert store.tokens("acc1") == [tok]
    assert store.revoke_token("tid1", 7) and not store.revoke_token("nope", 7)
    assert store.token("tid1")[0].revoked_at == 7
    assert store.set_account_quota("alice", 10, None)
    assert store.account("alice").ops_per_minute == 10
    with pytest.raises(DuplicateId):  # the name is unique
        store.add_account(Account("acc2", "alice", "space-2", 5))


def _push_many(storages: list[SyncStorage], space: str, n_threads: int, ops_each: int) -> list[str]:
    """Threads push overlapping op_ids through several storages (instances) at once."""
    errors: list[str] = []
    barrier = threading.Barrier(n_threads)

    def worker(t: int) -> None:
        service = SyncService(storages[t % len(storages)])
        barrier.wait()
        for i in range(ops_each):
            # every op is pushed by two threads: idempotency across instances
            k = (t // 2) * ops_each + i
            op = {
                "op_id": f"op-{k}",
                "type": "create",
                "resource": "session",
                "id": f"s{k}",
                "data": {"title": f"t{k}"},
                "timestamp": 1,
                "hlc": f"{1000 + k:013d}-0000-dev",
                "attempts": 0,
            }
            try:
                service.push(space, {"device_id": f"dev-{t}", "ops": [op]})
            except Exception as e:  # noqa: BLE001
                errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return errors


def test_concurrent_pushes_from_many_instances_stay_gap_free_and_exactly_once(sync_db: str) -> None:
    """Eight threads over two storage instances: every op applied once, seqs 1..N with no gap."""
    storages = [open_storage(sync_db), open_storage(sync_db)]
    try:
        errors = _push_many(storages, "shared", 8, 15)
        assert errors == []
        feed = storages[0].changes("shared", 0, 1000)
        assert [r.seq for r in feed] == list(range(1, 61))
        assert sorted(r.id for r in feed) == sorted(f"s{k}" for k in range(60))
        assert storages[1].applied_op_count("shared") == 60
    finally:
        for s in storages:
            s.close()


def test_an_old_sqlite_file_migrates_without_losing_data(tmp_path: Path) -> None:
    """A file written by the first schema (no version table) opens, keeps its feed and can grow."""
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    for sql in MIGRATIONS[0][1]:
        conn.execute(sql)
    conn.execute("INSERT INTO spaces VALUES ('sp', 1)")
    conn.execute("INSERT INTO records VALUES ('sp','message','m1','{\"a\":1}',0,'h','h','{}','s1',1)")
    conn.commit()
    conn.close()
    store = open_storage(str(path))
    try:
        assert [(r.id, r.data) for r in store.changes("sp", 0, 10)] == [("m1", {"a": 1})]
        assert store.stored_bytes("sp") == len('{"a":1}')
        with store.transaction("sp") as txn:
            assert txn.put(rec("m2")) == 2
    finally:
        store.close()
