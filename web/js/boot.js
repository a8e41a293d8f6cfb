// Boots Python in the page from this site only: Pyodide, the chatmem wheel and
// the IndexedDB bridge (loadChatmem, js/load.js), then the Python UI (app/chatmem_app). Exposes
// the documented test hook:
//   window.chatmem.ready          Promise, resolves when chatmem is importable
//   window.chatmem.runPython(src) runs async Python (top-level await allowed)
//                                 and resolves to the JSON value of its last expression
//   window.chatmem.appReady       Promise, resolves when the interface is usable
//   window.chatmem.timings        {step: ms since navigation start}
// The UI itself is Python; this file is glue: loading, progress, service worker.
import * as bridge from "./bridge.js";
import { loadChatmem } from "./load.js";

const here = (path) => new URL(path, import.meta.url).href;
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

async function installApp(pyodide, info) {
  // the UI package: every file under app/ in the build's file list, into the
  // interpreter's file system, then imported
  const files = info.files.filter((f) => f.startsWith("app/") && f.endsWith(".py"));
  const texts = await Promise.all(files.map(async (f) => [f, await (await fetch(here("../" + f))).text()]));
  const root = "/home/pyodide/app";
  for (const [f, text] of texts) {
    const path = `/home/pyodide/${f}`;
    pyodide.FS.mkdirTree(path.slice(0, path.lastIndexOf("/")));
    pyodide.FS.writeFile(path, text);
  }
  pyodide.runPython(`import sys\nif ${JSON.stringify(root)} not in sys.path: sys.path.insert(0, ${JSON.stringify(root)})`);
}

async function boot() {
  step("pyodide", "active");
  report("Loading Python (Pyodide)…");
  const { loadPyodide } = await import(here("../pyodide/pyodide.mjs"));
  const pyodide = await loadPyodide({ indexURL: here("../pyodide/") });
  step("pyodide", "done");
  step("wheels", "active");
  report("Installing chatmem…");
  const info = await (await fetch(here("../build-info.json"), { cache: "no-cache" })).json();
  await loadChatmem(pyodide, { base: here("../"), wheel: info.wheel });  // the same call as in the README
  const browser = pyodide.pyimport("chatmem.runtime.page");
  const runCode = browser.run_code;
  window.chatmem.pyodide = pyodide;
  window.chatmem.build = info.version;
  window.chatmem.runPython = async (code) => JSON.parse(await runCode(code));
  await installApp(pyodide, info);
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
  bridge,
  runPython: async (code) => {
    await window.chatmem.ready;
    return window.chatmem.runPython(code);
  },
};
window.chatmem.ready = boot();
window.chatmem.appReady = startApp();
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
