"""The large-history cases, driven from the host (the page side is bench/page/scalepy.py).

- ``w9``: a 50,000-message ChatGPT export imported through ``mem.import_sessions``
  until a keyword search finds a message from it (default run).
- ``run_huge``: ``--huge``: ``--huge-n`` messages (1,000,000 by default) stored,
  windowed, exported and searched in one page, phase by phase, with the heaps the
  page reports and the renderer process's resident memory read from ``/proc``
  (the page, its Pyodide and the DuckDB-Wasm worker share that process). A phase
  that fails or outlives its time limit ends the run with where, at what count
  and with how much memory, instead of hanging.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any, Callable

__all__ = ["w9", "run_huge", "RendererMemory", "huge_markdown", "short_error"]

MB = 1 << 20


class RendererMemory:
    """Samples the resident memory of this process's Chromium renderers every ``every``
    seconds (a thread reading ``/proc``): the current and peak (``VmHWM``) RSS of the
    largest renderer, and the largest sum over all Chromium processes seen."""

    def __init__(self, every: float = 1.0, log: Callable[[str], None] | None = None, log_every: float = 60.0):
        self.every = every
        self.peak_total = 0
        self.last: dict[str, int] = {}
        #: with ``log``: a line every ``log_every`` seconds into a phase (set ``phase``), so a
        #: long first search shows it is alive and how its memory grows
        self.log, self.log_every = log, log_every
        self.phase: tuple[str, float] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _descendants(root: int) -> list[int]:
        kids: dict[int, list[int]] = {}
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                try:
                    ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                kids.setdefault(ppid, []).append(int(d.name))
        out, todo = [], [root]
        while todo:
            for k in kids.get(todo.pop(), []):
                out.append(k)
                todo.append(k)
        return out

    @staticmethod
    def _status(pid: int) -> tuple[bool, int, int]:
        """(is a renderer, VmRSS, VmHWM) in bytes."""
        try:
            renderer = b"--type=renderer" in Path(f"/proc/{pid}/cmdline").read_bytes()
            fields = dict(
                line.split(":", 1)
                for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                if ":" in line
            )
        except OSError:
            return False, 0, 0
        kb = lambda k: int(fields.get(k, "0 kB").split()[0]) * 1024  # noqa: E731
        return renderer, kb("VmRSS"), kb("VmHWM")

    def sample(self) -> dict[str, int]:
        rss = hwm = total = 0
        for pid in self._descendants(os.getpid()):
            renderer, r, h = self._status(pid)
            total += r
            if renderer and r > rss:
                rss, hwm = r, max(hwm, h)
            elif renderer:
                hwm = max(hwm, h)
        self.peak_total = max(self.peak_total, total)
        self.last = {
            "renderer_rss": rss,
            "renderer_peak": hwm,
            "chromium_total_rss": total,
            "chromium_total_peak_sampled": self.peak_total,
        }
        return self.last

    def _run(self) -> None:
        current, next_log = None, 0.0
        while not self._stop.wait(self.every):
            m = self.sample()
            phase = self.phase
            if not (self.log and phase):
                continue
            if phase is not current:
                current, next_log = phase, self.log_every
            took = time.perf_counter() - phase[1]
            if took >= next_log:
                next_log += self.log_every
                self.log(
                    f"  … {took:,.0f} s into {phase[0]}: renderer RSS {_mb(m['renderer_rss'])}, "
                    f"all Chromium processes {_mb(m['chromium_total_rss'])}"
                )

    def reset_peaks(self) -> None:
        """Start each renderer's ``VmHWM`` afresh (``clear_refs`` 5), so that the next phase's
        peak is its own: a page loaded again may keep its renderer process."""
        for pid in self._descendants(os.getpid()):
            if self._status(pid)[0]:
                try:
                    Path(f"/proc/{pid}/clear_refs").write_text("5")
                except OSError:
                    pass

    def start(self) -> RendererMemory:
        self.sample()
        self._thread.start()
        return self

    def stop(self) -> dict[str, int]:
        self._stop.set()
        return self.sample()


def w9(b: Any, cfg: dict[str, Any], res: Any) -> None:
    """W9: a ChatGPT export of ``w9_messages`` messages -> searchable (import + first hit)."""
    n = cfg["w9_messages"]
    case = f"ChatGPT export of {n:,} msgs -> searchable"
    b.log(f"W9 {case}")
    r = b.call("chatgpt_import", "bench-cm-w9", n, mod="scalepy")
    if not r["found"] or r["messages"] != n:
        raise SystemExit(f"W9: the import did not become searchable: {r}")
    res.add("W9", case, "chatmem import + first hit", [r["total_ms"]], n_msgs=n)
    res.add("W9", case, "chatmem import_sessions only", [r["import_ms"]], n_msgs=n)
    res.add("W9", case, "then the first search that finds it", [r["search_ms"]])
    res.extra["w9"] = r


def short_error(error: str, limit: int = 240) -> str:
    """The first line of an error without Playwright's and Pyodide's wrappers."""
    line = error.strip().splitlines()[0] if error.strip() else ""
    for prefix in ("Error: Page.evaluate: ", "PythonError: "):
        line = line.removeprefix(prefix)
    return line[:limit]


def _mb(x: int | None) -> str:
    return "–" if not x else f"{x / MB:,.0f} MB"


def _duck(h: dict[str, Any]) -> str:
    """DuckDB's buffers, or why not: "busy" when the worker did not answer within 10 s
    (e.g. saving the index file in the background), "–" when no index is open."""
    err = h.get("duckdb_buffer_error", "")
    return "busy" if err.startswith("TimeoutError") else "error" if err else _mb(h.get("duckdb_buffer"))


def _heap_line(h: dict[str, Any], mem: dict[str, int]) -> str:
    parts = [f"Pyodide Wasm {_mb(h.get('pyodide_wasm'))}", f"JS heap {_mb(h.get('js_heap_used'))}"]
    if "duckdb_buffer" in h or "duckdb_buffer_error" in h:
        parts.append(f"DuckDB buffers {_duck(h)}")
    parts.append(f"renderer RSS {_mb(mem.get('renderer_rss'))} (peak {_mb(mem.get('renderer_peak'))})")
    return ", ".join(parts)


def run_huge(
    b: Any, n: int, log: Callable[[str], None], *, chunk: int = 0, queries: int = 100, per_session: int = 100
) -> dict[str, Any]:
    """The ``--huge`` run; returns ``{n, phases: [...], failed, ...}`` (never raises for a
    failure of chatmem: it is the result)."""
    chunk = chunk or min(50_000, max(5_000, n // 20))
    mon = RendererMemory(log=log).start()
    out: dict[str, Any] = {"n": n, "phases": [], "failed": None, "measurable": MEASURABLE}
    stored = 0

    def phase(name: str, fn: str, *args: Any, limit_s: float, reload: bool = False) -> dict[str, Any] | None:
        if reload:
            b.reload()
            mon.reset_peaks()
        b.long_tasks()  # the harness's own calls between phases are not the phase's
        t = time.perf_counter()
        mon.phase = (name, t)
        try:
            r = b.call(fn, *args, limit_s, mod="scalepy")
        except Exception as e:  # noqa: BLE001  (a crash, an OOM, a timeout: reported, not raised)
            try:
                h = b.call("heap", mod="scalepy")
            except Exception as e2:  # noqa: BLE001
                h = {"unavailable": str(e2).splitlines()[0][:200]}
            out["failed"] = {
                "phase": name,
                "stored": stored,
                "after_s": round(time.perf_counter() - t, 1),
                "error": f"{type(e).__name__}: {str(e).strip()[:600]}",
                "heap": h,
                "memory": mon.sample(),
            }
            log(
                f"HUGE FAILED in {name} with {stored:,} stored after {time.perf_counter() - t:.0f} s: "
                f"{short_error(out['failed']['error'])}; {_heap_line(h, out['failed']['memory'])}"
            )
            return None
        mon.phase = None
        r["memory"] = mon.sample()
        r["phase"] = name
        r["long_tasks"] = b.long_tasks()
        out["phases"].append(r)
        return r

    try:
        b.call("huge_open", "bench-huge", per_session, mod="scalepy")
        t0 = time.perf_counter()
        while stored < n:
            k = min(chunk, n - stored)
            r = phase(f"store {stored + k:,}", "huge_fill", k, limit_s=60 + k / 100)
            if r is None:
                return out
            stored = r["stored"]
            log(
                f"  stored {stored:,} / {n:,} ({k / (r['ms'] / 1000):,.0f} msg/s this chunk, "
                f"{stored / (time.perf_counter() - t0):,.0f} overall); {_heap_line(r['heap'], r['memory'])}"
            )
        out["store_s"] = time.perf_counter() - t0
        out["text_bytes"] = r["text_bytes"]
        for name, fn, args, limit in (
            ("window", "huge_window", (8000,), 300),
            ("export", "huge_export", (), 120 + n / 1000),
            ("first search (index derived from the store)", "huge_first_search", (), 300 + n / 400),
            # the texts follow the first answer (``index.fill``): what mem.sql waits for
            (FILLED, "huge_filled", (), 300 + n / 400),
            # the figures kept in Python (read in the background after the first search) first
            (f"keyword search x{queries}", "huge_search", (queries,), 360 + queries * 5),
            ("close (the index file saved)", "huge_shut", (), 600),
            # a restart: the page loaded again, the store opened and searched
            (RESTART_CACHED, "huge_restart", ("bench-huge", True), 300),
            ("close again", "huge_shut", (), 600),
            (RESTART_UNCACHED, "huge_restart", ("bench-huge", False), 300 + n / 400),
            (RESTART_FILLED, "huge_filled", (), 300 + n / 400),
        ):
            r = phase(name, fn, *args, limit_s=limit, reload=name.startswith("restart"))
            if r is None:
                return out
            took = f"p50 {r['p50']:.1f} ms" if "p50" in r else f"{r['ms'] / 1000:.1f} s"
            if r.get("fill_ms"):
                took += f" (the fill of {r['filled']:,} messages took {r['fill_ms'] / 1000:.1f} s)"
            if "figures_wait_ms" in r:
                took += (
                    f" (timed once the kept figures were read: waited {r['figures_wait_ms'] / 1000:.1f} s)"
                )
            log(f"  {name}: {took}; {_heap_line(r['heap'], r['memory'])}")
        return out
    finally:
        try:
            b.call("huge_close", mod="scalepy")
        except Exception as e:  # noqa: BLE001
            log(f"  (closing the huge store failed: {str(e).splitlines()[0][:200]})")
        out["memory_end"] = mon.stop()
        out["peak"] = peak(out)


RESTART_CACHED = "restart: first search (cached index)"
RESTART_UNCACHED = "restart: first search (no cached index)"
FILLED = "messages filled (mem.sql ready) after the first search"
RESTART_FILLED = "messages filled (mem.sql ready) after the restart without it"

#: what the harness can and cannot measure of the page's memory (for the report)
MEASURABLE = (
    "Pyodide's Wasm memory (HEAP8.length; it never shrinks, so it is its peak), the main thread's JS heap "
    "(performance.memory), DuckDB's buffer manager (duckdb_memory(), in its worker), and the renderer "
    "process's resident memory from /proc (page, Pyodide and the DuckDB-Wasm worker share it; VmHWM is its "
    "peak). Not measurable: the DuckDB worker's own Wasm memory size and performance."
    "measureUserAgentSpecificMemory() (it needs cross-origin isolation, which the site does not serve)."
)


def peak(out: dict[str, Any]) -> dict[str, int]:
    """The largest figure of each kind over every phase (and the failure, if any)."""
    best: dict[str, int] = {}
    snaps = [(p.get("heap", {}), p.get("memory", {})) for p in out["phases"]]
    if out.get("failed"):
        snaps.append((out["failed"].get("heap", {}), out["failed"].get("memory", {})))
    for h, m in snaps:
        for k, v in {**h, **m}.items():
            if isinstance(v, int):
                best[k] = max(best.get(k, 0), v)
    return best


def _tasks(p: dict[str, Any]) -> str:
    tasks = p.get("long_tasks")
    if tasks is None:
        return "–"
    return f"{len(tasks)} (longest {max(tasks):,.0f} ms)" if tasks else "0"


def huge_markdown(h: dict[str, Any]) -> str:
    """The ``--huge`` run as markdown: one row per phase, then the failure and the peaks."""
    lines = [
        f"## {h['n']:,} messages in one page (`--huge`)\n",
        "| phase | time | Pyodide Wasm | JS heap | DuckDB buffers | renderer RSS (peak) | tasks > 50 ms |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for p in h["phases"]:
        took = f"p50 {p['p50']:.1f} ms" if "p50" in p else f"{p['ms'] / 1000:,.1f} s"
        hp, m = p.get("heap", {}), p.get("memory", {})
        lines.append(
            f"| {p['phase']} | {took} | {_mb(hp.get('pyodide_wasm'))} | {_mb(hp.get('js_heap_used'))} "
            f"| {_duck(hp)} | {_mb(m.get('renderer_rss'))} ({_mb(m.get('renderer_peak'))}) | {_tasks(p)} |"
        )
    f = h.get("failed")
    lines.append("")
    if f:
        lines.append(
            f"**Failed** in *{f['phase']}* with {f['stored']:,} messages stored, after {f['after_s']} s: "
            f"`{short_error(f['error'], 400)}`; at that point {_heap_line(f['heap'], f['memory'])}.\n"
        )
    else:
        lines.append(
            f"All phases passed: {h['n']:,} stored in {h.get('store_s', 0):,.0f} s "
            f"({h.get('text_bytes', 0) / 1e6:,.0f} MB of text).\n"
        )
    pk = h.get("peak", {})
    lines.append(
        f"Peaks: Pyodide Wasm {_mb(pk.get('pyodide_wasm'))}, JS heap {_mb(pk.get('js_heap_used'))}, "
        f"DuckDB buffers {_mb(pk.get('duckdb_buffer'))}, renderer RSS {_mb(pk.get('renderer_peak'))}, "
        f"all Chromium processes {_mb(pk.get('chromium_total_peak_sampled'))} (sampled each second).\n"
    )
    lines.append(f"Measured: {h['measurable']}\n")
    return "\n".join(lines)
