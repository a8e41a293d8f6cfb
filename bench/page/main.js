// Wires the bench into the booted chatmem page: window.bench (the JS systems and
// helpers), PyScript's storage module with the `polyscript.storage` it imports
// (IDBMapSync, exactly as polyscript registers it), and bench/page/benchpy.py.
import * as bench from "./bench.js";
import IDBMapSync from "@webreflection/idb-map/sync";

window.bench = bench;
// the main thread's long tasks (Chromium reports each task over 50 ms), from the page's start;
// `takeLongTasks()` answers and forgets those seen so far
const longTasks = [];
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) longTasks.push(e.duration);
}).observe({ type: "longtask", buffered: true });
window.takeLongTasks = () => longTasks.splice(0);
window.benchReady = (async () => {
  await window.chatmem.ready;
  await settled();
  const py = window.chatmem.pyodide;
  py.registerJsModule("polyscript", {
    storage: async (name) => {
      const storage = new IDBMapSync(name);
      await storage.sync();
      return storage;
    },
    JSON,
  });
  const dir = "/home/pyodide/bench";
  py.FS.mkdirTree(dir + "/pyscript");
  const files = ["benchpy.py", "scalepy.py", "scalegen.py", "embedpy.py", "quality.py", "pyscript/__init__.py", "pyscript/storage.py", "pyscript/flatted.py", "pyscript/ffi.py"];
  for (const f of files) {
    const text = await (await fetch(new URL("./" + f, import.meta.url))).text();
    py.FS.writeFile(`${dir}/${f}`, text);
  }
  py.runPython(`import sys; sys.path.insert(0, ${JSON.stringify(dir)})`);
  return true;
})();

/** Wait until the page's own start-up work is over: the app started (or failed to, here
 *  without its DOM) and the service worker installed, i.e. the site's files precached.
 *  Until then that work competes with whichever workload runs first (chatmem's W1). */
async function settled() {
  await window.chatmem.appReady?.catch(() => {});
  if (!("serviceWorker" in navigator)) return;
  const timeout = new Promise((resolve) => setTimeout(resolve, 120_000));
  await Promise.race([navigator.serviceWorker.ready, timeout]);
}
