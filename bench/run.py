#!/usr/bin/env python3
"""chatmem benchmarks: the same seeded workloads through chatmem and the
alternatives, in one Chromium page and one CPython process, in one run.

    python build.py bench                 # default sizes (~6 minutes on 2 cores)
    python build.py bench --scale         # also W4 (100,000 messages) and W9 (a 50,000-message ChatGPT import);
                                          # W10 (background embedding) at 100,000 instead of 10,000
    python build.py bench --huge [--huge-n N]   # only: 1,000,000 (N) messages in one page
    python build.py bench --quality       # LoCoMo retrieval quality, CPython and the page
    python build.py bench --facts         # facts: recall, stale and junk rates, extraction speed
    python build.py bench --large         # W2 also at 100,000 messages
    python build.py bench --quick         # tiny sizes: checks that everything runs
    python build.py bench --durability strict
    python build.py bench --in-memory     # an in-memory browser context (default: a profile on disk)
    python build.py bench --only W1,W3    # some workloads (W6 needs W2's data; it imports it itself)
    python build.py bench --only W8 --w8-full   # W8 at full size: 200 devices in 20 accounts

Writes bench/results/results.json, results.md and one SVG chart per workload.
Each workload is one function in WORKLOADS; a later one (W4 keyword search,
W7 outbox drain) plugs in by adding a function there.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))  # tools/: the build and the static server
sys.path.insert(0, str(HERE))

import embedbg  # noqa: E402
import goals  # noqa: E402
import modes  # noqa: E402
import payloads  # noqa: E402
import report  # noqa: E402
import scale  # noqa: E402
from tools import serving  # noqa: E402

NODE = ROOT / "node_modules"
RESULTS = HERE / "results"

from tools.base import CHROMIUM, CHROMIUM_ARGS  # noqa: E402  (launched as the tests do)

T0 = time.perf_counter()


def log(msg: str) -> None:
    print(f"[bench {time.perf_counter() - T0:6.1f}s] {msg}", flush=True)


# ---------------------------------------------------------------------------- the bench page


def assemble_page(dist: Path) -> Path:
    """dist/bench/: the harness, the peers from node_modules, PyScript's storage module."""
    out = dist / "bench"
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(HERE / "page", out)
    shutil.copy2(HERE / "quality.py", out / "quality.py")  # run_page: the same questions in the page
    # the page runtime finds the embedding model through build-info.json beside the document
    info = json.loads((dist / "build-info.json").read_text())
    if info.get("model"):
        (out / "build-info.json").write_text(json.dumps({"model": "../" + info["model"]}))
    vendor = out / "vendor"

    def cp(src: str, dst: str) -> None:
        (vendor / dst).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(NODE / src, vendor / dst)

    cp("dexie/dist/dexie.mjs", "dexie/dexie.mjs")
    u = NODE / "unstorage"
    cp("unstorage/dist/index.mjs", "unstorage/dist/index.mjs")
    for f in (u / "dist" / "shared").glob("*.mjs"):
        cp(f"unstorage/dist/shared/{f.name}", f"unstorage/dist/shared/{f.name}")
    cp("unstorage/drivers/indexedb.mjs", "unstorage/drivers/indexedb.mjs")
    cp("unstorage/drivers/utils/index.mjs", "unstorage/drivers/utils/index.mjs")
    cp("destr/dist/index.mjs", "destr/index.mjs")
    cp("idb-keyval/dist/index.js", "idb-keyval/index.js")
    cp("@webreflection/idb-map/index.js", "idb-map/index.js")
    cp("@webreflection/idb-map/sync.js", "idb-map/sync.js")
    std = NODE / "@pyscript" / "core" / "src" / "stdlib" / "pyscript"
    (out / "pyscript").mkdir()
    for name in ("storage.py", "flatted.py", "ffi.py"):
        shutil.copy2(std / name, out / "pyscript" / name)
    # PyScript's own __init__ pulls in the DOM helpers; the storage module needs none of them
    (out / "pyscript" / "__init__.py").write_text("from pyscript.storage import Storage, storage\n")
    return out


class Browser:
    """One Chromium, one bench page (chatmem booted + the JS peers)."""

    def __init__(self, site: str, on_disk: bool = False):
        """``on_disk``: a profile in a temporary folder (IndexedDB and OPFS on disk, with the
        disk's quota); else a fresh in-memory context, whose quota is a share of the RAM."""
        from playwright.sync_api import sync_playwright

        self.site = site
        self._pw = sync_playwright().start()
        self._profile = tempfile.mkdtemp(prefix="chatmem-bench-") if on_disk else None
        if self._profile is not None:
            self.browser = None
            self.context = self._pw.chromium.launch_persistent_context(
                self._profile, executable_path=CHROMIUM, args=CHROMIUM_ARGS
            )
        else:
            self.browser = self._pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            self.context = self.browser.new_context()
        self.page = self.context.new_page()
        self.page.set_default_timeout(900_000)
        self.errors: list[str] = []
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("console", lambda m: m.text.startswith("[bench page]") and log(m.text))
        self.page.on("crash", lambda _: self.errors.append("the page crashed"))
        self.page.goto(site + "bench/index.html")
        self.page.evaluate("window.benchReady")

    def reload(self) -> None:
        """Load the page again (a restart: a new Pyodide, the profile's stores kept), with
        the modules an app imports as it boots imported: the harness's (and its vocabulary
        made), and chatmem's own behind ``chatmem.open`` (a boot's work, not a first search's)."""
        self.page.reload()
        self.page.evaluate("window.benchReady")
        self.py("import scalepy, chatmem.memory\nscalepy.vocabulary()\nTrue")

    def long_tasks(self) -> list[float]:
        """The main thread's tasks over 50 ms since the last call (their milliseconds)."""
        tasks: list[float] = self.page.evaluate("window.takeLongTasks()")
        return tasks

    def js(self, fn: str, *args: Any) -> Any:
        return self.page.evaluate("([f, a]) => window.bench[f](...a)", [fn, list(args)])

    def py(self, code: str) -> Any:
        return self.page.evaluate("c => window.chatmem.runPython(c)", code)

    def call(self, fn: str, *args: Any, mod: str = "benchpy") -> Any:
        return self.py(f"import {mod}\nawait {mod}.{fn}(*{list(args)!r})")

    log = staticmethod(log)

    def env(self) -> dict[str, Any]:
        return {
            "chromium": self.browser.version
            if self.browser is not None
            # a persistent context has none
            else subprocess.run([CHROMIUM, "--version"], capture_output=True, text=True).stdout.split()[1],
            "hardware_concurrency": self.page.evaluate("navigator.hardwareConcurrency"),
            "pyodide": self.page.evaluate("window.chatmem.pyodide.version"),
        }

    def close(self) -> None:
        self.context.close()
        if self.browser is not None:
            self.browser.close()
        self._pw.stop()
        if self._profile is not None:
            shutil.rmtree(self._profile, ignore_errors=True)


# ---------------------------------------------------------------------------- results


class Results:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.extra: dict[str, Any] = {}

    def add(
        self,
        workload: str,
        case: str,
        system: str,
        times: list[float],
        *,
        where: str = "chromium",
        n_msgs: int | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        row = {
            "workload": workload,
            "case": case,
            "system": system,
            "where": where,
            **report.stats(times),
            **extra,
        }
        if n_msgs:
            row["throughput"] = n_msgs / (row["p50"] / 1000)
        row["samples"] = [round(t, 3) for t in times]
        self.rows.append(row)
        log(f"  {workload} {case} {system}: p50 {report.fmt(row['p50'])} ms (n={row['n']})")
        return row

    def find(self, workload: str, case: str, system: str) -> dict[str, Any] | None:
        return next(
            (r for r in self.rows if (r["workload"], r["case"], r["system"]) == (workload, case, system)),
            None,
        )

    def ratios(self) -> None:
        """vs raw (same case, same run) and chatmem ÷ peer; CPython peers against the chatmem store of the same kind."""
        for r in self.rows:
            if r["where"] == "chromium":
                raw = self.find(r["workload"], r["case"], "raw")
                cm = self.find(r["workload"], r["case"], "chatmem")
                if raw and r is not raw:
                    r["vs_raw"] = r["p50"] / raw["p50"]
                if cm and not r["system"].startswith("chatmem"):
                    r["chatmem_over"] = cm["p50"] / r["p50"]
            elif r["system"].startswith("LangChain"):
                kind = "memory" if " memory" in r["system"] else "sqlite"
                cm = next(
                    (
                        x
                        for x in self.rows
                        if x["workload"] == r["workload"]
                        and x["case"] == r["case"]
                        and x["system"].startswith(f"chatmem {kind}")
                    ),
                    None,
                )
                if cm:
                    r["chatmem_over"] = cm["p50"] / r["p50"]


# ---------------------------------------------------------------------------- workloads (browser)

JS_W1 = ("raw", "rawschema", "rawmin", "dexie", "rewrite")


def w1(b: Browser, cfg: dict[str, Any], res: Results) -> None:
    """W1 append: one message at a time to a session already holding `base`, awaited until durable."""
    seed, dur, warm = cfg["seed"], cfg["durability"], cfg["w1_warmup"]
    for base, reps in cfg["w1_points"]:
        case = f"append @{base:,}"
        log(f"W1 {case}")
        r = b.call("w1", "bench-cm-w1", dur, seed, base, warm, reps)
        res.add("W1", case, "chatmem", r["times"])
        for s in JS_W1:
            r = b.js(
                "w1",
                s,
                {
                    "db": f"bench-{s}-w1",
                    "durability": dur,
                    "seed": seed,
                    "base": base,
                    "warmup": warm,
                    "reps": reps,
                    "blocking": False,
                },
            )
            res.add("W1", case, s, r["times"])
        if base <= 1000:
            r = b.call("ps_w1", "bench-ps-w1", seed, base, warm, reps)
            res.add("W1", case, "pyscript.storage", r["times"])
    # main-thread blocking, a separate pass (the heartbeat costs a little itself)
    base, reps = cfg["w1_points"][0][0], cfg["w1_block_reps"]
    log(f"W1 main-thread blocking @{base}")
    block: dict[str, Any] = {}
    block["chatmem"] = b.call("w1", "bench-cm-w1b", dur, seed, base, warm, reps, True)["block"]
    for s in ("raw", "dexie", "rewrite"):
        block[s] = b.js(
            "w1",
            s,
            {
                "db": f"bench-{s}-w1b",
                "durability": dur,
                "seed": seed,
                "base": base,
                "warmup": warm,
                "reps": reps,
                "blocking": True,
            },
        )["block"]
    block["pyscript.storage"] = b.call("ps_w1", "bench-ps-w1b", seed, base, warm, reps, True)["block"]
    big = cfg["w1_points"][-1][0]
    if big != base:
        block[f"chatmem @{big}"] = b.call("w1", "bench-cm-w1b", dur, seed, big, warm, reps, True)["block"]
        block[f"rewrite @{big}"] = b.js(
            "w1",
            "rewrite",
            {
                "db": "bench-rewrite-w1b",
                "durability": dur,
                "seed": seed,
                "base": big,
                "warmup": warm,
                "reps": reps,
                "blocking": True,
            },
        )["block"]
    res.extra["w1_blocking"] = {
        k: {
            "longest_p50": report.stats([x[0] for x in v])["p50"],
            "longest_max": max(x[0] for x in v),
            "busy_p50": report.stats([x[1] for x in v])["p50"],
            "n": len(v),
            "base": big if "@" in k else base,
        }
        for k, v in block.items()
    }
    for k, v in res.extra["w1_blocking"].items():
        log(
            f"  blocking {k}: longest p50 {v['longest_p50']:.2f} ms, max {v['longest_max']:.2f}, busy p50 {v['busy_p50']:.2f}"
        )
    # where chatmem's append time goes
    log("W1 profile (chatmem)")
    base, reps = cfg["w1_points"][0]
    parts = b.call("w1", "bench-cm-w1p", dur, seed, base, warm, reps, False, True)["parts"]
    res.extra["w1_profile"] = _profile(parts)


def _profile(parts: list[list[float]]) -> dict[str, float]:
    """Medians of each part: total, Python outside the bridge, JSON in Python, FFI + scheduling,
    JSON.parse in JS, the bridge method (IndexedDB transaction included), JSON.stringify in JS."""
    p50 = lambda i: report.stats([p[i] if i < len(p) else 0.0 for p in parts])["p50"]  # noqa: E731
    tot, bridge, js, jparse, method, jstr, batched = (p50(i) for i in range(7))
    return {
        "total_p50": tot,
        "bridge_call_p50": bridge,
        "js_call_p50": js,
        "python_outside_bridge": tot - bridge - batched,
        "json_at_bridge": bridge - js,
        "ffi_and_scheduling": js - jparse - method - jstr,
        "js_json_parse": jparse,
        "bridge_method": method,
        "js_json_stringify": jstr,
        "batched_write": batched,
    }


def w2(b: Browser, cfg: dict[str, Any], res: Results, keep: bool = True) -> None:
    """W2 bulk import: n messages into a new session in one call; messages per second."""
    seed, dur = cfg["seed"], cfg["durability"]
    for n, reps in cfg["w2_points"]:
        case = f"import {n:,}"
        log(f"W2 {case}")
        r = b.call("w2", "bench-cm-w2", dur, seed, n, reps + 1, keep and n == cfg["w2_points"][0][0], True)
        res.add("W2", case, "chatmem", r["times"][1:], n_msgs=n)
        res.extra.setdefault("w2_profile", {})[case] = _profile(r["parts"][1:])
        for s in ("raw", "rawschema", "rawmin", "dexie", "rewrite"):
            r = b.js(
                "w2",
                s,
                {
                    "db": f"bench-{s}-w2",
                    "durability": dur,
                    "seed": seed,
                    "n": n,
                    "reps": reps + 1,
                    "keep": keep and n == cfg["w2_points"][0][0],
                },
            )
            res.add("W2", case, s, r["times"][1:], n_msgs=n)
        if n <= 10000:
            r = b.call("ps_w2", "bench-ps-w2", seed, n, cfg["w2_ps_reps"])
            res.add("W2", case, "pyscript.storage", r["times"], n_msgs=n)


def w3(b: Browser, cfg: dict[str, Any], res: Results) -> None:
    """W3 window: the context for the newest turn of an n-message session under a token budget."""
    seed, dur, n, budget, reps = cfg["seed"], cfg["durability"], cfg["w3_n"], cfg["w3_budget"], cfg["w3_reps"]
    case = f"window {n:,} / {budget:,} tok"
    log(f"W3 {case}")
    r = b.call("w3", "bench-cm-w3", dur, seed, n, budget, 64, reps)
    res.add("W3", case, "chatmem", r["times"])
    res.add("W3", case, "chatmem fit_window only", r["fit_only"])
    res.extra["w3_pyodide"] = {k: r[k] for k in ("kept", "tokens", "kept_full", "same")}
    for s in ("raw", "dexie", "rewrite"):
        r = b.js(
            "w3",
            s,
            {
                "db": f"bench-{s}-w3",
                "durability": dur,
                "seed": seed,
                "n": n,
                "k": 64,
                "budget": budget,
                "reps": reps,
            },
        )
        res.add("W3", case, s, r["times"])


def w5(b: Browser, cfg: dict[str, Any], res: Results) -> None:
    """W5 export: every session and message as one JSON document (W2 left the data)."""
    n, reps = cfg["w2_points"][0]
    case = f"export {reps + 1} x {n:,} msgs"
    log(f"W5 {case}")
    r = b.call("w5", "bench-cm-w2", cfg["w5_reps"])
    res.add("W5", case, "chatmem", r["times"], n_msgs=(reps + 1) * n, bytes=r["bytes"])
    for s in ("raw", "dexie", "rewrite"):
        r = b.js(
            "w5",
            s,
            {
                "db": f"bench-{s}-w2",
                "durability": cfg["durability"],
                "reps": cfg["w5_reps"],
                "sessions": reps + 1,
            },
        )
        res.add("W5", case, s, r["times"], n_msgs=(reps + 1) * n, bytes=r["bytes"])


def w6(b: Browser, cfg: dict[str, Any], res: Results) -> None:
    """W6 cold start: a new page to window.chatmem.ready, and to the first query answered
    (open + newest 50 messages) over the data W2 stored; against a bare Pyodide boot."""
    n, reps = cfg["w2_points"][0]
    stored = (reps + 1) * n
    case = f"cold page, {stored:,} stored"
    log(f"W6 {case}")
    ready, first, bare = [], [], []
    for _ in range(cfg["w6_loads"]):
        p = b.context.new_page()
        p.set_default_timeout(300_000)
        p.goto(b.site + "bench/bare.html")
        bare.append(p.evaluate("window.bareReady"))
        p.close()
        p = b.context.new_page()
        p.set_default_timeout(300_000)
        p.goto(b.site)
        ready.append(p.evaluate("window.chatmem.ready.then(() => performance.now())"))
        t = p.evaluate(
            "c => window.chatmem.runPython(c)",
            (
                "import chatmem, js\n"
                "mem = await chatmem.open('bench-cm-w2')\n"
                "ss = await mem.sessions.list(limit=1)\n"
                "msgs = await mem.messages.list(ss[0].session_id, limit=50, newest_first=True)\n"
                "await mem.close()\n"
                "[js.performance.now(), len(msgs)]"
            ),
        )
        first.append(t[0])
        p.close()
    res.add("W6", case, "bare Pyodide boot", bare)
    res.add("W6", case, "chatmem ready", ready)
    res.add("W6", case, "chatmem first query", first)


def w7(b: Browser, cfg: dict[str, Any], res: Results) -> None:
    """W7 outbox drain: ``w7_ops`` operations to the reference sync server on 127.0.0.1,
    which answers ~10% of pushes with a 500; in the page and on CPython, same server;
    plain and end-to-end encrypted (AES-256-GCM per op) in the same run."""
    from chatmem.server import running_server
    from chatmem.server.faults import Fault, FaultPlan

    n, reps, rate = cfg["w7_ops"], cfg["w7_reps"], cfg["w7_fail_rate"]
    case = f"drain {n:,} ops, {rate:.0%} 500s"
    log(f"W7 {case}")
    modes = ("", "bench passphrase")  # plain, then end-to-end encrypted: interleaved per rep
    for where in ("chromium", "cpython"):
        runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
        for i in range(reps):
            for passphrase in modes:
                plan = FaultPlan().random(
                    rate, seed=cfg["seed"] + i, kinds=(Fault("status", 500),), after_ratio=0.0
                )
                with running_server(api_keys=["bench"], faults=plan) as srv:
                    if where == "chromium":
                        r = b.call("w7", f"bench-cm-w7-{i}", srv.url, n, cfg["seed"] + i, passphrase)
                    else:
                        import cpython

                        (r,) = cpython.w7(srv.url, n, cfg["seed"] + i, 1, passphrase)
                    applied = srv.storage.applied_op_count(srv.space("bench"))
                if r["left"] or r["dead"] or applied != r["ops"]:
                    raise SystemExit(f"W7 {where}: {r} but the server applied {applied}")
                runs[passphrase].append(r)
        for passphrase, got in runs.items():
            system = ("chatmem" if where == "chromium" else "chatmem sqlite") + (" e2e" if passphrase else "")
            res.add("W7", case, system, [r["ms"] for r in got], where=where, n_msgs=got[0]["ops"])
            res.extra.setdefault("w7", {})[where + (" e2e" if passphrase else "")] = got


def w4(b: Browser, cfg: dict[str, Any], res: Results) -> None:
    """W4 keyword search (and W6's first query with the query index) over ``w4_messages``
    stored messages: bench/search/bench_browser.py, in its own Chromium profile because
    it fills IndexedDB with 100,000 messages; the substring-scan baseline runs in the
    same page and run as chatmem's BM25."""
    import subprocess
    import tempfile

    n, q = cfg["w4_messages"], cfg["w4_queries"]
    log(f"W4 keyword search over {n:,} messages (own profile)")
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "w4.json"
        cmd = [
            sys.executable,
            str(ROOT / "bench" / "search" / "bench_browser.py"),
            "--messages",
            str(n),
            "--sessions",
            str(max(1, n // 100)),
            "--queries",
            str(q),
            "--json",
            str(out),
            "--dist",
            str(Path(os.environ.get("CHATMEM_DIST", ROOT / "dist"))),
            "--port",
            "0",
        ]
        subprocess.run(cmd, check=True, cwd=ROOT)
        m = json.loads(out.read_text())
    t = m["timings"]
    case = f"search {n:,} msgs"
    s = t["samples"]
    res.add("W4", case, "chatmem keyword (BM25, DuckDB-Wasm)", s["keyword"])
    res.add("W4", case, "chatmem keyword, a top-50 word", s["keyword_common"])
    res.add("W4", case, "chatmem keyword + role/date filters", s["keyword_filtered"])
    res.add("W4", case, "original substring scan (Python, in memory)", s["substring_scan"])
    res.add("W4", case, "chatmem semantic (384-dim, approximate index)", s["semantic"])
    res.add("W4", case, "chatmem hybrid", s["hybrid"])
    if "semantic_exact" in s:  # the same page, in turns: every vector scanned
        res.add("W4", case, "semantic, every vector scanned (baseline)", s["semantic_exact"])
        res.add("W4", case, "hybrid, every vector scanned (baseline)", s["hybrid_exact"])
    res.extra["w4"] = {k: v for k, v in m.items() if k != "timings"}
    res.extra["w4"]["ratio_p50"] = t["ratio_p50"]
    res.extra["w4"]["figures_wait_s"] = t.get("figures_wait_s")  # timed once the kept figures were read


def w8(cfg: dict[str, Any], res: Results) -> None:
    """W8 (CPython, no browser): bench/server_load.py — devices x ops through 3 server processes
    over one PostgreSQL with 10% faults, the same on one SQLite server, and live-change latency."""
    import server_load

    out = server_load.run_w8(cfg, log)
    case = f"{out['devices']} devices / {out['accounts']} accounts x {out['ops']} ops, 10% faults"
    for kind, system in (
        ("postgres", f"server x{out['instances']} PostgreSQL"),
        ("sqlite", "server x1 SQLite"),
    ):
        r = out[kind]
        res.add(
            "W8",
            case,
            system,
            r["lat"],
            where="cpython",
            ops_per_s=round(r["ops_per_s"]),
            pushes_per_s=round(r["pushes_per_s"]),
        )
        log(
            f"  W8 {system}: {r['ops_per_s']:,.0f} ops/s, {r['pushes_per_s']:,.0f} pushes/s, exactly once, converged"
        )
    res.add(
        "W8",
        "live change: push on one instance -> stream event on another",
        "server x2 PostgreSQL",
        out["live_ms"],
        where="cpython",
    )
    res.extra["w8"] = {
        k: ({kk: vv for kk, vv in v.items() if kk != "lat"} if isinstance(v, dict) else v)
        for k, v in out.items()
        if k != "live_ms"
    }


WORKLOADS: dict[str, Callable[[Browser, dict[str, Any], Results], None]] = {
    "W1": w1,
    "W2": w2,
    "W3": w3,
    "W6": w6,  # before W5, which exports W2's data and then deletes it
    "W5": w5,
    "W7": w7,
    "W4": w4,
    "W9": scale.w9,
    "W10": embedbg.w10,
}
#: the large-history cases, run with --scale (or named in --only): minutes each with today's index
SCALE = {"W4", "W9"}

# ---------------------------------------------------------------------------- targets


def targets(res: Results, cfg: dict[str, Any]) -> list[dict[str, Any]]:
    out = []

    def t(name: str, goal: str, measured: str, ok: bool | None) -> None:
        out.append(
            {
                "target": name,
                "goal": goal,
                "measured": measured,
                "status": {True: "met", False: "missed", None: "not measured"}.get(ok, ok),
            }
        )

    b1 = cfg["w1_points"][0][0]
    c1, r1, w1r = (res.find("W1", f"append @{b1:,}", s) for s in ("chatmem", "raw", "rewrite"))
    if c1 and r1:
        q = c1["p50"] / r1["p50"]
        t(
            "W1 vs raw",
            "chatmem p50 <= 1.5x raw IndexedDB",
            f"{report.fmt(c1['p50'])} vs {report.fmt(r1['p50'])} ms = {q:.2f}x",
            q <= 1.5,
        )
    for base, want in ((1000, 6), (5000, 25)):
        c, w = res.find("W1", f"append @{base:,}", "chatmem"), res.find("W1", f"append @{base:,}", "rewrite")
        if c and w:
            q = w["p50"] / c["p50"]
            t(
                f"W1 vs rewrite @{base:,}",
                f">= {want}x faster than whole-session rewrite",
                f"{report.fmt(w['p50'])} vs {report.fmt(c['p50'])} ms = {q:.1f}x",
                q >= want,
            )
    blk = res.extra.get("w1_blocking", {}).get("chatmem")
    if blk:
        t(
            "W1 main-thread blocking",
            "< 2 ms per append",
            f"longest task p50 {blk['longest_p50']:.2f} ms (max {blk['longest_max']:.2f}), busy p50 {blk['busy_p50']:.2f} ms",
            blk["longest_p50"] < 2,
        )
    n2 = cfg["w2_points"][0][0]
    c2, m2, r2, w2r = (res.find("W2", f"import {n2:,}", s) for s in ("chatmem", "rawmin", "raw", "rewrite"))
    if c2 and m2 and r2:
        q = c2["throughput"] / m2["throughput"]
        t(
            "W2 throughput",
            ">= 70% of the raw per-record limit",
            f"{c2['throughput']:,.0f} vs {m2['throughput']:,.0f} msg/s = {q:.0%} "
            f"({c2['throughput'] / r2['throughput']:.0%} of raw with the same outbox writes)",
            q >= 0.7,
        )
    if w2r and m2:
        t(
            "W2 rewrite-model note",
            "report the one-record figure beside ours",
            f"whole session as one record: {w2r['throughput']:,.0f} msg/s = {w2r['throughput'] / m2['throughput']:.1f}x the per-record limit",
            "reported",
        )
    c3 = res.find("W3", f"window {cfg['w3_n']:,} / {cfg['w3_budget']:,} tok", "chatmem")
    if c3:
        t("W3 window", "< 10 ms p50 in Pyodide", f"{report.fmt(c3['p50'])} ms", c3["p50"] < 10)
    kw = res.find("W4", f"search {cfg['w4_messages']:,} msgs", "chatmem keyword (BM25, DuckDB-Wasm)")
    sc = res.find("W4", f"search {cfg['w4_messages']:,} msgs", "original substring scan (Python, in memory)")
    if kw and sc:
        q = sc["p50"] / kw["p50"]
        t(
            "W4 keyword search",
            "< 8 ms p50 over 100,000, >= 10x the substring scan",
            f"{report.fmt(kw['p50'])} ms p50, {q:.1f}x the scan ({report.fmt(sc['p50'])} ms)",
            kw["p50"] < 8 and q >= 10,
        )
    else:
        t("W4 keyword search", "< 8 ms p50 over 100,000, >= 10x the substring scan", "not run", None)
    w4 = res.extra.get("w4")
    if w4 and "first_query_cached_s" in w4:
        t(
            "W6 first query with 100,000 stored (cached index)",
            "report",
            f"{w4['first_query_cached_s']:.1f} s (no cached index: {w4['first_query_uncached_s']:.1f} s)",
            "reported",
        )
    stored = (cfg["w2_points"][0][1] + 1) * cfg["w2_points"][0][0]
    rd, br = (
        res.find("W6", f"cold page, {stored:,} stored", s) for s in ("chatmem ready", "bare Pyodide boot")
    )
    if rd and br:
        q = rd["p50"] / br["p50"]
        t(
            "W6 time to usable page",
            "<= 1.25x bare Pyodide boot (+ DuckDB instantiate, not loaded yet)",
            f"{report.fmt(rd['p50'])} vs {report.fmt(br['p50'])} ms = {q:.2f}x",
            q <= 1.25,
        )
    if (w10 := embedbg.target(res)) is not None:
        out.append(w10)
    w8r = res.extra.get("w8")
    if w8r:
        pg_, sq = w8r["postgres"], w8r["sqlite"]
        t(
            "W8 correctness",
            "every op applied exactly once, devices converge, no cross-account read",
            f"{pg_['acked']:,} ops on {w8r['instances']} instances and {sq['acked']:,} on SQLite: exactly once, "
            "converged, 0 foreign records",
            pg_["exactly_once"] and pg_["converged"] and pg_["foreign"] == 0,
        )
        t(
            "W8 throughput",
            "report PostgreSQL x3 vs SQLite x1",
            f"{pg_['ops_per_s']:,.0f} vs {sq['ops_per_s']:,.0f} ops/s; push p50/p95 {pg_['p50_ms']:.0f}/{pg_['p95_ms']:.0f} "
            f"vs {sq['p50_ms']:.0f}/{sq['p95_ms']:.0f} ms",
            "reported",
        )
        t(
            "W8 live change",
            "another device sees a change within 1 s",
            f"p50 {w8r['live_p50_ms']:.0f} ms, p95 {w8r['live_p95_ms']:.0f} ms",
            w8r["live_p95_ms"] < 1000,
        )
    return out


# ---------------------------------------------------------------------------- main


def config(args: argparse.Namespace) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "seed": args.seed,
        "durability": args.durability,
        "w1_points": [(1000, 200), (5000, 100)],
        "w1_warmup": 20,
        "w1_block_reps": 60,
        "w2_points": [(10000, 4)],
        "w2_ps_reps": 2,
        "w3_n": 10000,
        "w3_budget": 8000,
        "w3_reps": 40,
        "w5_reps": 3,
        "w6_loads": 8,
        "w7_ops": 1000,
        "w7_reps": 3,
        "w7_fail_rate": 0.10,
        "w4_messages": 100_000,
        "w4_queries": 200,
        "w9_messages": 50_000,
        "w10_messages": 100_000 if getattr(args, "scale", False) else 10_000,
    }
    if args.large:
        cfg["w2_points"].append((100000, 2))
    cfg.update(w8_devices=100, w8_accounts=10, w8_ops=50, w8_instances=3, w8_live=50)
    if args.w8_full:
        cfg.update(w8_devices=200, w8_accounts=20, w8_live=100)
    if args.quick:
        cfg.update(
            w1_points=[(200, 20), (1000, 10)],
            w1_warmup=3,
            w1_block_reps=10,
            w2_points=[(1000, 2)],
            w2_ps_reps=1,
            w3_n=1000,
            w3_reps=5,
            w5_reps=1,
            w6_loads=1,
            w7_ops=100,
            w7_reps=1,
            w4_messages=2000,
            w4_queries=20,
            w9_messages=2000,
            w10_messages=1000,
            w8_devices=20,
            w8_accounts=4,
            w8_ops=10,
            w8_live=10,
        )
    return cfg


def open_page(on_disk: bool = False) -> tuple[Browser, Callable[[], None]]:
    """The bench page on a fresh static server (``on_disk``: see ``Browser``); returns it
    and the function that closes both."""
    dist = Path(os.environ.get("CHATMEM_DIST", ROOT / "dist"))
    assemble_page(dist)
    srv, site = serving.serve_in_thread(dist, 0)
    b = Browser(site, on_disk)

    def stop() -> None:
        b.close()
        srv.shutdown()

    return b, stop


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--large", action="store_true", help="W2 also at 100,000 messages")
    ap.add_argument("--quick", action="store_true", help="tiny sizes, to check that everything runs")
    ap.add_argument("--durability", choices=("relaxed", "strict"), default="relaxed")
    ap.add_argument("--seed", type=int, default=20261101)
    ap.add_argument("--only", default="", help="comma-separated workloads, e.g. W1,W3 (CPython runs W1-W3)")
    ap.add_argument(
        "--w8-full", action="store_true", help="W8 with 200 devices in 20 accounts (default 100 in 10)"
    )
    ap.add_argument(
        "--in-memory",
        action="store_true",
        help="the page in a fresh in-memory browser context (default: a profile on disk, as a user's)",
    )
    ap.add_argument("--no-cpython", action="store_true")
    ap.add_argument("--no-browser", action="store_true")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument(
        "--render",
        action="store_true",
        help="only re-render results.md and the charts from results.json (and huge.json, if there)",
    )
    ap.add_argument(
        "--quality",
        action="store_true",
        help="retrieval quality on LoCoMo dev (R@5, R@10, hit@10, p50) beside rank_bm25, on CPython and in the page",
    )
    ap.add_argument("--conversations", type=int, default=None, help="with --quality: only the first N")
    ap.add_argument(
        "--facts",
        action="store_true",
        help="facts learnt from bench/facts/personas.json: recall, stale and junk rates, and extraction speed",
    )
    ap.add_argument(
        "--scale",
        action="store_true",
        help="also the 100,000-message cases: W4 search and first queries, W9 ChatGPT import",
    )
    ap.add_argument(
        "--huge",
        action="store_true",
        help="only the large-history run: --huge-n messages stored, windowed, exported, searched in one page",
    )
    ap.add_argument("--huge-n", type=int, default=1_000_000, help="messages for --huge (default 1,000,000)")
    args = ap.parse_args()
    if args.huge:
        return modes.huge_main(args, open_page, _cpu(), log)
    if args.quality:
        return modes.quality_main(args, open_page, log)
    if args.facts:
        return modes.facts_main(args, log)
    if args.render:
        doc = json.loads((args.out / "results.json").read_text())
        res = Results()
        res.rows, res.extra = doc["rows"], doc["extra"]
        huge = args.out / "huge.json"
        write(
            args.out, doc["env"], res, doc["targets"], json.loads(huge.read_text()) if huge.exists() else None
        )
        return 0
    cfg = config(args)
    only = {w.strip().upper() for w in args.only.split(",") if w.strip()}
    res = Results()
    env: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "cores": os.cpu_count(),
        "machine": platform.machine(),
        "os": platform.platform(),
        "cpu": _cpu(),
        "python": platform.python_version(),
        "durability": cfg["durability"],
        "profile": "in memory" if args.in_memory else "on disk",
        "seed": cfg["seed"],
        "config": cfg,
    }
    # the two generators must agree, or the comparison is not over the same data
    dist = Path(os.environ.get("CHATMEM_DIST", ROOT / "dist"))
    if not args.no_browser and (not only or only - {"W8"}):
        assemble_page(dist)
        srv, site = serving.serve_in_thread(dist, 0)
        # IndexedDB and OPFS in a profile on disk, as in a user's browser (an in-memory
        # context keeps them in RAM: other write and start-up costs)
        b = Browser(site, on_disk=not args.in_memory)
        try:
            env.update(b.env())
            ck_js = b.js("checksum", cfg["seed"], 2000)
            ck_py = payloads.checksum(payloads.messages(cfg["seed"], 2000))
            if ck_js != ck_py:
                raise SystemExit(f"payload generators disagree: js {ck_js} py {ck_py}")
            log(
                f"Chromium {env['chromium']}, Pyodide {env['pyodide']}, {env['cores']} cores, durability {cfg['durability']}"
            )
            needs_w2 = {"W5", "W6"} & only and "W2" not in only
            for name, fn in WORKLOADS.items():
                if name in SCALE and not args.scale and name not in only:
                    log(f"{name} skipped (a 100,000-message history case: --scale)")
                    continue
                if only and name not in only:
                    if name == "W2" and needs_w2:
                        w2(b, cfg, Results())  # the data W5/W6 read, not reported
                    continue
                fn(b, cfg, res)
            if b.errors:
                log(f"page errors: {b.errors}")
        finally:
            b.close()
            srv.shutdown()
    if not args.no_cpython and (not only or "W8" in only):
        w8(cfg, res)
    if not args.no_cpython and (not only or only & {"W1", "W2", "W3"}):
        import cpython

        c_cfg = dict(cfg, w2_n=cfg["w2_points"][0][0], w2_reps=cfg["w2_points"][0][1] + 1)
        out = cpython.run_all(c_cfg, log)
        res.extra["w3_compare"] = out.pop("w3_compare")
        for (wl, case, system), times in out.items():
            if only and wl not in only:
                continue
            n = c_cfg["w2_n"] if wl == "W2" else None
            res.add(wl, case, system, times, where="cpython", n_msgs=n)
    res.ratios()
    tg = targets(res, cfg)
    write(args.out, env, res, tg)
    return 0


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def write(
    out: Path, env: dict[str, Any], res: Results, tg: list[dict[str, Any]], huge: dict[str, Any] | None = None
) -> None:
    """results.json, results.md and the charts; ``huge`` (``--render`` with a huge.json
    beside results.json) fills the 1,000,000-message goal rows and adds its section."""
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.svg"):
        old.unlink()
    gl = goals.rows(res, env["config"], huge)
    doc = {"env": env, "rows": res.rows, "extra": res.extra, "targets": tg, "goals": gl}
    (out / "results.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    md = [
        "# chatmem benchmark results\n",
        f"{env['date']} · `python build.py bench` · Chromium {env.get('chromium', '–')} · Pyodide {env.get('pyodide', '–')} · "
        f"CPython {env['python']} · {env['cores']} cores ({env['cpu']}) · IndexedDB durability **{env['durability']}**, "
        f"profile {env.get('profile', 'in memory')} · seed {env['seed']}\n",
        "## Table\n",
        "Times in ms per operation (W1: one append; W2: the whole import; W3: one window; W5: the whole export; "
        "W6: from navigation start). `vs raw` = this ÷ raw in the same run; `chatmem ÷ this` = chatmem's p50 ÷ this "
        "row's p50 (below 1: chatmem is faster). CPython rows compare chatmem's store of the same kind.\n",
        report.markdown(res.rows),
        goals.markdown(gl),
        *([scale.huge_markdown(huge)] if huge else []),
        "## Targets\n",
        "| target | goal | measured | status |",
        "|---|---|---|---|",
        *[f"| {x['target']} | {x['goal']} | {x['measured']} | {x['status']} |" for x in tg],
        "",
    ]
    if "w1_blocking" in res.extra:
        md += [
            "## W1 main-thread blocking per append\n",
            "Longest uninterrupted main-thread task during each awaited append (a MessageChannel heartbeat), "
            "and the busy time summed over the append (gaps >= 0.2 ms).\n",
            "| system | messages in session | longest task p50 | longest task max | busy p50 |",
            "|---|---:|---:|---:|---:|",
            *[
                f"| {k} | {v['base']:,} | {v['longest_p50']:.2f} ms | {v['longest_max']:.2f} ms | {v['busy_p50']:.2f} ms |"
                for k, v in res.extra["w1_blocking"].items()
            ],
            "",
        ]
    for key, title in (("w1_profile", "W1 append"), ("w2_profile", "W2 import")):
        prof = res.extra.get(key)
        if not prof:
            continue
        items = prof.items() if key == "w2_profile" else [("", prof)]
        md += [
            f"## Where chatmem's time goes: {title}\n",
            "Medians of each part, measured separately (they need not add up exactly).\n",
            "| case | total | Python (validation, records, outbox ops, models) | JSON in Python | FFI crossing + event-loop hops "
            "| JSON.parse in JS | bridge method incl. IndexedDB transaction | JSON.stringify in JS |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
            *[
                f"| {c or 'append'} | {p['total_p50']:.2f} ms | {p['python_outside_bridge']:.2f} ms | {p['json_at_bridge']:.2f} ms "
                f"| {p['ffi_and_scheduling']:.2f} ms | {p['js_json_parse']:.2f} ms | {p['bridge_method']:.2f} ms | {p['js_json_stringify']:.2f} ms |"
                for c, p in items
            ],
            "",
        ]
        md += [
            f"{c or 'append'}: {p['batched_write']:.2f} ms in the batch fed to its transaction in chunks (validating "
            "and building the records, their JSON and the IndexedDB transaction overlap, so they are not split; "
            "Python is what comes before and after it).\n"
            for c, p in items
            if p.get("batched_write")
        ]
    if "w3_compare" in res.extra:
        c = res.extra["w3_compare"]
        md += [
            "## W3: chatmem's window against LangChain's trim_messages (same budget, same token costs)\n",
            f"- chatmem kept {c['chatmem_kept']} messages ({c['chatmem_tokens']} tokens with the system prompt), "
            f"trim_messages kept {c['trim_kept']} ({c['trim_tokens']} tokens); {c['common']} in common.",
            f"- oldest kept: chatmem #{c['chatmem_first']}, trim_messages #{c['trim_first']} (index, role).",
            f"- only chatmem: {c['only_chatmem'] or 'none'}; only trim_messages: {c['only_trim'] or 'none'}.",
            f"- chatmem reading pages from the store keeps exactly what it keeps over all records: {c['chatmem_paged_equals_full']}.",
            "",
        ]
    charts = []
    for wl in sorted({r["workload"] for r in res.rows}):
        rows = [r for r in res.rows if r["workload"] == wl]
        name = f"{wl.lower()}.svg"
        (out / name).write_text(report.svg_chart(f"{wl}: {WORKLOAD_TITLES.get(wl, wl)}", rows))
        charts.append(f"![{wl}]({name})")
    md += ["## Charts\n", *charts, ""]
    (out / "results.md").write_text("\n".join(md))
    print("\n" + report.markdown(res.rows))
    for x in tg:
        print(f"{x['status']:>12}  {x['target']}: {x['measured']}  (goal: {x['goal']})")
    print("\n" + goals.markdown(gl))
    log(f"wrote {out}/results.json, results.md and {len(charts)} charts")


WORKLOAD_TITLES = {
    "W1": "append one message, awaited until durable",
    "W2": "bulk import",
    "W3": "context window for the newest turn",
    "W5": "export everything to JSON",
    "W6": "cold start",
    "W7": "outbox drain to the sync server",
    "W4": "ranked keyword search",
    "W8": "sync server: many devices, several instances over PostgreSQL",
    "W9": "a ChatGPT export imported until a search finds it",
}

if __name__ == "__main__":
    sys.exit(main())
