/**
 * The wrapper a script or program is compiled in, and what it changes in the positions of error stacks: the wrapper
 * shares line 1 with the script, so line numbers are exact and only the columns of line 1 need correcting.
 */
import type { JSException } from "quickjs-wasi";
import { PRELUDE_FILENAME, SCRIPT_FILENAME } from "./prelude.ts";
import type { RunRequest } from "./protocol.ts";

/** A program is called with its input and tools; no name of the wrapper's is in scope of its source. */
export function wrapperHead(request: RunRequest): string {
  return request.program ? "(async function () { return await (" : "(async function () {";
}

export function wrapperTail(request: RunRequest): string {
  return request.program ? "\n)(arguments[0], arguments[1]); })" : "\n})";
}

export function wrappedSource(request: RunRequest): string {
  return `${wrapperHead(request)}${request.code}${wrapperTail(request)}`;
}

const SCRIPT_AT = SCRIPT_FILENAME.replace(".", "\\.");

/** `stack` with the columns of line 1 counted from the script's first character rather than the wrapper's. */
export function wrapperColumns(stack: string, request: RunRequest): string {
  const head = wrapperHead(request).length;
  return stack.replace(new RegExp(`${SCRIPT_AT}:1:(\\d+)`, "g"), (whole, column: string) =>
    Number(column) > head ? `${SCRIPT_FILENAME}:1:${Number(column) - head}` : whole,
  );
}

/** The error of a script that did not compile, positioned at the script as written. */
export function describeCompileError(
  error: JSException,
  request: RunRequest,
): { name: string; message: string; stack: string } {
  const lines = request.code.split("\n");
  const at = new RegExp(`${SCRIPT_AT}:(\\d+)`).exec(error.stack ?? "");
  // Past the script's last line, the parser met the wrapper's closing: the script itself ended too early.
  if (at && Number(at[1]) > lines.length) {
    const message = "the script ends before a bracket, brace, parenthesis, string or comment is closed";
    const end = `${SCRIPT_FILENAME}:${lines.length}:${(lines.at(-1) ?? "").length + 1}`;
    return { name: error.name, message, stack: `${error.name}: ${message}\n    at ${end}` };
  }
  return {
    name: error.name,
    message: error.message,
    stack: cleanStack(`${error.name}: ${error.message}\n${error.stack ?? ""}`),
  };
}

/** A stack without the prelude's frames and empty lines. */
export function cleanStack(stack: string): string {
  return stack
    .split("\n")
    .filter((line, index) => line !== "" && (index === 0 || !line.includes(PRELUDE_FILENAME)))
    .join("\n");
}
