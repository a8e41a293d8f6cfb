// chatmem's bridge to the browser, one ES module per concept, gathered here:
// the page registers this module as `chatmem_bridge` for Python
// (the chatmem/runtime/page package is its only caller).
//
//   database.js       one IndexedDB database: one call = one transaction
//   writes.js         the append (whole, or a batch fed in chunks) and the outbox ops every write enqueues
//   apply-changes.js  pulled sync changes, merged in one transaction
//   schema.js         the IndexedDB schema and its migrations
//   query-engine.js   DuckDB-Wasm, the derived query index (and its OPFS cache file)
//   arrow-columns.js  the Arrow tables of its bulk loads, laid out straight into typed arrays
//   derive.js         the keyword index derived from the store in the page (records never cross to Python)
//   words.js          the words of a text as derive.js cuts them (Python's for ASCII text)
//   token-counter.js  exact BPE token counts (gpt-tokenizer)
//   token-sums.js     the static embedding model's sums (the same integers as Python's), in a worker
//   locks.js          Web Locks and the online status, for sync
//   index-share.js    one query index for all tabs: the owner answers the others
//   crypto.js         WebCrypto for end-to-end encrypted sync
//   envelope.js       the {"ok", "value" | "error"} answer every handle gives

export { drop, open, openEnvelope, requestPersistence, storageEstimate } from "./database.js";
export { SCHEMA_VERSION } from "./schema.js";
export { derivation } from "./derive.js";
export { duckdbImport, duckdbOpen, duckdbOpenEnvelope, duckdbPrestart, opfsExists, opfsRemove } from "./query-engine.js";
export { tokenCounter } from "./token-counter.js";
export { tokenSums, tokenSumsWorker } from "./token-sums.js";
export { isOnline, onOnline, tryLock } from "./locks.js";
export { indexShare } from "./index-share.js";
export { e2eOpen, e2ePbkdf2, e2eSeal } from "./crypto.js";
