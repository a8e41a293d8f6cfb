"""The shipped embedding model in the page (Pyodide, network blocked): fetched from the
site on first use, the same vectors as on CPython, and meaning-aware search over IndexedDB."""

from __future__ import annotations

import pytest

from chatmem.embedding import StaticEmbedder, find_model_file
from conftest import Page, unique_name

pytestmark = pytest.mark.browser

TEXTS = [
    "I finally bought a new car, a red one with leather seats",
    "automobile",
    "Caroline went to the LGBTQ support group on 7 May",
    "東京タワー Straße café 😀",
]


def test_same_vectors_in_the_page_as_on_cpython(page: Page) -> None:
    """Every text gives the same vector in Pyodide as on CPython (to 1e-5; in fact bit for bit)."""
    path = find_model_file()
    assert path is not None, "the model is built with dist/"
    here = StaticEmbedder.load(path)
    there = page.py(f"""
from chatmem.embedding import LocalEmbedder
emb = LocalEmbedder()
await emb.embed(["warm"])
[emb.embed_one(t) for t in {TEXTS!r}]
""")
    for text, got in zip(TEXTS, there):
        want = here.embed_one(text)
        assert len(got) == len(want) == 384
        assert max(abs(a - b) for a, b in zip(got, want)) <= 1e-5, text


def test_batches_summed_in_js_are_bit_for_bit_cpython(page: Page) -> None:
    """``embed`` of a batch sums the token rows in JS, in a worker of their own
    (web/js/token-sums-worker.js): every vector equals CPython's exactly, also for no
    token, special tokens only and past 512 tokens."""
    path = find_model_file()
    assert path is not None, "the model is built with dist/"
    here = StaticEmbedder.load(path)
    texts = [*TEXTS, "", "[CLS] [SEP]", " ".join(f"word{i} zqx{i}" for i in range(600))] * 3
    there = page.py(f"""
from chatmem.embedding import LocalEmbedder
emb = LocalEmbedder()
vecs = await emb.embed({texts!r})
import js
workers = [e.name for e in js.performance.getEntriesByType("resource") if "token-sums-worker" in e.name]
[emb._sums is not None, bool(workers), vecs]
""")
    in_js, in_worker, vecs = there
    assert in_js, "the page sums in JS"
    assert in_worker, "the sums run in their worker"
    assert vecs == [here.embed_one(t) for t in texts]


def test_default_embedder_finds_a_synonym_in_the_page(page: Page) -> None:
    """Semantic search with the default embedder in the page: "automobile" finds the car
    message first, and the calibrated 0.75 threshold keeps only the paraphrase."""
    db = unique_name("sem")
    out = page.py(f"""
import chatmem
mem = await chatmem.open({db!r})
s = await mem.sessions.create(title="cars")
for t in ["I finally bought a new car, a red one with leather seats", "My grandmother bakes bread every Sunday",
          "The quarterly tax report is due on Friday", "Please water the plants while I am away"]:
    await mem.messages.append(s.session_id, "user", t)
hits = await mem.search("automobile", mode="semantic", limit=4)
strict = await mem.search("I bought a new car", mode="semantic", limit=4, threshold=0.75)
hyb = await mem.search("new automobile", mode="hybrid", limit=2)
res = [mem.index.embedder.model, [h.message.text for h in hits], [h.message.text for h in strict],
       hyb[0].message.text, sorted(hyb[0].breakdown)]
await mem.close()
res
""")
    model, ranked, strict, hyb_top, parts = out
    assert model.startswith("minilm-l6")
    assert ranked[0].startswith("I finally bought a new car")
    assert strict == ["I finally bought a new car, a red one with leather seats"]
    assert hyb_top.startswith("I finally bought a new car")
    assert {"keyword", "semantic", "recency", "bm25", "similarity"} <= set(parts)


def test_vector_rows_carry_filters_and_an_exact_model_key_in_the_page(page: Page) -> None:
    """In DuckDB-Wasm every vector row holds its message's session, role and time and the
    model's 53-bit key exactly (it crosses JS as a number); filtered semantic search,
    which reads only those rows, answers within the filters."""
    from chatmem.index.embeddings import model_key

    db = unique_name("semrows")
    out = page.py(f"""
import chatmem
mem = await chatmem.open({db!r})
a = await mem.sessions.create(title="a")
b = await mem.sessions.create(title="b")
for i, t in enumerate(["I bought a new car", "a red car with leather seats", "bread on Sunday"]):
    await mem.messages.append(a.session_id, ("user", "assistant")[i % 2], t)
await mem.messages.append(b.session_id, "user", "my car broke down")
hits = await mem.search("automobile", mode="semantic", limit=None)
users = await mem.search("automobile", mode="semantic", limit=None, roles=["user"])
only_b = await mem.search("automobile", mode="hybrid", limit=None, session_ids=[b.session_id])
index = await mem.index.ready()
rows = await index.execute(
    "SELECT e.model, e.model_key, e.session_id = m.session_id AND e.role = m.role "
    "AND e.created_at = m.created_at AS same FROM embeddings e LEFT JOIN messages m ON m.id = e.message_id")
res = [rows, len(hits), sorted(h.message.role for h in users), sorted({{h.session_id for h in only_b}}), b.session_id]
await mem.close()
res
""")
    rows, n_hits, user_roles, hybrid_sessions, b_id = out
    assert len(rows) == n_hits == 4
    assert all(r["same"] is True for r in rows)
    assert all(r["model_key"] == model_key(r["model"]) for r in rows)
    assert user_roles == ["user", "user", "user"]
    assert hybrid_sessions == [b_id]


EMBED_PART = """
import chatmem
mem = await chatmem.open(NAME)
s = await mem.sessions.create(title="long")
await mem.messages.append_many(s.session_id, [{"role": "user", "content": f"note {i}: the garden needs water"}
                                              for i in range(120)])
index = await mem.index.ready()
# embedding stops part-way (as if the tab went away after 60); the saved cache holds the 60
n = await index.embed_missing(mem.index.embedder, batch_size=30, limit=60)
saved = await mem.index.save()
[n, saved, index.embed_progress]
"""

EMBED_RESUME = """
import chatmem
mem = await chatmem.open(NAME)
index = await mem.index.ready()
rows = await index.execute("SELECT count(*) AS n FROM embeddings WHERE model = ?", [mem.index.embedder.model])
before = int(rows[0]["n"])
task = mem.embed_in_background(batch_size=25)
done = await task
rows = await index.execute("SELECT count(*) AS n FROM embeddings WHERE model = ?", [mem.index.embedder.model])
out = [mem.index.last_open["mode"], before, done, int(rows[0]["n"]), list(mem.index.embed_progress)]
await mem.close()
out
"""


def test_background_embedding_resumes_after_a_reload(new_page) -> None:
    """Vectors embedded before a reload come back with the cached index; the background
    embedding then does only the rest, and its progress reaches the total."""
    name = unique_name("embres")
    a = new_page()
    n, saved, progress = a.py(EMBED_PART.replace("NAME", repr(name)))
    assert n == 60 and saved is True and progress == [60, 120]
    a.reload()
    mode, before, done, after, progress = a.py(EMBED_RESUME.replace("NAME", repr(name)))
    assert mode == "cached" and before == 60
    assert done == 60 and after == 120 and progress == [120, 120]
