"""The approximate index for semantic search in the page (``web/js/nearest.js`` beside
DuckDB-Wasm): the answers of an exact scan where it reranks every row, kept in step
with appends and deletes, and asked by a guest tab through the owner."""

from __future__ import annotations

import pytest

from conftest import Page, unique_name

pytestmark = pytest.mark.browser

TOPICS = [
    "my sister moved to Lisbon and loves the tiled streets",
    "we adopted a grey kitten called Pepper last spring",
    "the marathon training plan says twenty miles on Sunday",
    "I burnt the lasagna again, the oven runs too hot",
    "our band plays the jazz club downtown every Friday",
    "the dentist found two cavities, no more candy for me",
    "I am reading a novel about a lighthouse keeper in Maine",
    "grandpa taught me to fish for trout in the mountain river",
]

#: page code both comparisons run: ``answers()`` under the exact scan, then with the
#: approximate index reranking every row it admits (``MIN_CANDIDATES`` left so after it)
BOTH_WAYS = """
from chatmem.index import nearest

async def both_ways(mem, answers):
    nearest.NEAREST_FROM = 10 ** 9
    exact = await answers()
    engine = mem.index.query_index.engine
    scans = len(engine._handle.nearestSets)
    nearest.NEAREST_FROM, nearest.MIN_CANDIDATES = 0, 10 ** 6
    approx = await answers()
    return exact, approx, scans, len(engine._handle.nearestSets)
"""


def assert_same_answers(approx: list, exact: list) -> None:
    """The same ids in the same order, with the same scores (and breakdown, when given)."""
    assert len(approx) == len(exact)
    for got, want in zip(approx, exact):
        assert [g[0] for g in got] == [w[0] for w in want]
        for g, w in zip(got, want):
            assert g[1:] == pytest.approx(w[1:], abs=2e-6)


COMPARE = (
    BOTH_WAYS
    + """
import chatmem
mem = await chatmem.open({db!r})
s = await mem.sessions.create(title="notes")
topics = {topics!r}
await mem.messages.append_many(s.session_id, [
    dict(role="user" if i % 2 else "assistant", content=f"{{topics[i % len(topics)]}} (note {{i}})")
    for i in range(240)
])
queries = ["a cat as a pet", "running a long race", "music at night", "cooking dinner", "teeth"]

async def answers():
    out = []
    for q in queries:
        for mode in ("semantic", "hybrid"):
            hits = await mem.search(q, mode=mode, limit=10)
            out.append([(h.message.id, round(h.score, 6), round(h.breakdown.get("similarity", 0.0), 6)) for h in hits])
    return out

saved = (nearest.NEAREST_FROM, nearest.MIN_CANDIDATES)
try:
    exact, approx, scans, kept = await both_ways(mem, answers)
    engine = mem.index.query_index.engine
    # a small candidate set still ranks by the exact cosine among its candidates
    nearest.MIN_CANDIDATES = 20
    few = await mem.search("a cat as a pet", mode="semantic", limit=5)
    nearest.MIN_CANDIDATES = 10 ** 6
    # kept in step: an append is found (its rows read by rowid), a deleted message is gone
    rw0 = engine._handle.embeddingsRewritten
    (new,) = await mem.messages.append_many(s.session_id, [dict(role="user",
        content="the volcano erupted and ash covered the village")])
    after_append = [h.message.id for h in await mem.search("volcanic eruption ash", mode="semantic", limit=3)]
    rw1 = engine._handle.embeddingsRewritten
    await mem.sessions.delete_messages(s.session_id, [new.id])
    after_delete = [h.message.id for h in await mem.search("volcanic eruption ash", mode="semantic", limit=10)]
    rw2 = engine._handle.embeddingsRewritten
finally:
    nearest.NEAREST_FROM, nearest.MIN_CANDIDATES = saved
await mem.close()
[exact, approx, scans, kept, len(few), new.id, after_append, after_delete, [rw0, rw1, rw2]]
"""
)


def test_approximate_search_answers_as_the_scan_and_keeps_in_step(page: Page) -> None:
    exact, approx, scans, kept, few, new_id, after_append, after_delete, rewrites = page.py(
        COMPARE.format(db=unique_name("near"), topics=TOPICS)
    )
    assert scans == 0, "below NEAREST_FROM the vectors are scanned"
    assert kept == 1, "the engine keeps the model's vectors for the approximate index"
    assert len(exact) == 10
    assert_same_answers(approx, exact)
    assert few == 5
    assert after_append[0] == new_id, "a message appended after the first search is found"
    assert new_id not in after_delete, "a deleted message is not found"
    rw0, rw1, rw2 = rewrites
    assert rw1 == rw0, "vectors of new messages are appended, not a rewrite"
    assert rw2 > rw1, "a delete is a rewrite"


FILTERED = (
    BOTH_WAYS
    + """
import chatmem
mem = await chatmem.open({db!r})
topics = {topics!r}
made = []
for c, (char, user) in enumerate((("ada", "u1"), ("bob", "u1"), ("ada", "u2"))):
    s = await mem.sessions.create(title=f"s{{c}}", character_id=char, user_id=user)
    made.append(s.session_id)
    await mem.messages.append_many(s.session_id, [
        dict(role="user" if i % 2 else "assistant", content=f"{{topics[(i + c) % len(topics)]}} (note {{c}}.{{i}})",
             created_at=1_000_000 + 1000 * i + c)
        for i in range(90)
    ])
filters = [
    dict(session_ids=[made[1]]),
    dict(character_ids=["ada"]),
    dict(character_ids=["ada"], session_ids=[made[0], made[1]]),
    dict(roles=["user"]),
    dict(date_range=(1_020_000, 1_050_000)),
    dict(character_ids=["bob"], roles=["assistant"], date_range=(None, 1_040_000)),
    dict(character_ids=["nobody"]),
]
queries = ["a cat as a pet", "running a long race", "cooking dinner"]

async def answers():
    out = []
    for f in filters:
        for q in queries:
            for mode in ("semantic", "hybrid"):
                hits = await mem.search(q, mode=mode, limit=8, **f)
                out.append([(h.message.id, round(h.score, 6)) for h in hits])
    return out

saved = (nearest.NEAREST_FROM, nearest.MIN_CANDIDATES)
try:
    exact, approx, scans, kept = await both_ways(mem, answers)
    # few candidates: each one still admitted by the filter
    nearest.MIN_CANDIDATES = 10
    few = await mem.search("a cat as a pet", mode="semantic", limit=8, character_ids=["bob"], roles=["user"])
    few = [(h.message.session_id, h.message.role) for h in few]
finally:
    nearest.NEAREST_FROM, nearest.MIN_CANDIDATES = saved
await mem.close()
[exact, approx, scans, kept, few, made]
"""
)


def test_a_filtered_search_asks_the_approximate_index_for_the_admitted_rows(page: Page) -> None:
    """Filters by session, character, role and time narrow the approximate index's pass:
    with every admitted row reranked its answers are the exact scan's; with few
    candidates every answer is still one the filter admits."""
    exact, approx, scans, kept, few, made = page.py(
        FILTERED.format(db=unique_name("near-flt"), topics=TOPICS)
    )
    assert scans == 0 and kept == 1
    assert len(exact) == 7 * 3 * 2
    assert_same_answers(approx, exact)
    assert any(exact) and not exact[-1], "the filters admit some rows, an unknown character none"
    assert few and all(sid == made[1] and role == "user" for sid, role in few)


OWNER = """
import chatmem, builtins
mem = await chatmem.open({db!r})
s = await mem.sessions.create(title="notes")
topics = {topics!r}
await mem.messages.append_many(s.session_id, [
    dict(role="user", content=f"{{topics[i % len(topics)]}} (note {{i}})") for i in range(80)
])
exact = [h.message.id for h in await mem.search("a cat as a pet", mode="semantic", limit=5)]
builtins._near_owner = mem
[exact, mem.index.status()["role"], len(mem.index.query_index.engine._handle.nearestSets)]
"""

GUEST = """
import chatmem
from chatmem.index import nearest
mem = await chatmem.open({db!r})
saved = (nearest.NEAREST_FROM, nearest.MIN_CANDIDATES)
nearest.NEAREST_FROM, nearest.MIN_CANDIDATES = 0, 10 ** 6
try:
    got = [h.message.id for h in await mem.search("a cat as a pet", mode="semantic", limit=5)]
finally:
    nearest.NEAREST_FROM, nearest.MIN_CANDIDATES = saved
role = mem.index.status()["role"]
await mem.close()
[got, role]
"""


def test_a_guest_tab_asks_the_owner_s_approximate_index(new_page) -> None:
    """A second tab's search goes to the owner's engine, which keeps the vectors for it."""
    db = unique_name("near-tabs")
    a, b = new_page(), new_page()
    exact, role, before = a.py(OWNER.format(db=db, topics=TOPICS))
    assert role == "owner" and before == 0
    got, guest_role = b.py(GUEST.format(db=db))
    assert guest_role == "guest"
    assert got == exact
    kept = a.py("import builtins\nlen(builtins._near_owner.index.query_index.engine._handle.nearestSets)")
    assert kept == 1, "the owner's engine answered the guest's nearest request"
    a.py("import builtins\nawait builtins._near_owner.close()")


NEAREST_JS = """
async () => {
  const { NearestVectors } = await import(new URL("js/nearest.js", location.href).href);
  let seed = 7;
  const rand = () => ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 4294967296);
  const out = [];
  for (const dim of [8, 33, 64, 384, 1000, 1536]) {
    const v = new NearestVectors(dim);
    const rows = [];
    for (let r = 0; r < 200; r++) {
      const own = Int8Array.from({ length: dim }, () => Math.round(rand() * 254 - 127));
      // every other row has an in-context vector: it ranks by that one
      const ctx = r % 2 ? Int8Array.from({ length: dim }, () => Math.round(rand() * 254 - 127)) : null;
      rows.push([own, ctx]);
      v.add(r, "m" + String(r).padStart(4, "0"), 1000 + r, own, 0.001, ctx, 0.002);
    }
    // the query exactly opposite to row 5's ranking vector: distances up to every bit
    const q = Array.from(rows[5][1] ?? rows[5][0], (x) => -x || 0.5);
    const norm = Math.hypot(...q);
    const unit = q.map((x) => x / norm);
    const [ids, created, sim, rsim] = v.nearest(unit, 10, 10000);
    // the scales are kept as float32, as the index stores them
    const cos = (a, s) => a.reduce((t, x, d) => t + x * unit[d], 0) * Math.fround(s);
    const want = rows
      .map(([own, ctx], r) => [ctx ? cos(ctx, 0.002) : cos(own, 0.001), cos(own, 0.001), r])
      .sort((a, b) => b[0] - a[0] || b[2] - a[2])
      .slice(0, 10);
    const signs = new Uint32Array(v.words);
    for (let d = 0; d < dim; d++) if (unit[d] > 0) signs[d >>> 5] |= 1 << (d & 31);
    let distances = true;
    for (let r = 0; r < 200; r++) {
      let h = 0;
      for (let w = 0; w < v.words; w++) {
        for (let x = (v.codes[r * v.words + w] ^ signs[w]) >>> 0; x; x >>>= 1) h += x & 1;
      }
      if (h !== v.distances[r]) distances = false;
    }
    // few candidates: the nearest in Hamming distance, still ranked by the exact cosine
    const few = v.nearest(unit, 3, 20);
    out.push({
      dim,
      ids_equal: JSON.stringify(ids) === JSON.stringify(want.map(([, , r]) => "m" + String(r).padStart(4, "0"))),
      rsim_err: Math.max(...want.map(([s], i) => Math.abs(s - rsim[i]))),
      sim_err: Math.max(...want.map(([, s], i) => Math.abs(s - sim[i]))),
      created_ok: created.every((c, i) => c === 1000 + want[i][2]),
      distances,
      max_distance: Math.max(...v.distances.subarray(0, 200)),
      few: few[0].length,
      few_sorted: few[3].every((s, i) => i === 0 || s <= few[3][i - 1]),
    });
  }
  return out;
}
"""


def test_the_hamming_distances_and_the_exact_rerank_of_nearest_js(page: Page) -> None:
    """``web/js/nearest.js`` alone: every row's distance is the popcount of its sign bits
    against the query's (for dimensions that are not a multiple of 32, and distances past
    255), and with every row a candidate the answer is the exact ranking by the
    in-context cosine, with the own cosine beside it."""
    for got in page.page.evaluate(NEAREST_JS):
        assert got["ids_equal"] and got["created_ok"] and got["distances"], got
        assert got["rsim_err"] < 1e-9 and got["sim_err"] < 1e-9, got
        assert got["few"] == 3 and got["few_sorted"], got
        if got["dim"] >= 384:
            assert got["max_distance"] > 255, got


def test_the_page_reads_rewrites_of_the_embeddings_as_cpython_does(page: Page) -> None:
    """``mayRewriteEmbeddings`` (nearest.js) and ``sql_engine.may_rewrite_embeddings`` agree."""
    from chatmem.index.sql_engine import may_rewrite_embeddings
    from nearest_cases import REWRITES

    got = page.page.evaluate(
        """async (sqls) => {
            const { mayRewriteEmbeddings } = await import(new URL("js/nearest.js", location.href).href);
            return sqls.map((s) => mayRewriteEmbeddings(s));
        }""",
        list(REWRITES),
    )
    assert got == [may_rewrite_embeddings(s) for s in REWRITES] == list(REWRITES.values())
