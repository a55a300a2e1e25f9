/**
 * JavaScript's whitespace (WhiteSpace and LineTerminator, the set `\s` and `String.prototype.trim` use) without
 * `\n`, as the body of a regular-expression character class. Written out rather than as `\s` so that it means the
 * same in the Lark grammar, whose regular expressions other engines (Python, Rust) read with other `\s` sets.
 */
export const INLINE_WHITESPACE_CLASS = String.raw`\t\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff`;

const NON_WHITESPACE = new RegExp(`[^\\n${INLINE_WHITESPACE_CLASS}]`);

/** True when `text` has a character that is not whitespace. */
export function hasCode(text: string): boolean {
  return NON_WHITESPACE.test(text);
}
