// Giving the page's main thread back between slices of long work, so that no task of
// chatmem's holds it past about SLICE_MS (input and rendering run in between).

/** the longest stretch of main-thread work between two yields to the event loop */
export const SLICE_MS = 10;

/** Let the page run (input, rendering) between two slices of work: `scheduler.yield()`
 *  where the browser has it (no 4 ms clamp as nested timeouts have). */
export const yieldToPage = () => (globalThis.scheduler?.yield
  ? globalThis.scheduler.yield() : new Promise((resolve) => setTimeout(resolve, 0)));
