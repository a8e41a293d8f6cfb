"""check_read_only: one read-only statement passes, everything else is refused clearly."""

from __future__ import annotations

import pytest

from chatmem.errors import ReadOnlySQLError, ValidationError
from chatmem.index import DuckDBEngine, QueryIndex
from chatmem.index.sqlguard import check_read_only, strip_sql
from search_checks import hostile_sql

ALLOWED = [
    "SELECT 1",
    "select * from messages where text = 'a;b';",
    "SELECT 1 ;  ;",
    "WITH x AS (SELECT 1 AS a) SELECT a FROM x",
    "FROM messages LIMIT 1",
    "(SELECT 1) UNION ALL (SELECT 2)",
    "SELECT coalesce(title, '') AS t, 'drop table x; insert' AS s FROM sessions",
    'SELECT "set", "load" FROM t',
    "SELECT 1 -- ; DROP TABLE messages",
    "SELECT /* ; DELETE /* nested */ still comment */ 1",
    "SELECT $$ ; DROP TABLE x $$ AS s",
    "SELECT $tag$ it's; here $tag$",
    "SELECT E'it\\'s; DROP TABLE x' AS s",
    "EXPLAIN SELECT 1",
    "DESCRIBE messages",
    "VALUES (1), (2)",
    "SHOW TABLES",
]

REJECTED = [
    ("INSERT INTO messages (id) VALUES ('x')", "INSERT"),
    ("insert into messages values (1)", "INSERT"),
    ("UPDATE sessions SET title = 'x'", "UPDATE"),
    ("DELETE FROM messages", "DELETE"),
    ("DROP TABLE messages", "DROP"),
    ("CREATE TABLE t (a INT)", "CREATE"),
    ("ALTER TABLE messages ADD COLUMN x INT", "ALTER"),
    ("ATTACH 'other.db' AS o", "ATTACH"),
    ("DETACH o", "DETACH"),
    ("COPY messages TO 'x.csv'", "COPY"),
    ("INSTALL fts", "INSTALL"),
    ("LOAD fts", "LOAD"),
    ("PRAGMA database_list", "PRAGMA"),
    ("SET threads = 1", "SET"),
    ("CALL pragma_version()", "CALL"),
    ("EXPORT DATABASE 'dir'", "EXPORT"),
    ("IMPORT DATABASE 'dir'", "IMPORT"),
    ("SELECT 1; DROP TABLE messages", "one statement"),
    ("SELECT 1; SELECT 2", "one statement"),
    ("SELECT 'a;b'; DELETE FROM messages", "one statement"),
    ("/* hi */ DROP TABLE x", "DROP"),
    ("-- c\nDELETE FROM x", "DELETE"),
    ("WITH x AS (SELECT 1) INSERT INTO t SELECT * FROM x", "INSERT"),
    ("WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d", "DELETE"),
    ("EXPLAIN ANALYZE SELECT 1", "EXPLAIN ANALYZE"),
    ("SELECT * FROM read_csv('/etc/passwd')", "read_csv"),
    ("SELECT * FROM '/etc/passwd'", "file"),
    ("SELECT * FROM messages, 'data.csv'", "file"),
    ("SELECT * FROM messages JOIN 'x.parquet' USING (id)", "file"),
    ("SELECT * FROM glob('*')", "glob"),
    ("SELECT * FROM query('DROP TABLE x')", "query"),
    ("SELECT E'\\' ; DROP TABLE x", "unterminated"),
    ("SELECT 'unterminated", "unterminated"),
    ("", "empty"),
    ("  ;  ", "empty"),
]


@pytest.mark.parametrize("sql", ALLOWED)
def test_read_only_queries_pass(sql):
    """One read-only statement passes, whatever its literals and comments hold."""
    check_read_only(sql)


@pytest.mark.parametrize("sql,why", REJECTED)
def test_everything_else_is_refused_with_a_clear_message(sql, why):
    """Writes, side effects, file reads and stacked statements raise ReadOnlySQLError naming the cause."""
    with pytest.raises(ReadOnlySQLError) as e:
        check_read_only(sql)
    assert why.lower() in str(e.value).lower()
    assert isinstance(e.value, ValidationError)


def test_non_string_is_refused():
    """A non-string query is refused before any parsing."""
    with pytest.raises(ReadOnlySQLError):
        check_read_only(None)  # type: ignore[arg-type]


def test_strip_sql_blanks_literals_and_comments():
    """Literals become '' and comments a space, so only structure is left to inspect."""
    assert strip_sql("SELECT 'x;y', \"a b\" -- z\nFROM t /* w */") == "SELECT '', \"\"  FROM t  "


async def test_every_rejected_statement_would_have_run_and_the_index_is_unharmed():
    """The refused statements are real DuckDB statements; after refusing them the index is as it was."""

    async def run():
        index = QueryIndex(DuckDBEngine())
        await index.apply(
            "session-created", "s", {"sessionId": "s", "title": "t", "createdAt": 1, "updatedAt": 1}
        )
        await index.apply(
            "messages-appended",
            "s",
            [{"id": "m", "sessionId": "s", "seq": 0, "role": "user", "content": "hello", "createdAt": 2}],
        )
        before = await index.counts()
        for sql in [
            "DROP TABLE messages",
            "DELETE FROM postings",
            "INSERT INTO sessions (session_id) VALUES ('x')",
            "SELECT 1; DROP TABLE docs",
            "ATTACH ':memory:' AS o",
            "COPY messages TO '/tmp/chatmem-x.csv'",
        ]:
            with pytest.raises(ReadOnlySQLError):
                await index.sql(sql)
        assert await index.counts() == before
        assert await index.sql("SELECT text FROM messages") == [{"text": "hello"}]
        # and a guard-approved query with a ';' in a literal still runs
        assert await index.sql("SELECT 'a;b' AS s") == [{"s": "a;b"}]
        await index.close()

    await run()


def test_what_the_guard_passes_duckdb_reads_as_one_read():
    """Every text the guard lets through is, for DuckDB's own parser, one read (or no valid
    SQL at all): the guard and DuckDB never see different statements in the same text."""
    import duckdb

    con = duckdb.connect()
    passed = 0
    for sql in hostile_sql():
        try:
            check_read_only(sql)
        except ReadOnlySQLError:
            continue
        passed += 1
        try:
            statements = con.extract_statements(sql)
        except duckdb.Error:
            continue  # DuckDB cannot parse it: nothing would run
        kinds = [s.type.name for s in statements]
        assert kinds in (["SELECT"], ["EXPLAIN"]), f"{sql!r}: the guard saw one read, DuckDB {kinds}"
    assert passed > 1000  # the pieces also make honest reads (comments, literals), which pass


async def test_the_second_wall_holds_where_the_guard_is_bypassed():
    """``execute_read_only`` alone refuses a write or a second statement and leaves no
    transaction open; a transaction statement cannot end its read-only transaction."""

    async def run():
        engine = DuckDBEngine()
        await engine.execute("CREATE TABLE t (a INT)")
        await engine.execute("INSERT INTO t VALUES (1)")
        for bad in [
            "DROP TABLE t",
            "DELETE FROM t",
            "CREATE TABLE u (a INT)",
            "SELECT 1; DROP TABLE t",
            "COMMIT",
            "CREATE TEMP TABLE u (a INT)",
            "SET threads = 1",
            "CHECKPOINT",
        ]:
            with pytest.raises(ReadOnlySQLError):
                await engine.execute_read_only(bad)
        assert await engine.execute_read_only("SELECT a FROM t WHERE a = ?", [1]) == [{"a": 1}]
        assert await engine.execute("SELECT count(*) AS n FROM t") == [{"n": 1}]
        await engine.execute("INSERT INTO t VALUES (2)")  # no read-only transaction left behind
        await engine.close()

    await run()
