// Boots Python in the page from this site only: Pyodide, micropip, the chatmem
// wheel, and the IndexedDB bridge. Exposes the documented test hook:
//   window.chatmem.ready          Promise, resolves when chatmem is importable
//   window.chatmem.runPython(src) runs async Python (top-level await allowed)
//                                 and resolves to the JSON value of its last expression
import * as bridge from "./bridge.js";

const here = (path) => new URL(path, import.meta.url).href;
const progress = [];

function report(step) {
  const t = Math.round(performance.now());
  progress.push({ step, t });
  window.dispatchEvent(new CustomEvent("chatmem:progress", { detail: { step, t } }));
  const el = document.getElementById("boot-status");
  if (el) el.textContent = step;
}

async function boot() {
  report("Loading Python (Pyodide)…");
  const { loadPyodide } = await import(here("../pyodide/pyodide.mjs"));
  const pyodide = await loadPyodide({ indexURL: here("../pyodide/") });
  pyodide.registerJsModule("chatmem_bridge", bridge);
  report("Installing chatmem…");
  const info = await (await fetch(here("../build-info.json"), { cache: "no-cache" })).json();
  await pyodide.loadPackage("micropip");
  const micropip = pyodide.pyimport("micropip");
  await micropip.install(here("../" + info.wheel));
  micropip.destroy();
  const browser = pyodide.pyimport("chatmem._browser");
  const runCode = browser.run_code;
  window.chatmem.pyodide = pyodide;
  window.chatmem.build = info.version;
  window.chatmem.runPython = async (code) => JSON.parse(await runCode(code));
  report("Ready");
  return true;
}

window.chatmem = {
  progress,
  bridge,
  runPython: async (code) => {
    await window.chatmem.ready;
    return window.chatmem.runPython(code);
  },
};
window.chatmem.ready = boot();
window.chatmem.ready.catch((e) => {
  report("Failed to start: " + (e?.message || e));
  console.error(e);
});
