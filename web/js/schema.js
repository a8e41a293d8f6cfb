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

/** Version 4: one order (chatmem/stores/changes.py). Every message gets an order key, an HLC
 *  of device "0" that keeps the session's seq order (the running maximum of createdAt,
 *  counted within one millisecond), and seq becomes the dense position; the sync cursor
 *  goes, so the next pull brings everything again and every message synced before takes
 *  the server's key. The same as the SQLite store's migration 3. */
function orderKeys(db, tx) {
  const messages = tx.objectStore("messages");
  const counts = new Map();
  const key = (wall, n) => {
    const w = Math.min(wall + Math.floor(n / 10000), 9999999999999);
    return `${String(w).padStart(13, "0")}-${String(n % 10000).padStart(4, "0")}-0`;
  };
  (async () => {
    let cursor = await messages.index("sessionSeq").openCursor();
    let sid = null;
    let wall = -1;
    let n = 0;
    while (cursor) {
      const m = cursor.value;
      if (m.sessionId !== sid) [sid, wall, n] = [m.sessionId, -1, 0];
      const pos = counts.get(sid) ?? 0;
      counts.set(sid, pos + 1);
      let changed = m.seq !== pos;
      if (!m.hlc) {
        const created = Math.max(Number(m.createdAt) || 0, 0);
        if (created > wall) [wall, n] = [created, 0];
        else n += 1;
        m.hlc = key(wall, n);
        changed = true;
      }
      if (changed) await cursor.update({ ...m, seq: pos });
      cursor = await cursor.continue();
    }
    let s = await tx.objectStore("sessions").openCursor();
    while (s) {
      const n = counts.get(s.value.sessionId) ?? 0;
      if (s.value.messageCount !== n || s.value.nextSeq !== n) await s.update({ ...s.value, messageCount: n, nextSeq: n });
      s = await s.continue();
    }
    await tx.objectStore("kv").delete("sync.cursor");
  })();
}

/** Version 5: facts (chatmem/facts): one record per fact version, by `factId`, read by user. */
function facts(db) {
  db.createObjectStore("facts", { keyPath: "factId" }).createIndex("userId", "userId");
}

/** Migrations: SCHEMA[v](db, upgradeTransaction) upgrades a database from version v to v + 1. */
export const SCHEMA = [chatmemStores, outboxOnDemand, leanMessages, orderKeys, facts];
export const SCHEMA_VERSION = SCHEMA.length;

/** The messages of one session, in `seq` order, on the `sessionSeq` index. */
export function sessionRange(sessionId) {
  return IDBKeyRange.bound([sessionId, -Infinity], [sessionId, Infinity]);
}
