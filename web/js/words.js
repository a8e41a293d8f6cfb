// The words of a message's text, as the keyword index's derivation in the page cuts them
// (derive.js): the same words as Python's `tokenize.words` for ASCII text, their terms (the
// same as `tokenize.terms_of_word`: Snowball's English stemmer, the same release as
// Python's), and a table of the words already seen that reads a text's words straight from
// its characters.

/** an ASCII text (Python's `str.isascii`) */
// eslint-disable-next-line no-control-regex -- every ASCII character, the control ones included
export const ASCII = /^[\x00-\x7f]*$/;
/** `tokenize._MAX_TOKEN`: longer words (base64 blobs, hashes) are cut */
const MAX_TOKEN = 64;
const LETTERS = /^[a-z]+$/;
let english = null;

/** Import the stemmer `asciiTerm` needs (once; not with the page's start-up: only a
 *  derivation uses it). */
export async function loadStemmer() {
  if (!english) {
    const { default: EnglishStemmer } = await import("../vendor/snowball/english-stemmer.js");
    english ??= new EnglishStemmer();
  }
}

/** Python's `tokenize.terms_of_word` of one of `asciiWords`' words: its one term, the stem
 *  of its first 64 characters (words shorter than 3 or with a digit are their own stem);
 *  `loadStemmer` first. */
export function asciiTerm(word) {
  const w = word.length > MAX_TOKEN ? word.slice(0, MAX_TOKEN) : word;
  if (w.length < 3 || !LETTERS.test(w)) return w;
  return english.stemWord(w) || w;
}

/** Python's `records.models.extract_text`: the string itself, or the text (else code) parts joined. */
export function extractText(content) {
  if (content === null || content === undefined) return "";
  if (typeof content === "string") return content;
  const out = [];
  for (const part of content) {
    if (typeof part?.text === "string") out.push(part.text);
    else if (typeof part?.code === "string") out.push(part.code);
  }
  return out.join("\n");
}

/** Words and their codes in an open-addressing table keyed by a hash of their characters:
 *  `scan` finds the words of a text straight from its characters, without cutting each
 *  word out as a string and hashing it again (what a `Map` look-up costs per word). */
export class WordTable {
  constructor() {
    this.size = 1 << 16;
    this.keys = new Array(this.size).fill(null);
    this.hashes = new Int32Array(this.size);
    this.vals = new Array(this.size);
    this.count = 0;
  }

  static hash(word) {
    let h = 0;
    for (let i = 0; i < word.length; i++) h = (Math.imul(h, 31) + word.charCodeAt(i)) | 0;
    return h;
  }

  get(word) {
    const h = WordTable.hash(word);
    const mask = this.size - 1;
    for (let j = h & mask; ; j = (j + 1) & mask) {
      const k = this.keys[j];
      if (k === null) return undefined;
      if (this.hashes[j] === h && k === word) return this.vals[j];
    }
  }

  has(word) {
    return this.get(word) !== undefined;
  }

  set(word, val) {
    if ((this.count + 1) * 2 > this.size) this.grow();
    this.put(word, WordTable.hash(word), val);
  }

  put(word, h, val) {
    const mask = this.size - 1;
    let j = h & mask;
    while (this.keys[j] !== null) {
      if (this.hashes[j] === h && this.keys[j] === word) {
        this.vals[j] = val;
        return;
      }
      j = (j + 1) & mask;
    }
    this.keys[j] = word;
    this.hashes[j] = h;
    this.vals[j] = val;
    this.count++;
  }

  grow() {
    const { keys, hashes, vals } = this;
    this.size *= 2;
    this.keys = new Array(this.size).fill(null);
    this.hashes = new Int32Array(this.size);
    this.vals = new Array(this.size);
    this.count = 0;
    for (let j = 0; j < keys.length; j++) if (keys[j] !== null) this.put(keys[j], hashes[j], vals[j]);
  }

  /** The words of an ASCII `text` (`asciiWords`), each as its code, or as itself (added to
   *  `unknown`) when the table has none: a run of letters and digits is looked up straight
   *  from its characters; the rarer words the regex joins across a character (a number with
   *  points or commas, a word with an apostrophe inside) are cut out first. */
  scan(text, unknown) {
    const out = [];
    const n = text.length;
    const mask = this.size - 1;
    const { keys, hashes, vals } = this;
    const lower = (c) => (c >= 65 && c <= 90 ? c + 32 : c);
    const alnum = (c) => (c >= 97 && c <= 122) || (c >= 48 && c <= 57);
    const digit = (c) => c >= 48 && c <= 57;
    let i = 0;
    while (i < n) {
      let c = lower(text.charCodeAt(i));
      if (!alnum(c)) {
        i++;
        continue;
      }
      const start = i;
      let h = 0;
      let upper = false;
      let digits = true;
      while (i < n) {
        c = text.charCodeAt(i);
        if (c >= 65 && c <= 90) {
          c += 32;
          upper = true;
        } else if (!alnum(c)) break;
        if (c > 57) digits = false;
        h = (Math.imul(h, 31) + c) | 0;
        i++;
      }
      if (i + 1 < n) {
        const sep = text.charCodeAt(i);
        if (digits && (sep === 46 || sep === 44) && digit(text.charCodeAt(i + 1))) {
          // \d+(?:[.,]\d+)+: the number whole, its commas dropped
          let end = i;
          while (end + 1 < n && (text.charCodeAt(end) === 46 || text.charCodeAt(end) === 44)
            && digit(text.charCodeAt(end + 1))) {
            end += 2;
            while (end < n && digit(text.charCodeAt(end))) end++;
          }
          out.push(this.lookUp(text.slice(start, end).replaceAll(",", ""), unknown));
          i = end;
          continue;
        }
        if (sep === 39 && alnum(lower(text.charCodeAt(i + 1)))) {
          // [a-z0-9]+(?:'[a-z0-9]+)*: the word whole, its apostrophes dropped
          let end = i;
          while (end + 1 < n && text.charCodeAt(end) === 39 && alnum(lower(text.charCodeAt(end + 1)))) {
            end += 2;
            while (end < n && alnum(lower(text.charCodeAt(end)))) end++;
          }
          out.push(this.lookUp(text.slice(start, end).toLowerCase().replaceAll("'", ""), unknown));
          i = end;
          continue;
        }
      }
      const len = i - start;
      let found;
      for (let j = h & mask; ; j = (j + 1) & mask) {
        const k = keys[j];
        if (k === null) break;
        if (hashes[j] !== h || k.length !== len) continue;
        let q = 0;
        if (upper) {
          for (; q < len; q++) {
            let d = text.charCodeAt(start + q);
            if (d >= 65 && d <= 90) d += 32;
            if (k.charCodeAt(q) !== d) break;
          }
        } else {
          for (; q < len; q++) if (k.charCodeAt(q) !== text.charCodeAt(start + q)) break;
        }
        if (q === len) {
          found = vals[j];
          break;
        }
      }
      if (found === undefined) {
        const w = upper ? text.slice(start, i).toLowerCase() : text.slice(start, i);
        unknown.add(w);
        out.push(w);
      } else out.push(found);
    }
    return out;
  }

  /** The code of `word`, or the word itself (added to `unknown`) when the table has none. */
  lookUp(word, unknown) {
    const found = this.get(word);
    if (found !== undefined) return found;
    unknown.add(word);
    return word;
  }
}
