// Boots Python in the page from this site only: Pyodide, the chatmem wheel and
// the IndexedDB bridge (loadChatmem, js/load.js), then the Python UI (app/chatmem_app). Exposes
// the documented test hook:
//   window.chatmem.ready          Promise, resolves when chatmem is importable
//   window.chatmem.runPython(src) runs async Python (top-level await allowed)
//                                 and resolves to the JSON value of its last expression
//   window.chatmem.appReady       Promise, resolves when the interface is usable (false on a
//                                 page without the app's #app element: no interface started)
//   window.chatmem.timings        {step: ms since navigation start}
//   window.chatmem.bridge         the JS bridge module (set before `ready` resolves)
// The UI itself is Python; this file is glue: loading, progress, service worker.
// It has no static imports: a module runs only once its whole import graph is
// fetched and evaluated (the bridge is 14 modules), so Pyodide's own fetch and
// compile, the longest part of the boot, would start that much later.

const here = (path) => new URL(path, import.meta.url).href;

/** `start()`, and once more if it failed at the network level (a module or file the
 * browser could not fetch: a dropped connection, a server restarting). Chromium does
 * not keep a failed module fetch: the second import fetches it again (Pyodide imports
 * its runtime module itself, so its URL cannot change as query-engine.js' can). */
async function twice(start) {
  try {
    return await start();
  } catch (e) {
    if (!(e instanceof TypeError) || !/fetch|import/i.test(e.message)) throw e;
    console.warn("starting once more after a failed fetch:", e.message);
    return start();
  }
}

const loader = twice(() => import("./load.js"));
loader.catch(() => {});  // awaited in boot
const progress = [];
const timings = {};
const STEPS = ["pyodide", "wheels", "store", "ui", "index"];

function report(text) {
  const t = Math.round(performance.now());
  progress.push({ step: text, t });
  window.dispatchEvent(new CustomEvent("chatmem:progress", { detail: { step: text, t } }));
  const el = document.getElementById("boot-status");
  if (el) el.textContent = text;
}

/** Mark a loading step: state is active | done | skipped | failed. */
function step(id, state, detail) {
  timings[`${id}:${state}`] = Math.round(performance.now());
  const li = document.querySelector(`#boot-steps li[data-step="${id}"]`);
  if (li) {
    li.dataset.state = state;
    li.querySelector("small")?.remove();
    if (detail) {
      const small = document.createElement("small");
      small.textContent = detail;
      li.append(small);
    }
  }
  const finished = STEPS.filter((s) => ["done", "skipped"].includes(document.querySelector(`#boot-steps li[data-step="${s}"]`)?.dataset.state)).length;
  const pct = Math.round((100 * (finished + (state === "active" ? 0.5 : 0))) / STEPS.length);
  const bar = document.getElementById("boot-bar");
  if (bar) bar.style.width = `${pct}%`;
  bar?.parentElement?.setAttribute("aria-valuenow", String(pct));
}

/** The app's Python files (every app/*.py of the build's file list), fetched now. */
async function fetchApp(info) {
  const files = info.files.filter((f) => f.startsWith("app/") && f.endsWith(".py"));
  return Promise.all(files.map(async (f) => {
    const res = await fetch(here("../" + f));
    if (!res.ok) throw new Error(`${f}: HTTP ${res.status}`);
    return [f, await res.text()];
  }));
}

/** The UI package into the interpreter's file system, importable as chatmem_app. */
function installApp(pyodide, texts) {
  const root = "/home/pyodide/app";
  for (const [f, text] of texts) {
    const path = `/home/pyodide/${f}`;
    pyodide.FS.mkdirTree(path.slice(0, path.lastIndexOf("/")));
    pyodide.FS.writeFile(path, text);
  }
  pyodide.runPython(`import sys\nif ${JSON.stringify(root)} not in sys.path: sys.path.insert(0, ${JSON.stringify(root)})`);
}

async function boot() {
  // everything the first paint needs starts at once: Pyodide, and meanwhile the
  // wheels (fetched and unzipped in a worker, installed by loadChatmem) and the app's files; DuckDB-Wasm,
  // the index and the embedding model come after the interface is up
  step("pyodide", "active");
  step("wheels", "active");
  report("Loading Python (Pyodide)…");
  const info = twice(() => fetch(here("../build-info.json"), { cache: "no-cache" })).then((r) => r.json());
  const app = info.then((i) => twice(() => fetchApp(i)));
  app.catch(() => {});  // awaited below
  // the wheels' worker at once too: load.js would start it only once its import graph (the
  // bridge, DuckDB-Wasm's and Arrow's modules) is evaluated, on a thread Pyodide's boot holds
  const wheels = twice(() => import("./wheels.js")).then(({ fetchWheels }) => fetchWheels(here("../"), null));
  wheels.catch(() => {});  // awaited in loadChatmem
  const pyodide = twice(() => import(here("../pyodide/pyodide.mjs"))
    .then(({ loadPyodide }) => loadPyodide({ indexURL: here("../pyodide/") })))
    .then((py) => { step("pyodide", "done"); report("Installing chatmem…"); return py; });
  const { bridge, loadChatmem } = await loader;
  window.chatmem.bridge = bridge;
  await loadChatmem(pyodide, { base: here("../"), wheels });  // the README's call, the wheels already coming
  const py = await pyodide;
  let runCode = null;  // imported on the first call: `ready` waits only for `import chatmem`
  window.chatmem.pyodide = py;
  window.chatmem.build = (await info).version;
  window.chatmem.runPython = async (code) => {
    runCode ??= py.pyimport("chatmem.runtime.page").run_code;
    return JSON.parse(await runCode(code));
  };
  installApp(py, await app);
  step("wheels", "done");
  report("Ready");
  return true;
}

async function startApp() {
  await window.chatmem.ready;
  const app = window.chatmem.pyodide.pyimport("chatmem_app");
  const params = new URLSearchParams(location.search);
  // the Python side marks the store / index / ui steps as it goes
  await app.start(params.get("db") || "chatmem");
  (await loader).freezeHeap(window.chatmem.pyodide);  // the interface's objects too (see load.js)
  timings.interactive = Math.round(performance.now());
  document.getElementById("boot")?.setAttribute("hidden", "");
  document.getElementById("app")?.removeAttribute("hidden");
  return true;
}

function registerServiceWorker() {
  if (!("serviceWorker" in navigator) || new URLSearchParams(location.search).has("nosw")) return;
  navigator.serviceWorker.register(here("../sw.js"), { scope: here("../") }).then((reg) => {
    const offerUpdate = (worker) => {
      if (worker && navigator.serviceWorker.controller) {
        window.dispatchEvent(new CustomEvent("chatmem:update-ready"));
        window.chatmem.applyUpdate = () => worker.postMessage({ type: "skip-waiting" });
      }
    };
    if (reg.waiting) offerUpdate(reg.waiting);
    reg.addEventListener("updatefound", () => {
      const w = reg.installing;
      w?.addEventListener("statechange", () => w.state === "installed" && offerUpdate(w));
    });
  }).catch((e) => console.warn("service worker not registered:", e));
  let reloaded = false;
  navigator.serviceWorker.addEventListener("controllerchange", () => {
    if (window.chatmem.applyUpdate && !reloaded) { reloaded = true; location.reload(); }
  });
}

window.chatmem = {
  progress,
  timings,
  step,
  bridge: null,
  runPython: async (code) => {
    await window.chatmem.ready;
    return window.chatmem.runPython(code);
  },
};
window.chatmem.ready = boot();
// the interface starts only on the app's own page: another page that boots chatmem with
// this file (e.g. to run Python against the library) gets Python and chatmem alone
window.chatmem.appReady = document.getElementById("app") ? startApp() : window.chatmem.ready.then(() => false);
window.chatmem.ready.catch((e) => {
  step("pyodide", "failed");
  report("Failed to start: " + (e?.message || e));
  console.error(e);
});
window.chatmem.appReady.catch((e) => {
  report("The interface failed to start: " + (e?.message || e));
  console.error(e);
});
window.addEventListener("load", registerServiceWorker);
