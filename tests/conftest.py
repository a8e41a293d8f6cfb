"""Shared fixtures: fresh stores on CPython, and one served site + one booted
Chromium page for the browser tests (each test uses its own database name)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import os
import shutil
import sys
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
from tools.base import CHROMIUM, CHROMIUM_ARGS  # one place for the launch flags

ROOT = Path(__file__).resolve().parents[1]


def run(coro: Any) -> Any:
    """Run a coroutine to completion on a fresh event loop in its own thread
    (safe even while Playwright's sync API holds a loop in this thread)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


BROWSER_FIXTURES = {"page", "new_page", "context", "browser", "playwright_instance", "site"}


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    """Browser tests run after every CPython test (one browser, booted once)."""
    for item in items:
        if BROWSER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.browser)
    items.sort(key=lambda item: item.get_closest_marker("browser") is not None)


def sqlite_memory(db: str, index: str | None = None) -> Any:
    """A ``Memory`` over the SQLite store ``db`` whose query index is a DuckDB file at
    ``index`` (a cached index, reopened by the next call), or in memory without one."""
    from chatmem import Memory
    from chatmem.index import DuckDBEngine
    from chatmem.stores.sqlite import SQLiteStore

    async def engine() -> Any:
        return DuckDBEngine(index) if index else DuckDBEngine()

    return Memory(SQLiteStore(db), engine_factory=engine)


def unique_name(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def three_sessions(content: str, n: int) -> str:
    """Page Python that opens ``NAME`` as ``mem`` and stores sessions "a", "b" and "c"
    (their ids in ``ids``), each with ``n`` user messages whose content is the
    expression ``content`` of ``t`` (the title) and ``i`` (the message's number)."""
    return f"""
import asyncio, chatmem
mem = await chatmem.open(NAME)
ids = []
for t in ["a", "b", "c"]:
    s = await mem.sessions.create(title=t)
    ids.append(s.session_id)
    await mem.messages.append_many(s.session_id, [{{"role": "user", "content": {content}}} for i in range({n})])
"""


# ---------------------------------------------------------------------------- the site


@pytest.fixture(scope="session")
def dist() -> Path:
    path = Path(os.environ.get("CHATMEM_DIST", ROOT / "dist"))
    if not (path / "index.html").exists():
        from tools.static_site import build

        build()
    return path


@pytest.fixture(scope="session")
def site(dist: Path) -> Iterator[str]:
    from tools.serving import serve_in_thread

    srv, url = serve_in_thread(dist, 0)
    yield url
    srv.shutdown()


class Requests:
    """Every URL the browser asked for."""

    def __init__(self) -> None:
        self.urls: list[str] = []

    def outside(self, base: str) -> list[str]:
        return [
            u for u in self.urls if not (u.startswith(base) or u.startswith("data:") or u.startswith("blob:"))
        ]


@pytest.fixture(scope="session")
def requests_seen() -> Requests:
    return Requests()


@pytest.fixture(scope="session")
def playwright_instance() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="session")
def browser(playwright_instance: Any) -> Iterator[Any]:
    b = playwright_instance.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    yield b
    b.close()


@pytest.fixture(scope="session")
def context(browser: Any, requests_seen: Requests) -> Iterator[Any]:
    ctx = browser.new_context()
    ctx.on("request", lambda req: requests_seen.urls.append(req.url))
    # shown with a failing test's output: which of the page's requests failed, and how
    ctx.on("requestfailed", lambda req: print(f"[request failed: {req.url} {req.failure}]", file=sys.stderr))
    yield ctx
    ctx.close()


#: Chromium's message when a module's fetch failed at the network level
TRANSIENT_FETCH = "Failed to fetch dynamically imported module"


class Page:
    """A booted chatmem page: ``py(code)`` runs async Python in it."""

    def __init__(self, page: Any, url: str):
        self.url = url
        self.errors: list[str] = []
        #: what the page said while it loaded: console errors and failed requests, shown
        #: when the boot module never ran
        self.log: list[str] = []
        self._watch(page)

    def _watch(self, page: Any) -> None:
        self.page = page
        #: the renderer died (it takes every test that shares this page after it)
        self.crashed = False
        page.on("crash", lambda _: setattr(self, "crashed", True))
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on(
            "console", lambda m: m.type in ("error", "warning") and self.log.append(f"{m.type}: {m.text}")
        )
        page.on("requestfailed", lambda r: self.log.append(f"failed: {r.url} {r.failure}"))

    def revive(self) -> None:
        """A fresh page booted in place of one whose renderer crashed or that was closed, so
        that one crash fails the test it happened in, not every test after it that shares
        the page (what a test kept in the page itself is gone; its databases are not)."""
        if not (self.crashed or self.page.is_closed()):
            return
        print(
            f"\n[the shared page {'crashed' if self.crashed else 'was closed'}; booting a new one; "
            f"the page said: {self.log[-5:] + self.errors[-5:]}]",
            file=sys.stderr,
        )
        old = self.page
        self._watch(old.context.new_page())
        if not old.is_closed():
            old.close()
        self.boot()

    def boot(self) -> Page:
        return self._load(lambda: self.page.goto(self.url))

    def reload(self) -> Page:
        return self._load(self.page.reload)

    def _load(self, load: Any) -> Page:
        """Load the page until ``ready``; once more if the browser failed to fetch one of the
        page's own modules from the local server (a transient network failure of a loaded
        machine, not a state of the page: the second load must succeed)."""
        load()
        try:
            return self._ready()
        except Exception as e:
            if TRANSIENT_FETCH not in str(e):
                raise
            print(
                f"\n[retrying a page load after a transient fetch failure: {e}; the page said: "
                f"{self.log + self.errors}]",
                file=sys.stderr,
            )
            self.log.clear()
            load()
            return self._ready()

    def _ready(self) -> Page:
        state = self.page.evaluate(
            "({chatmem: typeof window.chatmem, url: location.href, state: document.readyState})"
        )
        if state["chatmem"] == "undefined":
            raise AssertionError(
                f"the boot module did not run: {state}; the page said: {self.log + self.errors}"
            )
        try:
            self.page.evaluate("window.chatmem.ready")
        except Exception as e:
            raise type(e)(f"{e}; the page said: {self.log + self.errors}") from e
        return self

    def py(self, code: str, timeout: float = 120_000) -> Any:
        self.page.set_default_timeout(timeout)
        return self.page.evaluate("code => window.chatmem.runPython(code)", code)


_page_counter = itertools.count()


@pytest.fixture(scope="session")
def page(context: Any, site: str) -> Page:
    """One booted page shared by the browser tests (state is per database name)."""
    return Page(context.new_page(), site).boot()


@pytest.fixture(autouse=True)
def _revive_shared_page(request: Any) -> None:
    """Before each test that uses the shared page: a new one if its renderer crashed."""
    if "page" in request.fixturenames:
        request.getfixturevalue("page").revive()


@pytest.fixture
def new_page(context: Any, site: str) -> Iterator[Any]:
    """A factory of extra booted pages in the shared context (same origin, same IndexedDB)."""
    pages: list[Page] = []

    def make() -> Page:
        p = Page(context.new_page(), site).boot()
        pages.append(p)
        return p

    yield make
    for p in pages:
        p.page.close()


@pytest.fixture
def profile_dir(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "profile"
    d.mkdir()
    yield d
    shutil.rmtree(d, ignore_errors=True)


# ---------------------------------------------------------------------------- PostgreSQL


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """A real PostgreSQL: ``CHATMEM_TEST_PG`` (set by ``build.py test``), else a throwaway
    cluster started here (Debian's ``postgresql``), stopped at the end of the run."""
    url = os.environ.get("CHATMEM_TEST_PG")
    if url:
        yield url
        return
    from tools.postgres import PostgresCluster

    cluster = PostgresCluster().start()
    try:
        yield cluster.url
    finally:
        cluster.stop()


@pytest.fixture
def pg_url(pg_server: str) -> Iterator[str]:
    """A fresh, empty database on the test PostgreSQL (dropped afterwards)."""
    import psycopg

    name = "t_" + uuid.uuid4().hex[:16]
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield pg_server.rsplit("/", 1)[0] + "/" + name
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(params=["sqlite", "postgres"])
def sync_db(request: Any, tmp_path: Path) -> str:
    """A fresh sync-server database: a SQLite file, then a PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "sync.db")
    return str(request.getfixturevalue("pg_url"))
