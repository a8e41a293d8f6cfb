// Exact token counts: OpenAI-family BPE encodings from gpt-tokenizer (ranks
// bundled in the site, fetched from it on first use only).

import { BridgeError } from "./envelope.js";

const here = (path) => new URL(path, import.meta.url).href;
const ENCODINGS = new Set(["o200k_base", "cl100k_base"]);

/** A synchronous `count(text)` for `encoding` (o200k_base or cl100k_base). */
export async function tokenCounter(encoding) {
  if (!ENCODINGS.has(encoding)) throw new BridgeError("NotSupportedError", `unknown encoding ${encoding}`);
  const mod = await import(here(`../vendor/gpt-tokenizer/esm/encoding/${encoding}.js`));
  return (text) => mod.countTokens(text);
}
