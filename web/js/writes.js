// The pieces of chatmem's write transactions (database.js runs them): outbox
// operations enqueued in the same transaction, failures turned into our error
// names, and the append, which assigns `seq` inside its transaction.

import { BridgeError } from "./envelope.js";
import { OUTBOX_KEY } from "./schema.js";

// how many session records a tab keeps to append without waiting for a read
const KNOWN_SESSIONS = 64;

// Outbox operations enqueued in the same transaction as the change they describe,
// once sync was turned on: the kv key OUTBOX_KEY is read
// in that transaction (the scope must hold "kv"). A message create op keeps data
// null: it refers to the stored message, which the push reads. `ops` is a list, or
// a function answering the list as JSON text, called (synchronously, inside the
// transaction) only if the outbox is on: a big write skips building ops nobody keeps.
export function enqueue(db, tx, ops, created = true) {
  if (!ops || (Array.isArray(ops) && ops.length === 0)) return [];
  const outbox = tx.objectStore("outbox");
  const add = () => {
    const list = Array.isArray(ops) ? ops : JSON.parse(ops());
    return list.filter((op) => created || !op.only_if_created)
      .map(({ only_if_created: _o, ...op }) => outbox.add(op));
  };
  if (db.outboxOn) return add();  // turned on for good: no need to look again
  return [tx.objectStore("kv").count(OUTBOX_KEY).then((n) => {
    if (!n) return null;
    db.outboxOn = true;
    return Promise.all(add());
  })];
}

/** Whether two JSON-shaped records are equal (same keys, same values, any key order). */
function sameRecord(a, b) {
  if (a === b) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const keys = Object.keys(a);
  if (keys.length !== Object.keys(b).length) return false;
  for (const k of keys) if (!Object.hasOwn(b, k) || !sameRecord(a[k], b[k])) return false;
  return true;
}

export function nextSeqAfter(messages) {
  let max = -1;
  for (const m of messages) if (m.seq > max) max = m.seq;
  return max + 1;
}

export async function settle(promises) {
  // Wait for every request and the transaction; the first failure wins.
  await Promise.all(promises);
}

/** The session is not there: abort the transaction (nothing written) and say so. */
export async function missing(tx, sessionId) {
  tx.abort();
  await tx.done.catch(() => {});
  throw new BridgeError("SessionNotFound", sessionId);
}

export function duplicateId(e) {
  // the only ConstraintError an add can raise here is a key that exists
  if (e?.name === "ConstraintError") throw new BridgeError("DuplicateId", e.message);
  throw e;
}

/** sessionId -> the session record as this tab last wrote or read it (a few, the most recent). */
export class KnownSessions extends Map {
  remember(rec) {
    this.delete(rec.sessionId);
    this.set(rec.sessionId, rec);
    if (this.size > KNOWN_SESSIONS) this.delete(this.keys().next().value);
  }
}

/** `Database.appendMessages`: seq is read and assigned inside one readwrite transaction
 *  (IndexedDB serialises overlapping ones, so two tabs never share a seq). */
export async function appendMessages(db, { sessionId, records, now, create, ops }) {
  const known = db.known.get(sessionId);
  if (known) {
    const done = await appendOver(db, known, sessionId, records, now, ops);
    if (done) return done;
  }
  const tx = db.tx(["sessions", "messages", "outbox", "kv"], "readwrite");
  const sessions = tx.objectStore("sessions");
  let sess = await sessions.get(sessionId);
  const created = !sess;
  if (!sess) {
    if (!create) {
      await missing(tx, sessionId);
    }
    sess = { ...create, nextSeq: 0, messageCount: 0 };
  }
  const [first, ps] = appendRequests(tx, sess, sessionId, records, now);
  ps.push(...enqueue(db, tx, ops, created), tx.done);
  await settle(ps).catch(duplicateId);
  return appended(db, sessionId, first, sess);
}

/** An append that trusts `known` (the session record this tab last wrote or read)
 *  instead of waiting for the read: the read is still the transaction's first
 *  request, so it sees the record as stored before these writes; if it differs
 *  from `known` (another tab or a pull changed it) the transaction is aborted
 *  before it can commit, nothing is written, and the caller reads and retries.
 *  One round trip fewer. Resolves to null when it had to abort. */
async function appendOver(db, known, sessionId, records, now, ops) {
  const tx = db.tx(["sessions", "messages", "outbox", "kv"], "readwrite");
  let stale = false;
  const check = tx.objectStore("sessions").get(sessionId).then((stored) => {
    if (!sameRecord(stored, known)) {
      stale = true;
      tx.abort();
    }
  });
  const sess = { ...known };
  const [first, ps] = appendRequests(tx, sess, sessionId, records, now);
  ps.push(check, ...enqueue(db, tx, ops, false), tx.done);
  try {
    await settle(ps);
  } catch (e) {
    await tx.done.catch(() => {});
    if (stale) {
      db.known.delete(sessionId);
      return null;
    }
    duplicateId(e);
  }
  return appended(db, sessionId, first, sess);
}

/** The writes of an append over the session record `sess` (updated in place). */
function appendRequests(tx, sess, sessionId, records, now) {
  let seq = sess.nextSeq ?? sess.messageCount ?? 0;
  const first = seq;
  const messages = tx.objectStore("messages");
  const ps = records.map((r) => {  // the parsed records are this call's own: complete them in place
    r.sessionId = sessionId;
    r.seq = seq++;
    return messages.add(r);
  });
  sess.nextSeq = seq;
  sess.messageCount = (sess.messageCount ?? 0) + records.length;
  sess.updatedAt = now;
  ps.push(tx.objectStore("sessions").put(sess));
  return [first, ps];
}

function appended(db, sessionId, first, sess) {
  db.known.remember(sess);
  db.notify("messages", [sessionId]);
  // the caller has the records: send back only what the transaction decided
  return [first, sess];
}
