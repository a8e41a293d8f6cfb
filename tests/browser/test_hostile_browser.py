"""Hostile input in real Chromium: the battery against IndexedDB (and the index in
DuckDB-Wasm), and the DuckDB-Wasm engine locked down and interruptible."""

from __future__ import annotations

import base64
import pickle
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import Page, unique_name
from hostile_checks import EXPLICIT_MESSAGE_CASES, SHAPE_CASES
from hostile_strategies import (
    SMALL_LIMITS,
    hostile_export,
    hostile_import,
    hostile_message,
    hostile_session_kwargs,
)

pytestmark = pytest.mark.browser


def load(page: Page) -> None:
    """Put hostile_checks.py into the page's Python once."""
    if getattr(page, "_hostile_loaded", False):
        return
    src = (Path(__file__).parents[1] / "hostile_checks.py").read_text()
    page.py(
        "import sys, pathlib\n"
        "pathlib.Path('/home/pyodide/hostile_checks.py').write_text(" + repr(src) + ")\n"
        "sys.path.insert(0, '/home/pyodide')\n"
        "import hostile_checks\n"
        "len(hostile_checks.EXPLICIT_MESSAGE_CASES)"
    )
    page._hostile_loaded = True  # type: ignore[attr-defined]


#: nesting used in the page: past every limit, yet within what Pyodide's stack takes in stride
PAGE_DEPTH = 300


def for_the_page(v: Any) -> Any:
    """The case with its nesting capped at ``PAGE_DEPTH`` (still far past ``max_depth``)."""
    if isinstance(v, dict):
        if len(v) == 1 and next(iter(v)) in ("$deep", "$deeplist"):
            key = next(iter(v))
            return {key: min(int(v[key]), PAGE_DEPTH)}
        return {k: for_the_page(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return type(v)(for_the_page(x) for x in v)
    if isinstance(v, str) and v.count("[") > PAGE_DEPTH:
        return v.replace("[" * v.count("["), "[" * PAGE_DEPTH).replace("]" * v.count("]"), "]" * PAGE_DEPTH)
    return v


def run_cases(page: Page, cases: list[tuple[str, Any]], limits: dict[str, int] | None) -> Any:
    """Run ``check_cases`` in the page over a fresh IndexedDB database; cases travel pickled
    (they hold NaN, lone surrogates, bytes: nothing JSON could carry)."""
    load(page)
    blob = base64.b64encode(pickle.dumps(for_the_page(cases))).decode()
    return page.py(
        "import base64, pickle, traceback, chatmem, hostile_checks\n"
        f"cases = pickle.loads(base64.b64decode({blob!r}))\n"
        f"limits = chatmem.Limits(**{limits!r}) if {limits!r} else None\n"
        f"mem = await chatmem.open({unique_name('hostile')!r}, limits=limits)\n"
        "try:\n"
        "    out = await hostile_checks.check_cases(mem, cases)\n"
        "except BaseException:\n"
        "    out = traceback.format_exc()\n"
        "finally:\n"
        "    await mem.close()\n"
        "out",
        timeout=600_000,
    )


def test_explicit_hostile_cases_in_indexeddb(page: Page) -> None:
    """The attacks met so far, against IndexedDB: typed errors only, nothing written, store usable."""
    out = run_cases(page, EXPLICIT_MESSAGE_CASES, None)
    assert isinstance(out, list), out
    assert len(out) == len(EXPLICIT_MESSAGE_CASES)


def test_no_shape_escapes_the_error_tree_in_indexeddb(page: Page) -> None:
    """Deep nesting, cycles, non-string keys, huge integers, NaN, lone surrogates, sets and
    bytes at every entry point, against IndexedDB: typed errors only, nothing written."""
    out = run_cases(page, SHAPE_CASES, None)
    assert isinstance(out, list), out
    assert len(out) == len(SHAPE_CASES)


def test_hypothesis_battery_in_indexeddb(page: Page) -> None:
    """Generated hostile messages, sessions and exports against IndexedDB."""
    cases: list[tuple[str, Any]] = []

    @settings(
        max_examples=20,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(
        st.one_of(
            hostile_message().map(lambda m: ("append", m)),
            hostile_session_kwargs().map(lambda k: ("create", k)),
            hostile_export().map(lambda e: ("import", e)),
            hostile_import().map(lambda e: ("import", e)),
        )
    )
    def collect(case: tuple[str, Any]) -> None:
        cases.append(case)

    collect()
    out = run_cases(page, cases, SMALL_LIMITS)
    assert isinstance(out, list), out
    assert len(out) == len(cases)


def test_duckdb_wasm_engine_is_locked_down(page: Page) -> None:
    """Below the guard: DuckDB-Wasm refuses files and URLs and refuses to change its settings;
    its bulk path still works."""
    out = page.py(
        "from chatmem.runtime.page import DuckDBWasmEngine\n"
        "from chatmem.errors import QueryError\n"
        "eng = await DuckDBWasmEngine.open()\n"
        "refused = []\n"
        "for sql in ['SET enable_external_access = true', 'SET lock_configuration = false',\n"
        "            \"SELECT * FROM read_text('/etc/hostname')\", \"SELECT * FROM 'http://127.0.0.1:9/x.csv'\"]:\n"
        "    try:\n"
        "        await eng.execute(sql)\n"
        "    except QueryError:\n"
        "        refused.append(sql)\n"
        "await eng.execute('CREATE TABLE t (a DOUBLE)')\n"
        "await eng.load_rows('t', ['a'], [(float(i),) for i in range(500)])\n"
        "n = (await eng.execute('SELECT count(*) AS n FROM t'))[0]['n']\n"
        "await eng.close()\n"
        "[len(refused), n]"
    )
    assert out == [4, 500]


def test_duckdb_wasm_query_timeout_frees_the_index(page: Page) -> None:
    """mem.sql(..., timeout=) in the page: QueryTimeout, then SELECT 1 and search answer
    (they would wait for hours if the heavy query still ran)."""
    out = page.py(
        "import chatmem, asyncio\n"
        "from chatmem.errors import QueryTimeout\n"
        f"mem = await chatmem.open({unique_name('sqlto')!r})\n"
        "s = await mem.sessions.create()\n"
        "await mem.messages.append(s.session_id, 'user', 'needle')\n"
        "try:\n"
        "    await mem.sql('SELECT count(*) AS n FROM range(1000000000000) a', timeout=0.5)\n"
        "    got = 'no timeout'\n"
        "except QueryTimeout:\n"
        "    got = 'timeout'\n"
        "task = asyncio.ensure_future(mem.sql('SELECT count(*) AS n FROM range(1000000000000) a', timeout=None))\n"
        "await asyncio.sleep(0.3)\n"
        "task.cancel()\n"
        "try:\n"
        "    await task\n"
        "except asyncio.CancelledError:\n"
        "    got += ' cancelled'\n"
        "one = await mem.sql('SELECT 1 AS x')\n"
        "hits = await mem.search('needle')\n"
        "await mem.close()\n"
        "[got, one, len(hits)]",
        timeout=180_000,
    )
    assert out == ["timeout cancelled", [{"x": 1}], 1]
