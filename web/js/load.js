// Loads chatmem into a Pyodide the page already has (or is starting): one call.
//
//   import { loadChatmem } from "./js/load.js";
//   await loadChatmem(loadPyodide({ indexURL: "./pyodide/" }));   // now `import chatmem` works
//
// It registers the JS bridge (IndexedDB, DuckDB-Wasm) as the module
// `chatmem_bridge`, installs the chatmem wheel and the pure-Python wheels it
// depends on, all named with their SHA-256 in build-info.json (from this site:
// no package index, nothing from the internet), imports `chatmem` and resolves
// to the module proxy. Given the promise of `loadPyodide()` rather than its
// result, it fetches and unzips the wheels while Pyodide is still starting. The
// objects of that boot are then frozen out of Python's cyclic collector (`freezeHeap`).
// The page needs the import map of the README (idb, @duckdb/duckdb-wasm,
// apache-arrow). `base` is the URL of the folder holding
// build-info.json, wheels/, js/ (by default the folder above this file);
// `wheel` names a chatmem wheel instead, installed by micropip (which finds
// its dependencies in the Pyodide's pyodide-lock.json).
// `wheels` is the promise of `fetchWheels` when the page started it itself (boot.js
// does, before this module's imports are even loaded).
import * as bridge from "./bridge.js";
import { fetchWheels, installWheels } from "./wheels.js";

export async function loadChatmem(pyodide, { base = new URL("../", import.meta.url), wheel = null, wheels = null } = {}) {
  wheels = wheel ? null : (wheels ?? fetchWheels(base, null));
  wheels?.catch(() => {});  // awaited below; a failure is reported there, not as unhandled
  pyodide = await pyodide;
  if (!pyodide || typeof pyodide.registerJsModule !== "function") {
    throw new TypeError("loadChatmem(pyodide): pass the object loadPyodide() resolves to (or its promise)");
  }
  pyodide.registerJsModule("chatmem_bridge", bridge);
  if (wheels) {
    installWheels(pyodide, await wheels);
  } else {
    await pyodide.loadPackage("micropip");
    const micropip = pyodide.pyimport("micropip");
    try {
      await micropip.install(new URL(wheel, base).href);
    } finally {
      micropip.destroy();
    }
  }
  const chatmem = pyodide.pyimport("chatmem");
  freezeHeap(pyodide);
  return chatmem;
}

/** Move every object Python tracks now (modules, classes, functions: they live as long as
 *  the page) out of reach of its cyclic collector, which otherwise scans them all at each
 *  pass over its old objects: with the app loaded, 36,000 objects and 60-90 ms of the main
 *  thread per full pass (Pyodide 314, 2 cores). Reference counting still frees them. */
export function freezeHeap(pyodide) {
  const gc = pyodide.pyimport("gc");
  try {
    gc.freeze();
  } finally {
    gc.destroy();
  }
}

export { bridge };
