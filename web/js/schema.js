// chatmem's IndexedDB schema: one migration per version, never dropping data
// (the storage model of DESIGN.md section 3). The bridge opens databases with
// it; the benchmark page builds its "same schema" baseline from `chatmemStores`.

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

/** Migrations: SCHEMA[v] upgrades a database from version v to v + 1. */
export const SCHEMA = [chatmemStores];
export const SCHEMA_VERSION = SCHEMA.length;

/** The messages of one session, in `seq` order, on the `sessionSeq` index. */
export function sessionRange(sessionId) {
  return IDBKeyRange.bound([sessionId, -Infinity], [sessionId, Infinity]);
}
