"""A rebuild (term ids numbered in Python, integers counted in SQL) derives exactly the
keyword tables that appending the same messages one batch at a time derives (terms
stemmed in Python, strings counted in SQL): the same terms and document frequencies,
the same postings (term, message, tf, length), the same lengths and totals. Run over
the LoCoMo conversations (real text: punctuation, apostrophes, numbers) and texts in
every script the tokeniser treats apart."""

from __future__ import annotations

import json
from typing import Any

from chatmem.index import DuckDBEngine, QueryIndex
from chatmem.index.keywords import TermIds
from chatmem.text.tokenize import tokens, words
from shared_texts import shared_dir

EXTRA = [
    "東京タワーに行った 猫 我的猫abc",
    "안녕하세요 Straße café naïve",
    "машины автомобили Ελληνικά κείμενα",
    "ＦＵＬＬ　ｗｉｄｔｈ １２３",
    "Don't STOP at 1,000.50, 3.14 or 2,3!",
    "",
    "!!! ...",
    "x" * 100 + " tail",
    "e.g. a.b x..y 'quoted' it's",
    "مرحبا بالعالم",
    "emoji 🙂 text — dash “quotes”",
]


def corpus() -> list[tuple[str, str]]:
    """(session id, text) of every LoCoMo turn, then the extra texts."""
    out = []
    for f in sorted((shared_dir() / "quality" / "locomo-dev").glob("*.json")):
        conv = json.loads(f.read_text("utf-8"))
        n = 1
        while f"session_{n}" in conv:
            for turn in conv[f"session_{n}"] or []:
                out.append((f"{f.stem}-{n}", f"{turn['speaker']}: {turn['text']}"))
            n += 1
    out.extend(("extra", t) for t in EXTRA)
    return out


def records(items: list[tuple[str, str]]) -> list[dict[str, Any]]:
    seqs: dict[str, int] = {}
    out = []
    for i, (sid, text) in enumerate(items):
        seq = seqs[sid] = seqs.get(sid, -1) + 1
        out.append(
            {
                "id": f"m{i:06d}",
                "sessionId": sid,
                "seq": seq,
                "role": ("user", "assistant")[i % 2],
                "createdAt": 1_700_000_000_000 + i,
                "content": text,
            }
        )
    return out


async def tables(index: QueryIndex) -> list[Any]:
    return [
        await index.sql("SELECT term, df FROM terms ORDER BY term"),
        await index.sql(
            "SELECT t.term, d.message_id, p.tf FROM postings p JOIN terms t ON t.tid = p.tid "
            "JOIN docs d ON d.doc = p.doc ORDER BY t.term, d.message_id"
        ),
        await index.sql(
            "SELECT message_id, session_id, role, created_at, doc_len FROM docs ORDER BY message_id"
        ),
        await index.sql("SELECT n, total FROM stats"),
    ]


async def test_rebuild_derives_the_tables_appends_derive() -> None:
    """LoCoMo plus every script: the rebuilt index's keyword tables equal the appended one's."""
    recs = records(corpus())
    assert len(recs) > 2000

    appended = QueryIndex(DuckDBEngine())
    by_session: dict[str, list[dict[str, Any]]] = {}
    for r in recs:
        by_session.setdefault(r["sessionId"], []).append(r)
    for k, (sid, msgs) in enumerate(by_session.items()):
        await appended.apply(
            "session-created",
            sid,
            {"sessionId": sid, "title": sid, "createdAt": 0, "updatedAt": 0, "messageCount": len(msgs)},
        )
        step = 7 if k % 4 == 0 else len(msgs)  # a quarter of them in several appends, each merged
        for i in range(0, len(msgs), step):
            await appended.apply("messages-appended", sid, msgs[i : i + step])
    rebuilt = QueryIndex(DuckDBEngine())
    await rebuilt.rebuild(
        [
            {"sessionId": s, "title": s, "createdAt": 0, "updatedAt": 0, "messageCount": len(m)}
            for s, m in by_session.items()
        ],
        iter(recs),
    )
    try:
        a, b = await tables(appended), await tables(rebuilt)
    finally:
        await appended.close()
        await rebuilt.close()
    assert a[0] and a[1] and a == b


def test_term_ids_code_each_word_as_its_terms() -> None:
    """Decoding a message's term ids gives back ``tokens`` of its text, for every text."""
    ids = TermIds()
    for _, text in corpus():
        code = ids.code(words(text))
        by_id = {i: t for t, i in ids.tids.items()}
        assert [by_id[int(c)] for c in code.split()] == tokens(text), text


async def test_a_failing_read_during_a_rebuild_leaves_the_engine_usable(monkeypatch) -> None:
    """The store failing while a chunk loads: the error comes out, the engine is free,
    and the next rebuild derives the same tables as appends."""
    import chatmem.index.query_index as index_module

    monkeypatch.setattr(index_module, "_CHUNK", 10)
    recs = records([("s", f"message number {i} about pizza, don't stop") for i in range(35)])
    session = [{"sessionId": "s", "title": "s", "createdAt": 0, "updatedAt": 0, "messageCount": len(recs)}]

    def failing():  # type: ignore[no-untyped-def]
        for i, r in enumerate(recs):
            if i == 25:
                raise OSError("the store went away")
            yield r

    idx = QueryIndex(DuckDBEngine())
    appended = QueryIndex(DuckDBEngine())
    try:
        try:
            await idx.rebuild(session, failing())
        except OSError as e:
            assert "went away" in str(e)
        else:
            raise AssertionError("the rebuild did not fail")
        await idx.rebuild(session, iter(recs))
        await appended.apply("session-created", "s", session[0])
        await appended.apply("messages-appended", "s", recs)
        a, b = await tables(idx), await tables(appended)
    finally:
        await idx.close()
        await appended.close()
    assert a == b and len(a[2]) == 35
