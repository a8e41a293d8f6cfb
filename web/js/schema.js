// chatmem's IndexedDB schema: one migration per version, never dropping data
// (the storage model of DESIGN.md section 3). The bridge opens databases with
// it; the benchmark page builds its "same schema" baseline from `SCHEMA`.

/** Version 1: sessions, messages, outbox, dead_letter, kv, with their indexes. */
export function chatmemStores(db) {
  const sessions = db.createObjectStore("sessions", { keyPath: "sessionId" });
  for (const k of ["userId", "characterId", "updatedAt", "createdAt"]) sessions.createIndex(k, k);
  const messages = db.createObjectStore("messages", { keyPath: "id" });
  messages.createIndex("sessionSeq", ["sessionId", "seq"], { unique: true });
  messages.createIndex("createdAt", "createdAt");
  messages.createIndex("role", "role");
  const outbox = db.createObjectStore("outbox", { keyPath: "key", autoIncrement: true });
  outbox.createIndex("op_id", "op_id", { unique: true });
  outbox.createIndex("session_id", "session_id");
  db.createObjectStore("dead_letter", { keyPath: "op_id" });
  db.createObjectStore("kv");
}

/** kv key whose presence turns the outbox on (chatmem.stores.base.OUTBOX_KEY). */
export const OUTBOX_KEY = "sync.outbox";

/** Version 2: the outbox fills only once sync was turned on (kv OUTBOX_KEY). A database
 *  with a sync config keeps its queue and is marked on; any other drops the queue
 *  it kept for nothing (turning sync on uploads the history from the store). */
function outboxOnDemand(db, tx) {
  const kv = tx.objectStore("kv");
  kv.count("sync.config").then((n) => (n
    ? kv.put({ at: 0, sessions: [] }, OUTBOX_KEY)
    : tx.objectStore("outbox").clear()));
}

/** Version 3: messages keep only the `sessionSeq` index. Nothing reads by `createdAt` or
 *  `role` (date and role filters are answered by the query index), and every write paid
 *  for both: an append or an import maintains one index, as a bare store would. */
function leanMessages(db, tx) {
  const messages = tx.objectStore("messages");
  for (const name of ["createdAt", "role"]) {
    if (messages.indexNames.contains(name)) messages.deleteIndex(name);
  }
}

/** Migrations: SCHEMA[v](db, upgradeTransaction) upgrades a database from version v to v + 1. */
export const SCHEMA = [chatmemStores, outboxOnDemand, leanMessages];
export const SCHEMA_VERSION = SCHEMA.length;

/** The messages of one session, in `seq` order, on the `sessionSeq` index. */
export function sessionRange(sessionId) {
  return IDBKeyRange.bound([sessionId, -Infinity], [sessionId, Infinity]);
}
