// Compiles every .py under the given folders to the bytecode of the page's own
// Python (Pyodide, run here in Node), as __pycache__/*.pyc beside the sources,
// checked by nothing (unchecked-hash): the page then imports without compiling.
//   node tools/pyc.mjs DIR...
import { loadPyodide } from "pyodide";

const dirs = process.argv.slice(2);
const py = await loadPyodide();
dirs.forEach((dir, i) => py.mountNodeFS(`/pyc/${i}`, dir));
const ok = py.runPython(`
import compileall, py_compile
all(compileall.compile_dir(f"/pyc/{i}", quiet=1, workers=1,
                           invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    for i in range(${dirs.length}))
`);
if (!ok) { console.error("pyc: a file did not compile"); process.exit(1); }
