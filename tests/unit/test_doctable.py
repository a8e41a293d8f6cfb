"""``DocTable``: the docs' lengths, ids and times a query index keeps in Python, and when
it keeps only the lengths or nothing (``extended``); ``scoring.py_postings``'s cut-off."""

from __future__ import annotations

from typing import Any

from chatmem.index import doctable, scoring
from chatmem.index.doctable import DocTable, extended


def test_a_table_names_every_doc_and_skips_numbers_not_in_use():
    t = DocTable()
    t.add(0, "m-0", 100, 3)
    t.add(2, "m-ż", 300, 0)  # number 1 not in use; a doc of no index terms has length 0
    t.add(3, "01JD" * 6 + "XY", 400, 7)
    assert len(t) == 4
    assert [t.get(d) for d in range(5)] == [("m-0", 100), None, ("m-ż", 300), ("01JD" * 6 + "XY", 400), None]
    assert [t.length(d) for d in (-1, 0, 1, 2, 3, 4)] == [None, 3, None, 0, 7, None]
    t.add(1, "reused", 200, 5)  # a number set after it was passed
    t.add(0, "m-0b", 101, 4)
    assert [t.get(d) for d in range(4)] == [
        ("m-0b", 101),
        ("reused", 200),
        ("m-ż", 300),
        ("01JD" * 6 + "XY", 400),
    ]
    assert list(t.lens) == [4, 5, 0, 7]
    t.add(4, "m-4", 500, 2)  # appends go on after the numbers set out of order
    assert t.get(4) == ("m-4", 500) and t.get(3) == ("01JD" * 6 + "XY", 400)


def test_past_the_name_cache_only_lengths_are_kept_and_past_the_length_cache_nothing(monkeypatch):
    monkeypatch.setattr(doctable, "DOC_CACHE", 3)
    monkeypatch.setattr(doctable, "LENGTHS_CACHE", 6)
    t = extended(DocTable(), [(d, f"m{d}", d * 10, d + 1) for d in range(3)])
    assert t is not None and t.names and t.get(2) == ("m2", 20)
    t = extended(t, [(3, "m3", 30, 4), (4, "m4", 40, 5)])
    assert t is not None and not t.names and t.get(0) is None and t.get(4) is None
    assert [t.length(d) for d in range(5)] == [1, 2, 3, 4, 5]
    assert extended(t, [(5, "m5", 50, 6)]) is t and t.length(5) == 6
    assert extended(t, [(6, "m6", 60, 7)]) is None
    assert extended(None, [(0, "m0", 0, 1)]) is None
    u = extended(DocTable(), [(0, "m0", None, 2)])  # a doc without a time: lengths only
    assert u is not None and not u.names and u.length(0) == 2


def test_the_page_scores_more_postings_in_python_when_it_keeps_the_lengths_of_a_large_index():
    class Index:  # its engine in a worker (the page's)
        in_thread = False
        doc_lengths: DocTable | None = None

    idx: Any = Index()
    assert scoring.py_postings(idx, 1_000_000) == scoring.PY_POSTINGS_WORKER  # lengths joined: SQL
    idx.doc_lengths = DocTable(names=False)
    assert scoring.py_postings(idx, 20_000) == scoring.PY_POSTINGS_WORKER
    assert scoring.py_postings(idx, 50_000) == 2000
    assert scoring.py_postings(idx, 100_000) == 4000
    assert scoring.py_postings(idx, 1_000_000) == scoring.PY_POSTINGS
