// Seeded, deterministic chat payloads. bench/payloads.py is the same
// generator in Python (same PRNG, same choices): both sides write the same
// messages, and run.py checks that their checksums agree.

export function rng(seed) {
  // mulberry32
  let a = seed | 0;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const WORDS = (
  "the a to and of you it is that in for on with this be was can have what are so not just but my " +
  "me do we remember yesterday tomorrow trip plans lisbon coffee project deadline music concert " +
  "garden weather rain sunny friend family dinner recipe pasta train ticket museum book chapter " +
  "story character dragon castle quest memory summary session message token budget window context " +
  "search index database browser python pyodide storage durable offline sync server café naïve " +
  "résumé really maybe probably definitely think feel want need like love hate sure okay thanks " +
  "please could would should because when where why how which there their about after before again"
).split(" ");

function text(r, size) {
  const out = [];
  let len = -1;
  while (len < size) {
    const w = WORDS[Math.floor(r() * WORDS.length)];
    out.push(w);
    len += w.length + 1;
  }
  let s = out.join(" ");
  if (s.length > size) s = s.slice(0, size);
  return s;
}

const between = (r, lo, hi) => lo + Math.floor(r() * (hi - lo + 1));

/** n messages of one conversation: user turns (200-1200 B), assistant answers
 * (400-4000 B), and about one turn in eight an assistant tool call answered by
 * a tool message (200-2000 B). Plain objects, camelCase, ids `m<seed>-<i>`. */
export function messages(seed, n) {
  const r = rng(seed);
  const out = [];
  const push = (m) => {
    if (out.length < n) out.push({ id: `m${seed}-${out.length}`, ...m });
  };
  while (out.length < n) {
    push({ role: "user", content: text(r, between(r, 200, 1200)) });
    if (r() < 0.125) {
      const callId = `call${seed}-${out.length}`;
      const q = text(r, between(r, 10, 40));
      push({
        role: "assistant",
        content: text(r, between(r, 200, 400)),
        toolCalls: [{ id: callId, type: "function", function: { name: "search_memory", arguments: JSON.stringify({ q }) } }],
      });
      push({ role: "tool", content: text(r, between(r, 200, 2000)), toolCallId: callId });
    }
    push({ role: "assistant", content: text(r, between(r, 400, 4000)) });
  }
  return out;
}

/** FNV-1a over role and content of each message (same in Python). */
export function checksum(msgs) {
  let h = 0x811c9dc5;
  for (const m of msgs) {
    const s = m.role + "\u0000" + m.content + "\u0001";
    for (let i = 0; i < s.length; i++) {
      h ^= s.charCodeAt(i);
      h = Math.imul(h, 0x01000193) >>> 0;
    }
  }
  return h >>> 0;
}
