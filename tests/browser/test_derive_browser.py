"""The page derives the keyword index next to the store (web/js/derive.js: the records go
from IndexedDB to DuckDB-Wasm, Python gives only the terms). Its tables must hold exactly
what Python's own derivation (``keywords.stream_messages`` over the records) makes of
the same store, for texts of every kind the tokeniser treats apart."""

from __future__ import annotations

import pytest

from conftest import unique_name

pytestmark = pytest.mark.browser

# texts that exercise each rule of tokenize.words: punctuation, apostrophes, numbers with
# points and commas, underscores, long "words", case, accents, other scripts, CJK runs
TEXTS = [
    "Hello, World. Don't panic: it's 1,000.5 km (or 3.14159) away!",
    "e-mail foo_bar__baz 'quoted' words'' ''lead trail'' a.b.c 1.2.3 1,2,3 ,5 5, .5 5.",
    "Tabs\tand\nnewlines\r\nand\x0bvertical\x0cfeed \x1cfile\x1dseparators\x1e\x1f",
    "x" * 70 + " " + "ab" * 40 + "9" * 80 + " supercalifragilisticexpialidocious",
    "PAINTING painted paints Painter's running runs ran RUNNER'S",
    "Café naïve résumé Straße STRASSE ﬁnance Ｆｕｌｌ１２３",
    "東京タワーに行きました 京 한국어 텍스트 カタカナ",
    "Привет, мир! Καλημέρα κόσμε مرحبا بالعالم",
    "emoji 🙂 mixed ascii 42 and — dashes “smart quotes” don’t",
    "",
    "   ",
    "!!! ??? ...",
    "numbers 007 0.0 10,000,000 1,5 version 2.0.1-beta",
    "constructor toString valueOf hasOwnProperty __proto__ proto prototype",
]

FILL = """
import chatmem
mem = await chatmem.open(NAME)
texts = TEXTS
sids = []
for k in range(3):
    s = await mem.sessions.create(title=f"s{k}")
    sids.append(s.session_id)
    await mem.messages.append_many(s.session_id, [
        {"role": ("user", "assistant")[i % 2], "content": t + f" session{k} item{i}", "token_count": i, "model": ("m1" if i % 3 else None)}
        for i, t in enumerate(texts)])
# content parts: text and code parts, an image part, an empty list
await mem.messages.append(sids[0], "user", [{"type": "text", "text": "Parts: first PART"},
                                             {"type": "image", "url": "data:x"},
                                             {"type": "code", "code": "def f(): return 1_000"}])
await mem.messages.append(sids[1], "user", [])
big = await mem.sessions.create(title="big")
await mem.messages.append_many(big.session_id, [{"role": "user", "content": f"{TEXTS[i % len(TEXTS)]} big{i}"}
                                                for i in range(BIG)])
await mem.close()
len(sids)
"""

COMPARE = """
import chatmem
from chatmem.index import QueryIndex
from chatmem.index.search import search
from chatmem.index.reading import each_message
from chatmem.runtime.page import DuckDBWasmEngine
mem = await chatmem.open(NAME)
store = mem.store
metas = await store.all_sessions()

# how many runs sorted by (tid, doc) the stored postings make, and whether each
# term's docs still come in order (the runs follow each other in doc order)
def runs(pairs):
    last = {}
    ordered = True
    for tid, doc in pairs:
        ordered = ordered and last.get(tid, -1) < doc
        last[tid] = doc
    return [1 + sum(1 for a, b in zip(pairs, pairs[1:]) if b < a), ordered]

async def tables(index):
    q = index.engine.execute
    return {
        "messages": await q("SELECT * FROM messages ORDER BY id"),
        "docs": await q("SELECT message_id, session_id, role, created_at, doc_len FROM docs ORDER BY message_id"),
        "postings": await q("SELECT t.term, d.message_id, p.tf FROM postings p JOIN terms t ON t.tid = p.tid "
                            "JOIN docs d ON d.doc = p.doc ORDER BY t.term, d.message_id"),
        "terms": await q("SELECT term, df FROM terms ORDER BY term"),
        "message_columns": list((await q("SELECT * FROM messages LIMIT 1"))[0]),
        "stats": await q("SELECT n, total FROM stats"),
        "dense": await q("SELECT count(*) AS n, min(doc) AS lo, max(doc) AS hi, count(DISTINCT doc) AS k FROM docs"),
        # the postings as stored (no ORDER BY): how many runs sorted by (tid, doc) they make
        "stored_runs": runs([(r["tid"], r["doc"]) for r in await q("SELECT tid, doc FROM postings")]),
    }

out = {}
# Python's own; the page's with every posting held and counting-sorted in JS; with none
# held (DuckDB sorts); with the held ones given up part way (more than SORT_MAX)
# and into an OPFS file, its loads in transactions of about 120 messages, its stage made
# `messages` as a large one is (past SORT_MESSAGES_MAX, unsorted: renamed, not copied)
# and ("-later") with the texts left out, `messages` filled afterwards a few messages a step
from chatmem.index import fill, keywords
from chatmem.runtime.page import duckdb_wasm
FILE = "derive-" + NAME + ".duckdb"
for way, sort_max in (("python", None), ("page", 10**9), ("page-unsorted", 0), ("page-overflow", SORT_MAX),
                      ("page-file", 0), ("page-later", 10**9), ("page-later-file", SORT_MAX)):
    path = {"page-file": FILE, "page-later-file": "later-" + FILE}.get(way)
    engine = await DuckDBWasmEngine.open("opfs://" + path if path else None)
    index = QueryIndex(engine)
    await index.setup()
    duckdb_wasm.TEXTS_LATER_FROM, fill.FILL_STEP = (0, 37) if "later" in way else (300_000, 40_000)
    d = engine.derivation(store, [(m["sessionId"], int(m.get("messageCount") or 0)) for m in metas], chunk=CHUNK,
                          sort_max=sort_max or 0, batch=BATCH, transaction=120)
    assert d is not None
    keywords.SORT_MESSAGES_MAX = 0 if way == "page-file" else 250_000
    await index.rebuild(metas, each_message(store, metas) if way == "python" else d)
    keywords.SORT_MESSAGES_MAX = 250_000
    filling = index.fill is not None and index.fill.filling
    assert await index.messages_filled()
    duckdb_wasm.TEXTS_LATER_FROM, fill.FILL_STEP = 300_000, 40_000
    out[way] = await tables(index)
    out[way]["filled"] = [filling, index.fill.filled if index.fill else None]
    out[way]["hits"] = [[h.message.id for h in await search(index, q, limit=20)] for q in
                        ("painting", "don't", "1000.5", "strasse", "東京", "京", "привет", "parts code", "big7")]
    out[way]["ms"] = sorted(index.rebuild_ms)
    out[way]["tables"] = sorted(r["name"] for r in await engine.execute("SELECT table_name AS name FROM duckdb_tables()"))
    out[way]["in_file"] = (await engine.execute(
        "SELECT path IS NOT NULL AS f FROM duckdb_databases() WHERE database_name = current_database()"))[0]["f"]
    await index.close()
# every load was committed: the file opened again holds them all
engine = await DuckDBWasmEngine.open("opfs://" + FILE)
out["page-file"]["reopened"] = await engine.execute(
    "SELECT (SELECT count(*) FROM messages) AS messages, (SELECT count(*) FROM postings) AS postings")
await engine.close()
await mem.close()
await duckdb_wasm.opfs_remove(FILE)
await duckdb_wasm.opfs_remove("later-" + FILE)
out
"""


def test_the_page_derivation_equals_pythons(page: object) -> None:
    name = unique_name("derive")
    env = f"NAME = {name!r}\nTEXTS = {TEXTS!r}\nBIG = 130\nCHUNK = 50\nSORT_MAX = 1200\nBATCH = 300\n"
    assert page.py(env + FILL) == 3  # type: ignore[attr-defined]
    got = page.py(env + COMPARE, timeout=300_000)  # type: ignore[attr-defined]
    py, js = got["python"], got["page"]
    assert py["stats"][0]["n"] == 3 * len(TEXTS) + 2 + 130
    assert got["page-file"]["in_file"] and not got["page"]["in_file"]
    assert got["page-file"]["tables"] == got["page"]["tables"] == py["tables"]  # no stage left behind
    assert got["page-file"]["reopened"] == [
        {"messages": len(py["messages"]), "postings": len(py["postings"])}
    ]
    for way in ("page", "page-unsorted", "page-overflow", "page-file", "page-later", "page-later-file"):
        assert py["dense"] == got[way]["dense"] and got[way]["dense"][0]["lo"] == 0, way
        for table in (
            "messages",
            "message_columns",
            "docs",
            "terms",
            "stats",
            "postings",
            "hits",
        ):
            assert got[way][table] == py[table], (way, table)
        if way not in ("page-overflow", "page-later-file"):
            assert got[way]["stored_runs"] == [1, True], way
    assert py["stored_runs"] == [1, True]
    # past SORT_MAX held, the page loads them in runs each sorted, in doc order, none sorted again
    runs, ordered = got["page-overflow"]["stored_runs"]
    assert 1 < runs <= len(py["postings"]) // 1200 + 1 and ordered
    # the overflow case holds the first chunks (a few hundred postings each), then gives up
    assert len(py["postings"]) > 1200
    # with the texts left out, the derivation ended with `messages` still to fill
    messages = len(py["messages"])
    assert got["page-later"]["filled"] == got["page-later-file"]["filled"] == [True, messages]
    assert got["page"]["filled"] == [False, None]
    # the page's way ran: its own phases, not the Python reading's
    assert "read" in js["ms"] and "stems" in js["ms"] and "tokenise" not in js["ms"]
    assert "tokenise" in py["ms"]
    # the rules were exercised: stems, CJK bigrams, a number kept whole, a cut long word
    terms = {r["term"] for r in py["terms"]}
    assert {"paint", "東京", "京タ", "1000.5", "dont", "x" * 64, "constructor", "proto"} <= terms


BACKLOG = """
async ([name]) => {
  const bridge = window.chatmem.bridge;
  const db = await bridge.open(name);
  const metas = await db.db.getAll("sessions");
  let loaded = 0;
  // an engine whose appends are slower than reading and counting (as into an OPFS file)
  const engine = { async intoFile() { return false; }, async arrowBytes() { return new Uint8Array(1); },
    async appendArrow({ table }) {
      if (table !== "messages_stage") return;
      await new Promise((resolve) => setTimeout(resolve, 40));
      loaded++;
    }, async appendRows() {} };
  const d = bridge.derivation(db, engine, JSON.stringify({
    sessions: metas.map((m) => [m.sessionId, m.messageCount]), columns: [["content", ""]], stage: "messages_stage", chunk: 10, sortMax: 0 }));
  let fed = 0, ahead = 0;
  for (let chunk; (chunk = await d.next()) !== null;) {
    const hard = chunk.hard.map((t) => t.split(/\\s+/).filter(Boolean));
    const terms = {};
    for (const w of [...chunk.words, ...hard.flat()]) terms[w] = [w];
    await d.feed({ terms, hard });
    fed++;
    ahead = Math.max(ahead, fed - loaded);
  }
  const ms = await d.finish();
  db.db.close();
  return { fed, loaded, ahead, waited: ms.wait > 0 };
}
"""


def test_the_page_derivation_waits_for_a_slow_engine(page: object) -> None:
    """Reading and counting run ahead of DuckDB's appends by two chunks at most: a queue
    without a bound held every chunk's texts and columns in memory until DuckDB took them."""
    name = unique_name("derive-backlog")
    page.py(
        f"import chatmem\nmem = await chatmem.open({name!r})\n"  # type: ignore[attr-defined]
        "s = await mem.sessions.create(title='t')\n"
        "await mem.messages.append_many(s.session_id, [{'role': 'user', 'content': f'word{i} and more words'}"
        " for i in range(200)])\nawait mem.close()\n0"
    )
    got = page.page.evaluate(BACKLOG, [name])  # type: ignore[attr-defined]
    assert got["fed"] == got["loaded"] == 20, got
    assert got["ahead"] <= 2 and got["waited"], got


STEMS = """
async (words) => {
  const { asciiTerm, loadStemmer } = await import("/js/words.js");
  await loadStemmer();
  return words.map(asciiTerm);
}
"""


def test_the_page_stems_as_python_does(page: object) -> None:
    """The page stems ASCII words with Snowball's generated JavaScript (web/vendor/snowball),
    Python with the snowballstemmer wheel: the same terms for every ASCII word of the shared
    conversations and fixtures, for stems and suffixes combined at random, and for the
    words stemming leaves alone (shorter than 3, with digits) or cuts (over 64)."""
    import random
    import re

    from chatmem.text.tokenize import terms_of_word, words
    from shared_texts import real_texts

    vocab = {w for text in real_texts() if text.isascii() for w in words(text)}
    rng = random.Random(7)
    suffixes = [
        "",
        "s",
        "es",
        "ed",
        "ing",
        "ly",
        "ies",
        "ied",
        "eed",
        "eedly",
        "ingly",
        "ational",
        "ization",
        "fulness",
        "ousness",
        "iveness",
        "ement",
        "ment",
        "ogist",
        "ogy",
        "abli",
        "alli",
        "entli",
        "li",
        "al",
        "ance",
        "ence",
        "er",
        "ic",
        "able",
        "ible",
        "ant",
        "ent",
        "ism",
        "ate",
        "iti",
        "ous",
        "ive",
        "ize",
        "y",
        "'s",
        "s'",
    ]
    bases = sorted(w for w in vocab if re.fullmatch(r"[a-z]{2,12}", w))
    for _ in range(20_000):
        w = rng.choice(bases) + rng.choice(suffixes) + rng.choice(suffixes)
        vocab.add(w.replace("'", ""))
    vocab |= {
        "a",
        "ab",
        "y",
        "yy",
        "eed",
        "sky",
        "skis",
        "news",
        "dying",
        "lying",
        "tying",
        "idly",
        "gently",
        "ugly",
        "early",
        "only",
        "singly",
        "inning",
        "outing",
        "canning",
        "herring",
        "earring",
        "proceed",
        "exceed",
        "succeed",
        "1st",
        "2nd",
        "mp3",
        "x" * 70,
        "ing" * 30,
        "generalization" * 5,
    }
    vocab.discard("")
    ordered = sorted(vocab)
    got = page.page.evaluate(STEMS, ordered)  # type: ignore[attr-defined]
    want = [terms_of_word(w)[0] for w in ordered]
    assert len(ordered) > 20_000
    wrong = [(w, a, b) for w, a, b in zip(ordered, got, want, strict=True) if a != b]
    assert wrong == [], wrong[:20]


SCAN = """
async (texts) => {
  const { WordTable } = await import("/js/words.js");
  const table = new WordTable();
  for (const w of ["apple", "dont", "1000.5", "x1"]) table.set(w, 7);
  // each word as the empty table answers it (itself) and as the table above does (7 if known)
  return texts.map((t) => [new WordTable().scan(t, new Set()), table.scan(t, new Set())]);
}
"""


def test_the_page_cuts_ascii_text_into_pythons_words(page: object) -> None:
    """``WordTable.scan`` (the derivation's words of an ASCII text, read straight from its
    characters) gives Python's ``tokenize.words`` for random text heavy in what the word
    rules treat apart: points and commas between digits, apostrophes, case, separators."""
    import random

    from chatmem.text.tokenize import words

    rng = random.Random(11)
    alphabet = "aAbZy19 0.,.'',x \t-_\n\x00~"
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(30))) for _ in range(20_000)]
    texts += ["Don't stop: 1,000.5 km, e.g. a.b.c 1.2.3 1,2,3 ,5 5, .5 5. it's x1'a 12's 1'2.5 APPLE'S"]
    got = page.page.evaluate(SCAN, texts)  # type: ignore[attr-defined]
    known = {"apple", "dont", "1000.5", "x1"}
    for text, (plain, coded) in zip(texts, got):
        want = words(text)
        assert plain == want, text
        assert coded == [7 if w in known else w for w in want], text
