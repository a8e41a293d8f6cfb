// Pure-Python wheels installed without a package manager: fetched (in
// parallel, and while Pyodide is still starting), checked against their
// SHA-256, unzipped (DecompressionStream), and written into Pyodide's
// site-packages. It is what micropip does for a wheel whose dependencies are
// already known, minus micropip and the Python zip/tar/metadata modules it
// needs: the loader's wheels are listed, with their hashes, in build-info.json.
// The fetching and unzipping run in a worker of their own (wheels-worker.js):
// on the main thread each entry's stream waits behind Pyodide's boot, whose long
// tasks hold it, and the wheels were ready 0.3-0.4 s after Pyodide instead of before.

/** Fetch, check and unzip each `{path, sha256}` under `base` (null: those build-info.json
 *  there lists), in a worker (here if the page cannot start one); resolves to
 *  [{path, files: Map<name, Uint8Array>}]. */
export function fetchWheels(base, wheels) {
  let worker;
  try {
    worker = new Worker(new URL("./wheels-worker.js", import.meta.url), { type: "module" });
  } catch {
    return fetchHere(base, wheels);
  }
  return new Promise((resolve, reject) => {
    worker.onmessage = ({ data }) => {
      worker.terminate();
      if (data.error) reject(new Error(data.error));
      else resolve(data.wheels.map(({ path, files }) => ({ path, files: new Map(files) })));
    };
    worker.onerror = (e) => {  // the worker could not start (e.g. a page's CSP): do it here
      e.preventDefault?.();
      worker.terminate();
      fetchHere(base, wheels).then(resolve, reject);
    };
    worker.postMessage({ base: String(base), wheels });
  });
}

/** The wheels build-info.json under `base` lists: chatmem's and its dependencies (a
 *  build-info.json without the list names the wheel only). */
export async function listedWheels(base) {
  const res = await fetch(new URL("build-info.json", base), { cache: "no-cache" });
  if (!res.ok) throw new Error(`loadChatmem: build-info.json not found under ${base} (HTTP ${res.status})`);
  const info = await res.json();
  return info.wheels || [{ path: info.wheel, sha256: info.wheel_sha256 }];
}

/** `fetchWheels` on this thread. */
export async function fetchHere(base, wheels) {
  wheels ??= await listedWheels(base);
  return Promise.all(wheels.map(async ({ path, sha256 }) => {
    const url = new URL(path, base).href;
    const res = await fetch(url);
    if (!res.ok) throw new Error(`wheel ${path}: HTTP ${res.status}`);
    const buf = await res.arrayBuffer();
    if (sha256) {
      const got = hex(await crypto.subtle.digest("SHA-256", buf));
      if (got !== sha256) throw new Error(`wheel ${path}: SHA-256 ${got}, expected ${sha256}`);
    }
    return { path, files: await unzip(buf) };
  }));
}

/** Write the unzipped wheels into the interpreter's site-packages; importable at once. */
export function installWheels(pyodide, wheels) {
  const site = pyodide.runPython("import site\nsite.getsitepackages()[0]");
  const made = new Set();
  for (const { files } of wheels) {
    for (const [name, data] of files) {
      const path = `${site}/${name}`;
      const dir = path.slice(0, path.lastIndexOf("/"));
      if (!made.has(dir)) {
        pyodide.FS.mkdirTree(dir);
        made.add(dir);
      }
      pyodide.FS.writeFile(path, data);
    }
  }
  pyodide.runPython("import importlib\nimportlib.invalidate_caches()");
}

function hex(buf) {
  return [...new Uint8Array(buf)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/** The files of a zip archive (stored or deflated entries; no zip64, no encryption). */
export async function unzip(buf) {
  const view = new DataView(buf);
  let eocd = -1;
  for (let i = buf.byteLength - 22; i >= Math.max(0, buf.byteLength - 22 - 0xffff); i--) {
    if (view.getUint32(i, true) === 0x06054b50) { eocd = i; break; }
  }
  if (eocd < 0) throw new Error("not a zip archive (no end of central directory)");
  const count = view.getUint16(eocd + 10, true);
  let p = view.getUint32(eocd + 16, true);
  const names = new TextDecoder();
  const entries = [];
  for (let n = 0; n < count; n++) {
    if (view.getUint32(p, true) !== 0x02014b50) throw new Error("zip: bad central directory");
    const method = view.getUint16(p + 10, true);
    const size = view.getUint32(p + 20, true);
    const nameLen = view.getUint16(p + 28, true);
    const skip = nameLen + view.getUint16(p + 30, true) + view.getUint16(p + 32, true);
    const local = view.getUint32(p + 42, true);
    const name = names.decode(new Uint8Array(buf, p + 46, nameLen));
    p += 46 + skip;
    if (name.endsWith("/")) continue;
    if (name.startsWith("/") || name.split("/").includes("..")) throw new Error(`zip: unsafe path ${name}`);
    const at = local + 30 + view.getUint16(local + 26, true) + view.getUint16(local + 28, true);
    entries.push([name, method, new Uint8Array(buf, at, size)]);
  }
  const out = await Promise.all(entries.map(async ([name, method, raw]) => {
    if (method === 0) return [name, raw];
    if (method !== 8) throw new Error(`zip: ${name} uses compression method ${method}`);
    const stream = new Blob([raw]).stream().pipeThrough(new DecompressionStream("deflate-raw"));
    return [name, new Uint8Array(await new Response(stream).arrayBuffer())];
  }));
  return new Map(out);
}
