/**
 * A script's runtime error as a model reads it. QuickJS words some of its own errors more tersely than V8 ("not a
 * function", with no name), which leaves a model guessing which call failed. With the script at hand, an error the
 * engine raised is explained: "not a function" and "not a constructor" name the callee of the failing line
 * (`r.items.map is not a function`), and the message ends with that line of the script. Other errors (those the
 * script throws itself, unless it words them as the engine does) are left as they are.
 */
import type { CodemodeError } from "../types.ts";

/** Characters of the failing line a message quotes at most; a longer line is cut around the failing column. */
export const MAX_QUOTED_LINE_CHARS = 160;

/** How QuickJS words the errors it raises while running a script, by error name. */
const ENGINE_MESSAGES: Readonly<Record<string, readonly RegExp[]>> = {
  TypeError: [
    /^not a function$/,
    /^not a constructor$/,
    /^cannot (read|set) property '.*' of (undefined|null)$/,
    /^value is not iterable$/,
    /^not an object$/,
    /^Cannot convert undefined or null to object$/,
    /^invalid 'in' operand$/,
  ],
  ReferenceError: [/ is not defined$/, /^cannot access .* before initialization$/],
};

/** The first frame of the script in a stack: `codemode.js:<line>:<column>`. */
const SCRIPT_FRAME = /codemode\.js:(\d+):(\d+)/;

/** A callee as a line writes it: a name, or a chain of `.name` and `?.name` after one. */
const CALLEE = /(\bnew\s+)?([A-Za-z_$][\w$]*(?:\s*\??\.\s*[A-Za-z_$#][\w$]*)*)\s*(?:\?\.\s*)?\(/g;
const NOT_CALLEES = new Set(["if", "for", "while", "switch", "catch", "function", "return", "typeof", "await", "new"]);

/**
 * The error with an engine-worded message explained from `code` (the script as it ran, so that its lines are the
 * stack's); any other error is returned as it is.
 */
export function explainScriptError(error: CodemodeError, code: string): CodemodeError {
  if (error.kind !== "script" || error.name === undefined || error.stack === undefined) return error;
  const patterns = ENGINE_MESSAGES[error.name];
  if (!patterns?.some((pattern) => pattern.test(error.message))) return error;
  const frame = SCRIPT_FRAME.exec(error.stack);
  if (!frame) return error;
  const lineNumber = Number(frame[1]);
  const line = code.split("\n")[lineNumber - 1]?.replace(/\r$/, "");
  if (line === undefined || line.trim() === "") return error;
  let message = error.message;
  if (message === "not a function" || message === "not a constructor") {
    const callee = calleeAt(line, Number(frame[2]), message === "not a constructor");
    if (callee !== undefined) message = `${callee} is ${message}`;
  }
  message = `${message} (line ${lineNumber}: ${quoted(line, Number(frame[2]))})`;
  const head = `${error.name}: ${error.message}`;
  const stack = error.stack.startsWith(head)
    ? `${error.name}: ${message}${error.stack.slice(head.length)}`
    : error.stack;
  return { ...error, message, stack };
}

/**
 * The callee of the call at `column` of `line`: of the calls whose text spans that column (QuickJS points at the
 * callee's last name or its parenthesis, give or take one), the innermost. Undefined when no call of a plain name or
 * member chain is there (a computed member, a call of a call's result).
 */
function calleeAt(line: string, column: number, constructing: boolean): string | undefined {
  const at = column - 1;
  let best: { text: string; span: number } | undefined;
  for (const match of line.matchAll(CALLEE)) {
    const text = (match[2] as string).replace(/\s+/g, "");
    // QuickJS says "not a function" also for `new` of a value that is no function at all.
    if (NOT_CALLEES.has(text) || (constructing && match[1] === undefined)) continue;
    const start = match.index;
    const end = start + match[0].length;
    if (at < start - 1 || at > end) continue;
    const span = end - start;
    if (!best || span < best.span) best = { text, span };
  }
  return best?.text;
}

/** The line as a message quotes it: trimmed, and cut around the column when it is long. */
function quoted(line: string, column: number): string {
  const text = line.trim();
  if (text.length <= MAX_QUOTED_LINE_CHARS) return text;
  const offset = line.length - line.trimStart().length;
  const center = Math.max(0, column - 1 - offset);
  const start = Math.max(0, Math.min(center - MAX_QUOTED_LINE_CHARS / 2, text.length - MAX_QUOTED_LINE_CHARS));
  const end = start + MAX_QUOTED_LINE_CHARS;
  return `${start > 0 ? "…" : ""}${text.slice(start, end)}${end < text.length ? "…" : ""}`;
}
