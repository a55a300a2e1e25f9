/** How a run's result reads in a terminal when `--json` is not given. */
import type { CodemodeError, CodemodeOutputItem } from "../index.ts";

/** One line per output item: text as is (console lines too), images as a short description. */
export function formatOutput(items: readonly CodemodeOutputItem[]): string {
  let out = "";
  for (const item of items) {
    const line =
      item.type === "image" ? `[image ${item.mimeType}, ${Buffer.byteLength(item.data, "base64")} bytes]` : item.text;
    out += line.endsWith("\n") ? line : `${line}\n`;
  }
  return out;
}

/** The returned value: strings as is, other values as pretty JSON, nothing for `undefined`. */
export function formatValue(value: unknown): string {
  if (value === undefined) return "";
  const text = typeof value === "string" ? value : JSON.stringify(value, null, 2);
  return text.endsWith("\n") ? text : `${text}\n`;
}

/** A script as the command line names it (its path as given, or `<stdin>`), and its text. */
export interface ScriptSource {
  name: string;
  text: string;
}

/** Characters of the failing line shown under a failed run; a longer line is shown around the column. */
export const MAX_FRAME_LINE_CHARS = 120;

/** Stack frames of the script named by its file instead of the sandbox's `codemode.js`. */
export function nameFrames(stack: string, name: string): string {
  return stack.replace(/\bcodemode\.js:(?=\d+:\d+)/g, () => `${name}:`);
}

/**
 * A failed run for stderr: the error kind and message; for an error inside the script, where it happened with the
 * line of source and a caret under the column; then the script's stack frames, named by the script's file.
 */
export function formatError(error: CodemodeError, script?: ScriptSource): string {
  const head = error.name ? `${error.name}: ${error.message}` : error.message;
  let out = `airlock: run failed (${error.kind}): ${head}\n`;
  if (error.stack) {
    // The sandbox's stacks start with the same "Name: message" line; print only what follows it.
    let stack = error.stack.startsWith(head) ? error.stack.slice(head.length).replace(/^\n/, "") : error.stack;
    if (script) {
      out += codeFrame(stack, script);
      stack = nameFrames(stack, script.name);
    }
    if (stack.trim() !== "") out += stack.endsWith("\n") ? stack : `${stack}\n`;
  }
  return out;
}

/** `name:line:column`, the line of source and a caret, for the first frame in the script; "" without one. */
function codeFrame(stack: string, script: ScriptSource): string {
  const at = /\bcodemode\.js:(\d+):(\d+)/.exec(stack);
  if (!at) return "";
  const lineNumber = Number(at[1]);
  const column = Number(at[2]);
  const line = script.text.split(/\r\n?|\n/)[lineNumber - 1];
  if (line === undefined || column < 1) return "";
  // A long line is shown around the column; control characters would move the caret (or the terminal).
  let start = 0;
  let shown = line;
  if (line.length > MAX_FRAME_LINE_CHARS) {
    start = Math.max(0, Math.min(column - 1 - MAX_FRAME_LINE_CHARS / 2, line.length - MAX_FRAME_LINE_CHARS));
    shown = `${start > 0 ? "…" : ""}${line.slice(start, start + MAX_FRAME_LINE_CHARS)}${start + MAX_FRAME_LINE_CHARS < line.length ? "…" : ""}`;
  }
  shown = shown.replace(/\p{Cc}/gu, (c) => (c === "\t" ? c : " "));
  const before = shown.slice(0, column - 1 - start + (start > 0 ? 1 : 0)).replace(/[^\t]/g, " ");
  const gutter = String(lineNumber);
  return `${script.name}:${lineNumber}:${column}\n  ${gutter} | ${shown}\n  ${" ".repeat(gutter.length)} | ${before}^\n`;
}
