// The wheels fetched, checked and unzipped (wheels.js `fetchWheels`) off the page's main
// thread, which Pyodide's start-up holds for seconds at a time: a DecompressionStream
// inflates on the thread that reads it, so in the page the wheels waited for Pyodide.
//   in:  {base} (the folder of build-info.json, which lists the wheels)
//   out: {ok: true, value: [{path, files: [[name, Uint8Array]]}]} | {ok: false, error}
import { fetchWheels, listedWheels } from "./wheels.js";

self.onmessage = async ({ data: { base } }) => {
  try {
    const value = (await fetchWheels(base, await listedWheels(base))).map(({ path, files }) => ({ path, files: [...files] }));
    const buffers = new Set(value.flatMap(({ files }) => files.map(([, bytes]) => bytes.buffer)));
    self.postMessage({ ok: true, value }, [...buffers]);
  } catch (e) {
    self.postMessage({ ok: false, error: String(e?.message || e) });
  }
};
