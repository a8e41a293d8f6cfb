// The worker of `fetchWheels` (wheels.js): fetches, checks and unzips the wheels it is
// sent, off the main thread, and answers with their files (the buffers transferred).
import { fetchHere } from "./wheels.js";

self.onmessage = async ({ data }) => {
  try {
    const wheels = await fetchHere(data.base, data.wheels);
    const buffers = new Set();
    for (const { files } of wheels) for (const bytes of files.values()) buffers.add(bytes.buffer);
    self.postMessage({ wheels: wheels.map(({ path, files }) => ({ path, files: [...files] })) }, [...buffers]);
  } catch (e) {
    self.postMessage({ error: String(e?.message ?? e) });
  }
};
