/**
 * Cutting a run's text output to a number of tokens, counted with a real tokenizer: js-tiktoken's `o200k_base`
 * (the encoding of OpenAI's GPT-4o family; other models' tokenizers count within a few percent on English and code).
 * The tokenizer takes about a second to load, so it is loaded the first time an output may be over its budget.
 * Where js-tiktoken is not installed, UTF-8 bytes are counted instead: a text never has more tokens than bytes, so
 * the cut still keeps within the budget, only earlier.
 */

/** The tokenizer's encoding. */
export const OUTPUT_TOKEN_ENCODING = "o200k_base";
/** What is counted when js-tiktoken cannot be loaded. */
export const OUTPUT_TOKEN_FALLBACK = "UTF-8 bytes";

interface Encoder {
  encode(text: string, allowedSpecial?: string[] | "all", disallowedSpecial?: string[] | "all"): number[];
  decode(tokens: number[]): string;
}

let encoder: Promise<Encoder> | undefined;
/** The encoder once it is loaded, for counts that cannot wait (`countTokensNow`). */
let loaded: Encoder | undefined;

function loadEncoder(): Promise<Encoder> {
  encoder ??= (async () => {
    try {
      const [{ Tiktoken }, ranks] = await Promise.all([
        import("js-tiktoken/lite"),
        import("js-tiktoken/ranks/o200k_base"),
      ]);
      loaded = new Tiktoken(ranks.default) as Encoder;
    } catch {
      loaded = BYTES;
    }
    return loaded;
  })();
  return encoder;
}

/** Loads the tokenizer now (it takes about a second), so that `countTokensNow` counts real tokens. */
export async function loadTokenizer(): Promise<void> {
  await loadEncoder();
}

/**
 * Tokens of `text` if the tokenizer is loaded, else its UTF-8 bytes: a text never has more tokens than bytes, so a
 * budget checked with this count before the tokenizer is there still holds.
 */
export function countTokensNow(text: string): number {
  if (loaded === undefined || loaded === BYTES) return Buffer.byteLength(text, "utf8");
  return loaded.encode(text, [], []).length;
}

/** Counts UTF-8 bytes as tokens: one "token" per byte. */
const BYTES: Encoder = {
  encode: (text) => [...Buffer.from(text, "utf8")],
  decode: (tokens) => Buffer.from(tokens).toString("utf8"),
};

/** What the counts are in: `OUTPUT_TOKEN_ENCODING`, or `OUTPUT_TOKEN_FALLBACK` without js-tiktoken. */
export async function tokenUnit(): Promise<string> {
  return (await loadEncoder()) === BYTES ? OUTPUT_TOKEN_FALLBACK : OUTPUT_TOKEN_ENCODING;
}

/** Tokens of `text` (special-token text such as `<|endoftext|>` counts as ordinary text). */
export async function countTokens(text: string): Promise<number> {
  const enc = await loadEncoder();
  return enc.encode(text, [], []).length;
}

export interface CutResult {
  /** The texts, in order, cut so that together they have at most the budget's tokens; later texts may be "". */
  texts: string[];
  /** True when anything was cut. */
  cut: boolean;
}

/**
 * Keeps the first `maxTokens` tokens of the texts taken in order. A text is never longer in tokens than in UTF-8
 * bytes, so outputs that are small in bytes are returned without loading the tokenizer.
 */
export async function cutToTokens(texts: readonly string[], maxTokens: number): Promise<CutResult> {
  const bytes = texts.reduce((sum, text) => sum + Buffer.byteLength(text, "utf8"), 0);
  if (bytes <= maxTokens) return { texts: [...texts], cut: false };
  const enc = await loadEncoder();
  const out: string[] = [];
  let left = maxTokens;
  let cut = false;
  for (const text of texts) {
    if (cut || left <= 0) {
      if (text !== "") cut = true;
      out.push("");
      continue;
    }
    const taken = takeTokens(enc, text, left);
    out.push(taken.text);
    left -= taken.tokens;
    if (!taken.whole) cut = true;
  }
  return { texts: out, cut };
}

/**
 * The longest start of `text` of at most `budget` tokens. Only a growing prefix is encoded, so a huge text costs
 * about as much as the part that is kept.
 */
function takeTokens(enc: Encoder, text: string, budget: number): { text: string; tokens: number; whole: boolean } {
  let chars = Math.min(text.length, budget * 8 + 64);
  for (;;) {
    const tokens = enc.encode(text.slice(0, chars), [], []);
    if (tokens.length > budget) {
      // Decoding can end inside a character that the cut split: drop the replacement character it leaves.
      const kept = enc.decode(tokens.slice(0, budget)).replace(/\uFFFD+$/, "");
      return { text: kept, tokens: budget, whole: false };
    }
    if (chars >= text.length) return { text, tokens: tokens.length, whole: true };
    chars = Math.min(text.length, chars * 2);
  }
}
