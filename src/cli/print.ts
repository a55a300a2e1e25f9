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

/** A failed run for stderr: the error kind and message, then the script's stack frames if there are any. */
export function formatError(error: CodemodeError): string {
  const head = error.name ? `${error.name}: ${error.message}` : error.message;
  let out = `airlock: run failed (${error.kind}): ${head}\n`;
  if (error.stack) {
    // The sandbox's stacks start with the same "Name: message" line; print only what follows it.
    const stack = error.stack.startsWith(head) ? error.stack.slice(head.length).replace(/^\n/, "") : error.stack;
    if (stack.trim() !== "") out += stack.endsWith("\n") ? stack : `${stack}\n`;
  }
  return out;
}
