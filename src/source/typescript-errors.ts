import { CodemodeSourceError } from "./source-error.ts";

/** What amaro throws for code it can't strip: a plain object, not an `Error`. */
export interface AmaroError {
  code: "InvalidSyntax" | "UnsupportedSyntax";
  message: string;
  /** 1-based; lines end at `\n`, `\r\n` or `\r`. */
  startLine: number;
  /** 0-based display column: a tab counts 4, a wide character 2 and a zero-width one 0, see `displayWidth`. */
  startColumn: number;
}

export function isAmaroError(error: unknown): error is AmaroError {
  if (typeof error !== "object" || error === null) return false;
  const { code, message, startLine, startColumn } = error as Record<string, unknown>;
  return (
    (code === "InvalidSyntax" || code === "UnsupportedSyntax") &&
    typeof message === "string" &&
    typeof startLine === "number" &&
    typeof startColumn === "number"
  );
}

/** amaro's messages for TypeScript that can't be erased, and what the model should write instead. */
const UNSUPPORTED: readonly [RegExp, string][] = [
  [/\benum\b/, "enums are not supported (they need code generation). Use an object: const Color = { Red: 0 } as const"],
  [
    /\bnamespace\b/,
    "namespaces are not supported (they need code generation). Use plain objects and functions; only `declare namespace` is allowed",
  ],
  [
    /parameter property/,
    "parameter properties such as `constructor(private x: T)` are not supported (they need code generation). Declare the field in the class body and assign it in the constructor",
  ],
  // Inside a function body amaro reports `module M {}` as a namespace and `import x = ...` and `export =` as
  // syntax errors (see SYNTAX_HINTS); these are for the messages it gives at the top level of a file.
  [/`module` keyword|import equals|export assignment/, "this module syntax is not supported"],
  [/angle-bracket/, "`<T>value` type assertions are not supported. Write `value as T`"],
];

/** Advice added to amaro's syntax errors that come from a script being the body of a function. */
const SYNTAX_HINTS: readonly [RegExp, string][] = [
  [
    /'import', and 'export' cannot be used/,
    "The script is the body of an async function: load modules with `await import(...)` and give back a result with `return`",
  ],
];

/**
 * Turns amaro's error about the wrapped script into a `CodemodeSourceError` whose line and column are in the
 * script as written. `wrapped` is the script with `prefixLength` characters before it and a suffix after it;
 * `reparse` runs amaro on another text and returns its error, if any.
 */
export function toCodemodeSourceError(
  error: AmaroError,
  wrapped: string,
  prefixLength: number,
  scriptLength: number,
  reparse: (text: string) => AmaroError | undefined,
): CodemodeSourceError {
  const script = wrapped.slice(prefixLength, prefixLength + scriptLength);
  const offset = Math.min(Math.max(errorOffset(error, wrapped, reparse) - prefixLength, 0), scriptLength);
  const lineStart = offset === 0 ? 0 : script.lastIndexOf("\n", offset - 1) + 1;
  const line = countNewlines(script, lineStart) + 1;
  const column = offset - lineStart + 1;
  const position = `line ${line}, column ${column}`;
  const excerpt = showLine(script, lineStart, offset, line);

  if (error.code === "UnsupportedSyntax") {
    const advice = UNSUPPORTED.find(([pattern]) => pattern.test(error.message))?.[1] ?? error.message;
    return new CodemodeSourceError(
      "typescript-unsupported",
      `Unsupported TypeScript at ${position}: ${advice}. Only types that can be erased are allowed.\n${excerpt}`,
      { line, column },
    );
  }
  const hint = SYNTAX_HINTS.find(([pattern]) => pattern.test(error.message))?.[1];
  const message = hint === undefined ? error.message : `${error.message}. ${hint}`;
  return new CodemodeSourceError("typescript", `TypeScript syntax error at ${position}: ${message}\n${excerpt}`, {
    line,
    column,
  });
}

/**
 * The UTF-16 offset in `wrapped` where amaro's error starts. amaro gives a display column, which differs from the
 * UTF-16 column after tabs and non-ASCII characters on the line. So the text is parsed again with each of those
 * replaced by an ASCII character of the same UTF-16 length (a space for whitespace, `a` for anything else); on
 * ASCII without tabs the two columns agree. If that changes the error (say a stray `“` is now an identifier), the
 * display column is converted by an approximation of the widths amaro uses instead.
 */
function errorOffset(error: AmaroError, wrapped: string, reparse: (text: string) => AmaroError | undefined): number {
  const lineStarts = [0];
  for (const match of wrapped.matchAll(/\r\n|\r|\n/g)) lineStarts.push(match.index + match[0].length);
  const lineStart = lineStarts[error.startLine - 1];
  if (lineStart === undefined) return wrapped.length;
  const lineEnd = (lineStarts[error.startLine] ?? wrapped.length + 1) - 1;
  const lineText = wrapped.slice(lineStart, Math.max(lineStart, lineEnd));

  const ascii = toAscii(wrapped);
  let column: number | undefined;
  if (ascii === wrapped) {
    column = error.startColumn;
  } else {
    const again = reparse(ascii);
    if (
      again !== undefined &&
      again.code === error.code &&
      again.message === error.message &&
      again.startLine === error.startLine
    ) {
      column = again.startColumn;
    }
  }
  column ??= fromDisplayColumn(lineText, error.startColumn);
  return lineStart + Math.min(column, lineText.length);
}

/** Replaces tabs and non-ASCII characters (each UTF-16 unit) by a space (whitespace) or `a` (anything else). */
function toAscii(text: string): string {
  return text.replace(/[^\n\r\x20-\x7e]/g, (char) => {
    // U+2028 and U+2029 end lines for JavaScript (automatic semicolons), so they stay.
    if (char === "\u2028" || char === "\u2029") return char;
    return /\s/.test(char) ? " " : "a";
  });
}

/** Converts a display column to a UTF-16 column on one line, see `displayWidth`. */
function fromDisplayColumn(line: string, displayColumn: number): number {
  let display = 0;
  let utf16 = 0;
  for (const char of line) {
    if (display >= displayColumn) break;
    display += char.length + displayWidth(char) - 1;
    utf16 += char.length;
  }
  return utf16;
}

/**
 * How many columns amaro counts for a character beyond its UTF-16 length minus one: 4 for a tab, 0 for a
 * combining or format character, 2 for a wide (East Asian or emoji) one, 1 otherwise. An approximation of the
 * Unicode width tables amaro (swc) uses.
 */
function displayWidth(char: string): number {
  if (char === "\t") return 4;
  if (/^[\p{Mn}\p{Me}\p{Cf}]$/u.test(char)) return 0;
  if (
    /^[\p{Emoji_Presentation}\p{Script=Han}\p{Script=Hiragana}\p{Script=Katakana}\p{Script=Hangul}\u3000-\u303f\uff01-\uff60\uffe0-\uffe6]$/u.test(
      char,
    )
  ) {
    return 2;
  }
  return 1;
}

function countNewlines(text: string, end: number): number {
  let count = 0;
  for (let index = text.indexOf("\n"); index !== -1 && index < end; index = text.indexOf("\n", index + 1)) count++;
  return count;
}

/** The script's line and a caret under the column, like `  3 | let x: = 1;` over `    |        ^`. */
function showLine(script: string, lineStart: number, offset: number, line: number): string {
  const newline = script.indexOf("\n", lineStart);
  const text = script.slice(lineStart, newline === -1 ? script.length : newline).replace(/\r$/, "");
  const gutter = String(line);
  const indent = text.slice(0, offset - lineStart).replace(/[^\t]/g, " ");
  return `${gutter} | ${text}\n${" ".repeat(gutter.length)} | ${indent}^`;
}
