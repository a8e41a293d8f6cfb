// Loads chatmem into a Pyodide the page already has: one call.
//
//   import { loadChatmem } from "./js/load.js";
//   const pyodide = await loadPyodide({ indexURL: "./pyodide/" });
//   await loadChatmem(pyodide);            // now `import chatmem` works
//
// It registers the JS bridge (IndexedDB, DuckDB-Wasm) as the module
// `chatmem_bridge`, installs the chatmem wheel named in build-info.json (by URL:
// no package index, nothing from the internet), checks that `import chatmem`
// works, and resolves to the `chatmem` module proxy. The page needs the import
// map of the README (idb, @duckdb/duckdb-wasm, apache-arrow, tslib, flatbuffers).
// `base` is the URL of the folder holding build-info.json, wheels/, js/ (by
// default the folder above this file); `wheel` names the wheel instead.
import * as bridge from "./bridge.js";

export async function loadChatmem(pyodide, { base = new URL("../", import.meta.url), wheel = null } = {}) {
  if (!pyodide || typeof pyodide.registerJsModule !== "function") {
    throw new TypeError("loadChatmem(pyodide): pass the object loadPyodide() resolved to");
  }
  pyodide.registerJsModule("chatmem_bridge", bridge);
  let path = wheel;
  if (!path) {
    const res = await fetch(new URL("build-info.json", base), { cache: "no-cache" });
    if (!res.ok) throw new Error(`loadChatmem: build-info.json not found under ${base} (HTTP ${res.status})`);
    path = (await res.json()).wheel;
  }
  // micropip installs the wheel with its dependencies (pure-Python wheels this
  // site serves, listed in its pyodide-lock.json); by URL, so nothing is looked up
  await pyodide.loadPackage("micropip");
  const micropip = pyodide.pyimport("micropip");
  try {
    await micropip.install(new URL(path, base).href);
  } finally {
    micropip.destroy();
  }
  return pyodide.pyimport("chatmem");
}

export { bridge };
