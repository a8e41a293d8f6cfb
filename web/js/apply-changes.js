// Pulled changes applied to IndexedDB in one transaction: the merge rules of
// chatmem/records/merge.py and chatmem/stores/changes.py (read their docstrings), in
// JavaScript because no Python await may sit inside an IndexedDB transaction.
// Remote changes are merged under the pending outbox operations (newer = a
// greater HLC), nothing is enqueued, and `kv` (the new cursor) is written in
// the same transaction. A parity test holds this to the Python stores.

import { sessionRange } from "./schema.js";

// session fields that belong to the local store and never come from a pull
const STORE_OWNED = new Set(["messageCount", "nextSeq", "sessionId"]);

function placeholderSession(sessionId, createdAt) {
  return {
    sessionId, title: "", createdAt, updatedAt: createdAt, userId: "local", characterId: "default",
    pinned: false, archived: false, tags: [], parentId: null, forkIndex: null, forkReason: null,
    messageCount: 0, nextSeq: 0,
  };
}

/** JSON with sorted keys: two writes of a message compare by it (chatmem/records/merge.py). */
function canonical(value) {
  if (Array.isArray(value)) return `[${value.map(canonical).join(",")}]`;
  if (value && typeof value === "object") {
    return `{${Object.keys(value).sort().map((k) => `${JSON.stringify(k)}:${canonical(value[k])}`).join(",")}}`;
  }
  return JSON.stringify(value ?? null);
}

/** The same message apart from its position on the sending device (chatmem/records/merge.py). */
function sameMessage(a, b) {
  const { seq: _a, ...x } = a;
  const { seq: _b, ...y } = b;
  return canonical(x) === canonical(y);
}

/** Where a message goes in its session: its create's HLC, then its id; a message stored
 * before messages had an HLC comes first, in its seq order (chatmem/stores/changes.py). */
function orderKey(m) {
  return m.hlc ? [String(m.hlc), -1, String(m.id)] : ["", Number(m.seq), String(m.id)];
}

function before(a, b) {
  for (let i = 0; i < 3; i++) if (a[i] !== b[i]) return a[i] < b[i];
  return false;
}

/** Number the session's messages 0..n-1 in their order (in `tx`, whose "messages" store is
 * given): the moved ones first out of the way (negative seqs, so the unique
 * [sessionId, seq] index holds), then to their places. Resolves to the number of messages. */
export async function renumber(messages, sessionId, ps) {
  const held = await messages.index("sessionSeq").getAll(sessionRange(sessionId));
  const keyed = held.map((m) => [orderKey(m), m]);
  keyed.sort((x, y) => (before(x[0], y[0]) ? -1 : before(y[0], x[0]) ? 1 : 0));
  const moved = keyed.map(([, m], i) => [m, i]).filter(([m, i]) => m.seq !== i);
  for (const [m, i] of moved) ps.push(messages.put({ ...m, seq: -1 - i }));
  for (const [m, i] of moved) ps.push(messages.put({ ...m, seq: i }));
  return held.length;
}

/** After deletes from position `from` on (in `tx`, whose "messages" store is given): the later
 * messages move up to close the gaps, their order kept, the moved ones first out of the way.
 * Only those after `from` are read. Resolves to the session's number of messages. */
export async function closeUp(messages, sessionId, from, ps) {
  const later = await messages.index("sessionSeq").getAll(IDBKeyRange.bound([sessionId, from], [sessionId, Infinity]));
  const moved = later.map((m, i) => [m, from + i]).filter(([m, i]) => m.seq !== i);
  for (const [m, i] of moved) ps.push(messages.put({ ...m, seq: -1 - i }));
  for (const [m, i] of moved) ps.push(messages.put({ ...m, seq: i }));
  return from + later.length;
}

/** Apply `changes` (and write `kv`) in the readwrite transaction `tx`; resolves to the touched session ids. */
export async function applyChanges(tx, changes, kv) {
  const sessions = tx.objectStore("sessions");
  const messages = tx.objectStore("messages");
  const bySeq = messages.index("sessionSeq");
  const pending = new Map();
  for (const op of await tx.objectStore("outbox").getAll()) {
    const k = `${op.resource}\u0000${op.id}`;
    if (!pending.has(k)) pending.set(k, []);
    pending.get(k).push(op);
  }
  const touched = new Set();
  const unordered = new Set(); // sessions whose numbering is no longer their order
  const ps = [];
  for (const c of changes) {
    const hlc = String(c.hlc);
    const newer = (pending.get(`${c.resource}\u0000${c.id}`) || []).filter((op) => String(op.hlc ?? "") > hlc);
    const isDelete = c.deleted || c.data == null;
    if (c.resource === "fact") {
      // replaced whole unless a newer write (or any delete) of it is pending; a delete is for ever
      const pendingHere = (pending.get(`fact\u0000${c.id}`) || []).some((op) => op.type === "delete");
      if (isDelete) ps.push(tx.objectStore("facts").delete(c.id));
      else if (!pendingHere && !newer.length) ps.push(tx.objectStore("facts").put({ ...c.data, factId: c.id }));
      continue;
    }
    if (c.resource === "session") {
      if (isDelete) {
        if (newer.some((op) => op.type === "create")) continue;
        for (const k of await bySeq.getAllKeys(sessionRange(c.id))) ps.push(messages.delete(k));
        ps.push(sessions.delete(c.id));
        touched.add(c.id);
        continue;
      }
      if (newer.some((op) => op.type === "delete")) continue;
      const keep = new Set();
      for (const op of newer) if (op.data && typeof op.data === "object") for (const k of Object.keys(op.data)) keep.add(k);
      const local = await sessions.get(c.id);
      const rec = local ? { ...local } : placeholderSession(c.id, 0);
      for (const [k, value] of Object.entries(c.data)) {
        if (STORE_OWNED.has(k) || (local && keep.has(k))) continue;
        rec[k] = k === "updatedAt" && local ? Math.max(Number(local.updatedAt || 0), Number(value || 0)) : value;
      }
      rec.sessionId = c.id;
      ps.push(sessions.put(rec));
      touched.add(c.id);
      continue;
    }
    if (isDelete) {
      const old = await messages.get(c.id);
      if (!old) continue;
      ps.push(messages.delete(c.id));
      unordered.add(old.sessionId);
      const sess = await sessions.get(old.sessionId);
      if (sess) {
        sess.messageCount = Math.max(0, Number(sess.messageCount || 0) - 1);
        ps.push(sessions.put(sess));
      }
      touched.add(old.sessionId);
      continue;
    }
    const held = await messages.get(c.id);
    if (held) {
      const { hlc: _key, ...mine } = held;
      if (held.hlc !== hlc && sameMessage(mine, { ...c.data, id: c.id })) {
        // held here under another key (stored before keys existed, or the same import on
        // two devices): the server's is everyone's
        ps.push(messages.put({ ...held, hlc }));
        unordered.add(held.sessionId);
        touched.add(held.sessionId);
      }
      continue;
    }
    if (newer.some((op) => op.type === "delete")) continue;
    const data = { ...c.data, id: c.id, hlc: c.hlc }; // its create's HLC, the same on every device
    const sid = data.sessionId;
    const created = Number(data.createdAt || 0);
    const sess = (await sessions.get(sid)) || placeholderSession(sid, created);
    const last = await bySeq.openCursor(sessionRange(sid), "prev");
    // first at the end; a message that belongs earlier renumbers the session below
    data.seq = Number(sess.nextSeq ?? sess.messageCount ?? 0);
    const count = Number(sess.messageCount || 0);
    if (data.seq !== count || (last && before(orderKey(data), orderKey(last.value)))) unordered.add(sid);
    sess.nextSeq = data.seq + 1;
    sess.messageCount = count + 1;
    sess.updatedAt = Math.max(Number(sess.updatedAt || 0), created);
    ps.push(sessions.put(sess), messages.put(data));
    touched.add(sid);
  }
  for (const sid of unordered) {
    const sess = await sessions.get(sid);
    if (!sess) continue;
    const n = await renumber(messages, sid, ps);
    if (sess.nextSeq !== n || sess.messageCount !== n) ps.push(sessions.put({ ...sess, nextSeq: n, messageCount: n }));
  }
  for (const [k, v] of Object.entries(kv || {})) ps.push(tx.objectStore("kv").put(v, k));
  ps.push(tx.done);
  await Promise.all(ps);
  return [...touched];
}
