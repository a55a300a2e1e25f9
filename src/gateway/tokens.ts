/**
 * Cutting a run's text output to a number of tokens, counted with a real tokenizer: OpenAI's `o200k_base` (the
 * encoding of the GPT-4o family; other models' tokenizers count within a few percent on English and code), its ranks
 * and pre-token pattern as js-tiktoken ships them. The tokenizer takes about a second to load, so it is loaded the
 * first time an output may be over its budget. Where js-tiktoken is not installed, UTF-8 bytes are counted instead:
 * a text never has more tokens than bytes, so the cut still keeps within the budget, only earlier.
 *
 * The text a program, a client or an upstream chose is counted here, so the count is linear in the text. js-tiktoken's
 * own `encode` is not: its byte-pair merge rescans a pre-token and builds a string for every adjacent pair at each
 * merge, so one pre-token of n bytes costs O(n²) string work (10,000 letters 7.3 s, 40,000 110 s; even random
 * 8-letter words 8 µs a character, 30 times English). This file runs the same merge with a heap (`mergePiece`):
 * the same pairs merged in the same order, leftmost first among equal ranks, so the same tokens (test/tokens.test.ts
 * compares them with js-tiktoken's `encode`), in O(n log n) per pre-token.
 */

/** The tokenizer's encoding. */
export const OUTPUT_TOKEN_ENCODING = "o200k_base";
/** What is counted when js-tiktoken cannot be loaded. */
export const OUTPUT_TOKEN_FALLBACK = "UTF-8 bytes";

/**
 * Characters of text the pre-token pattern runs over at once. V8's regular expressions backtrack on a stack of their
 * own, which a run of 8 million CJK characters or combining marks overflows (a `RangeError`), so the pattern runs over
 * windows of the text; a pre-token that reaches a window's end is matched again at the start of the next one, so
 * pre-tokens are the whole text's. Only a pre-token of more than this many characters (one run of letters, marks,
 * punctuation or whitespace) is cut, into pieces of this size: merges never cross the cut, so such a run counts the
 * tokens of its pieces, which differ from the whole run's by about one token per cut (a test checks 40,000 letters);
 * no ordinary text has such a run. It also bounds the memory of one merge (a few arrays of its bytes).
 */
export const MAX_PRE_TOKEN_CHARS = 16 * 1024;

/**
 * How far past its end a pre-token's match looks: the pattern's longest optional ending (`'re`, `'ve`, `'ll`), or a
 * lookahead of one character. A match that ends closer than this to its window's end is matched again.
 */
const WINDOW_END_CHARS = 4;

/** How the text is counted: js-tiktoken's ranks and pattern, or UTF-8 bytes without it. */
interface Counter {
  /** The longest start of `text` of at most `budget` tokens, in characters, and its tokens. */
  take(text: string, budget: number): Taken;
}

interface Taken {
  /** Characters of the start that fits, never splitting a character. */
  chars: number;
  /** Its tokens. */
  tokens: number;
  /** True when that is the whole text. */
  whole: boolean;
}

let counter: Promise<Counter> | undefined;
/** The counter once it is loaded, for counts that cannot wait (`countTokensNow`). */
let loaded: Counter | undefined;

function loadCounter(): Promise<Counter> {
  counter ??= (async () => {
    try {
      const ranks = (await import("js-tiktoken/ranks/o200k_base")).default;
      loaded = new BytePairCounter(ranks.bpe_ranks, ranks.pat_str);
    } catch {
      loaded = BYTES;
    }
    return loaded;
  })();
  return counter;
}

/** Loads the tokenizer now (it takes about a second), so that `countTokensNow` counts real tokens. */
export async function loadTokenizer(): Promise<void> {
  await loadCounter();
}

/**
 * Tokens of `text` if the tokenizer is loaded, else its UTF-8 bytes: a text never has more tokens than bytes, so a
 * budget checked with this count before the tokenizer is there still holds. Counting stops past `atMost` (the
 * answer is then `atMost + 1`), so that a check against a budget costs no more than the budget's text.
 */
export function countTokensNow(text: string, atMost = Number.POSITIVE_INFINITY): number {
  const taken = (loaded ?? BYTES).take(text, atMost);
  return taken.whole ? taken.tokens : atMost + 1;
}

/** What the counts are in: `OUTPUT_TOKEN_ENCODING`, or `OUTPUT_TOKEN_FALLBACK` without js-tiktoken. */
export async function tokenUnit(): Promise<string> {
  return (await loadCounter()) === BYTES ? OUTPUT_TOKEN_FALLBACK : OUTPUT_TOKEN_ENCODING;
}

/** Tokens of `text` (special-token text such as `<|endoftext|>` counts as ordinary text). */
export async function countTokens(text: string): Promise<number> {
  return (await loadCounter()).take(text, Number.POSITIVE_INFINITY).tokens;
}

export interface CutResult {
  /** The texts, in order, cut so that together they have at most the budget's tokens; later texts may be "". */
  texts: string[];
  /** True when anything was cut. */
  cut: boolean;
}

/**
 * Keeps the first `maxTokens` tokens of the texts taken in order. A text is never longer in tokens than in UTF-8
 * bytes, so outputs that are small in bytes are returned without loading the tokenizer. Each text is counted only
 * as far as the budget reaches.
 */
export async function cutToTokens(texts: readonly string[], maxTokens: number): Promise<CutResult> {
  const bytes = texts.reduce((sum, text) => sum + utf8Length(text), 0);
  if (bytes <= maxTokens) return { texts: [...texts], cut: false };
  const count = await loadCounter();
  const out: string[] = [];
  let left = maxTokens;
  let cut = false;
  for (const text of texts) {
    if (cut || left <= 0) {
      if (text !== "") cut = true;
      out.push("");
      continue;
    }
    const taken = count.take(text, left);
    out.push(taken.whole ? text : text.slice(0, taken.chars));
    left -= taken.tokens;
    if (!taken.whole) cut = true;
  }
  return { texts: out, cut };
}

/** Counts UTF-8 bytes as tokens: one "token" per byte. */
const BYTES: Counter = {
  take(text, budget) {
    let tokens = 0;
    for (let i = 0; i < text.length; ) {
      const width = charWidth(text, i);
      if (tokens + width.bytes > budget) return { chars: i, tokens, whole: false };
      tokens += width.bytes;
      i += width.units;
    }
    return { chars: text.length, tokens, whole: true };
  },
};

/** UTF-8 bytes and UTF-16 units of the character at `i` (a lone surrogate is U+FFFD's 3 bytes, as TextEncoder has it). */
function charWidth(text: string, i: number): { bytes: number; units: number } {
  const code = text.charCodeAt(i);
  if (code < 0x80) return ONE;
  if (code < 0x800) return TWO;
  if (code >= 0xd800 && code <= 0xdbff && i + 1 < text.length) {
    const next = text.charCodeAt(i + 1);
    if (next >= 0xdc00 && next <= 0xdfff) return PAIR;
  }
  return THREE;
}
const ONE = { bytes: 1, units: 1 };
const TWO = { bytes: 2, units: 1 };
const THREE = { bytes: 3, units: 1 };
const PAIR = { bytes: 4, units: 2 };

function utf8Length(text: string): number {
  return Buffer.byteLength(text, "utf8");
}

const encoder = new TextEncoder();

/**
 * Byte-pair encoding over js-tiktoken's ranks: pre-tokens by the encoding's pattern, each looked up whole, else merged
 * pair by pair from its bytes, the lowest rank first. Ranks are keyed by "binary strings" (one character per byte),
 * so that an ASCII pre-token is its own key.
 */
class BytePairCounter implements Counter {
  private readonly table: RankTable;
  private readonly pattern: RegExp;

  constructor(bpeRanks: string, patStr: string) {
    const ranks = new Map<string, number>();
    let longest = 1;
    // Lines of "<name> <first rank> <token in base64> ...", as js-tiktoken's loader reads them.
    for (const line of bpeRanks.split("\n")) {
      if (line === "") continue;
      const fields = line.split(" ");
      const first = Number.parseInt(fields[1] as string, 10);
      for (let i = 2; i < fields.length; i++) {
        const token = atob(fields[i] as string);
        ranks.set(token, first + i - 2);
        if (token.length > longest) longest = token.length;
      }
    }
    const byteRanks = new Int32Array(256);
    for (let byte = 0; byte < 256; byte++) byteRanks[byte] = ranks.get(String.fromCharCode(byte)) ?? -1;
    this.table = { ranks, byteRanks, maxTokenBytes: longest, pairs: new Map() };
    this.pattern = new RegExp(patStr, "gu");
  }

  take(text: string, budget: number): Taken {
    let tokens = 0;
    let start = 0;
    while (start < text.length) {
      let end = Math.min(text.length, start + MAX_PRE_TOKEN_CHARS);
      if (end < text.length && isHighSurrogate(text.charCodeAt(end - 1))) end--;
      const window = end === text.length && start === 0 ? text : text.slice(start, end);
      const pattern = this.pattern;
      pattern.lastIndex = 0;
      let next = end;
      for (let match = pattern.exec(window); match !== null; match = pattern.exec(window)) {
        const piece = match[0];
        if (piece === "") {
          pattern.lastIndex++;
          continue;
        }
        // A pre-token that ends near the window's end may be another past it (it goes on, or a `'s` follows): matched
        // again from the next window, unless it starts the window (a run of about MAX_PRE_TOKEN_CHARS, cut here).
        if (end < text.length && match.index + piece.length > window.length - WINDOW_END_CHARS && match.index > 0) {
          next = start + match.index;
          break;
        }
        const ends = this.pieceTokens(piece);
        if (tokens + ends.length <= budget) {
          tokens += ends.length;
          continue;
        }
        const keep = budget - tokens;
        const keptBytes = keep === 0 ? 0 : (ends[keep - 1] as number);
        return { chars: start + match.index + charsWithin(piece, keptBytes), tokens: budget, whole: false };
      }
      start = next;
    }
    return { chars: text.length, tokens, whole: true };
  }

  /** Where each token of one pre-token ends, in its UTF-8 bytes. */
  private pieceTokens(piece: string): number[] {
    const bytes = isAscii(piece) ? piece : binary(piece);
    if (this.table.ranks.has(bytes)) return [bytes.length];
    return mergePiece(bytes, this.table);
  }
}

function isAscii(text: string): boolean {
  for (let i = 0; i < text.length; i++) if (text.charCodeAt(i) >= 0x80) return false;
  return true;
}

function isHighSurrogate(code: number): boolean {
  return code >= 0xd800 && code <= 0xdbff;
}

/** The UTF-8 bytes of `text` as a binary string (one character per byte). */
function binary(text: string): string {
  const bytes = encoder.encode(text);
  let out = "";
  for (let i = 0; i < bytes.length; i += 8192) {
    out += String.fromCharCode.apply(null, bytes.subarray(i, i + 8192) as unknown as number[]);
  }
  return out;
}

/** UTF-16 units of `piece` whose whole characters fit in its first `bytes` UTF-8 bytes. */
function charsWithin(piece: string, bytes: number): number {
  let used = 0;
  let i = 0;
  while (i < piece.length) {
    const width = charWidth(piece, i);
    if (used + width.bytes > bytes) break;
    used += width.bytes;
    i += width.units;
  }
  return i;
}

/**
 * js-tiktoken's byte-pair merge of one pre-token (`bytes`, a binary string) with a heap: each adjacent pair of parts
 * is in the heap by (rank of the two parts together, start), and the least is merged, as js-tiktoken's scan picks the
 * least rank and, among equal ones, the leftmost pair. An entry whose two parts no longer end where it says is
 * skipped (a pair of parts with the same bytes has the same rank, however they split). Returns where each token
 * ends. The arrays are reused between calls (a piece has at most MAX_PRE_TOKEN_CHARS x 3 bytes).
 */
function mergePiece(bytes: string, tokenizer: RankTable): number[] {
  const n = bytes.length;
  grow(n);
  // Parts by their first byte: where the next one starts (n + 1 after the last), the previous one, merged away,
  // and the part's rank (every part is a token).
  const { next, previous, merged, partRanks } = scratch;
  for (let i = 0; i < n; i++) {
    next[i] = i + 1;
    previous[i] = i - 1;
    merged[i] = 0;
    partRanks[i] = tokenizer.byteRanks[bytes.charCodeAt(i)] as number;
  }
  next[n] = n + 1;
  heapSize = 0;
  for (let i = 0; i + 1 < n; i++) pushPair(bytes, tokenizer, i, i + 1, i + 2);
  while (heapSize > 0) {
    const key = scratch.keys[0] as number;
    const end = scratch.ends[0] as number;
    popPair();
    const left = key % KEY_SCALE;
    const middle = next[left] as number;
    if (merged[left] === 1 || next[middle] !== end) continue;
    // The part at `middle` joins the one at `left`.
    merged[middle] = 1;
    next[left] = end;
    partRanks[left] = (key - left) / KEY_SCALE;
    if (end < n) {
      previous[end] = left;
      pushPair(bytes, tokenizer, left, end, next[end] as number);
    }
    if (left > 0) pushPair(bytes, tokenizer, previous[left] as number, left, end);
  }
  const tokens: number[] = [];
  for (let at = 0; at < n; at = next[at] as number) tokens.push(next[at] as number);
  return tokens;
}

/** What the merge looks ranks up in. */
interface RankTable {
  /** Rank of a token by its bytes as a binary string. */
  ranks: Map<string, number>;
  /** Rank of each single byte. */
  byteRanks: Int32Array;
  maxTokenBytes: number;
  /**
   * Rank of two tokens together (-1 when they are no token), by rank x PAIR_SCALE + rank, filled as pairs are met:
   * a number key is found several times faster than a new string (1 µs a lookup among 200,000 tokens).
   */
  pairs: Map<number, number>;
}

/** Above every rank of o200k_base (200,019). */
const PAIR_SCALE = 262_144;
/** Pairs remembered at most (about 40 MiB); the table starts again empty past it. */
const MAX_REMEMBERED_PAIRS = 1_000_000;

/** A heap entry's key is rank x KEY_SCALE + the pair's start: above every start of a piece, exact in a double. */
const KEY_SCALE = 65_536;

/** The merge's arrays, grown to the largest piece seen, and the heap's size. */
const scratch = {
  next: new Int32Array(0),
  previous: new Int32Array(0),
  merged: new Uint8Array(0),
  partRanks: new Int32Array(0),
  keys: new Float64Array(0),
  ends: new Int32Array(0),
};
let heapSize = 0;

function grow(n: number): void {
  if (scratch.merged.length >= n) return;
  const size = Math.max(n, 2 * scratch.merged.length, 64);
  scratch.next = new Int32Array(size + 1);
  scratch.previous = new Int32Array(size);
  scratch.merged = new Uint8Array(size);
  scratch.partRanks = new Int32Array(size);
  // Each merge pushes at most two pairs: n - 1 at first, then 2 for each of at most n - 1 merges.
  scratch.keys = new Float64Array(3 * size);
  scratch.ends = new Int32Array(3 * size);
}

/** Puts the pair of parts at `left` and `middle` (ending at `end`) in the heap, if its bytes are a token. */
function pushPair(bytes: string, tokenizer: RankTable, left: number, middle: number, end: number): void {
  if (end - left > tokenizer.maxTokenBytes) return;
  const pairKey = (scratch.partRanks[left] as number) * PAIR_SCALE + (scratch.partRanks[middle] as number);
  let rank = tokenizer.pairs.get(pairKey);
  if (rank === undefined) {
    rank = tokenizer.ranks.get(bytes.slice(left, end)) ?? -1;
    if (tokenizer.pairs.size >= MAX_REMEMBERED_PAIRS) tokenizer.pairs.clear();
    tokenizer.pairs.set(pairKey, rank);
  }
  if (rank < 0) return;
  const { keys, ends } = scratch;
  const key = rank * KEY_SCALE + left;
  let at = heapSize++;
  while (at > 0) {
    const parent = (at - 1) >> 1;
    if ((keys[parent] as number) <= key) break;
    keys[at] = keys[parent] as number;
    ends[at] = ends[parent] as number;
    at = parent;
  }
  keys[at] = key;
  ends[at] = end;
}

/** Removes the heap's least entry. */
function popPair(): void {
  const { keys, ends } = scratch;
  heapSize--;
  const key = keys[heapSize] as number;
  const end = ends[heapSize] as number;
  let at = 0;
  for (;;) {
    let child = 2 * at + 1;
    if (child >= heapSize) break;
    if (child + 1 < heapSize && (keys[child + 1] as number) < (keys[child] as number)) child++;
    if ((keys[child] as number) >= key) break;
    keys[at] = keys[child] as number;
    ends[at] = ends[child] as number;
    at = child;
  }
  keys[at] = key;
  ends[at] = end;
}
