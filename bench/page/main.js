// Wires the bench into the booted chatmem page: window.bench (the JS systems and
// helpers), PyScript's storage module with the `polyscript.storage` it imports
// (IDBMapSync, exactly as polyscript registers it), and bench/page/benchpy.py.
import * as bench from "./bench.js";
import IDBMapSync from "@webreflection/idb-map/sync";

window.bench = bench;
window.benchReady = (async () => {
  await window.chatmem.ready;
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
