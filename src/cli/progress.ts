/**
 * One line of progress on a terminal while long work runs ("connecting to 3 MCP servers…"), rewritten in place and
 * erased when the work is done. On a pipe or a file nothing is written, so that output there is results only.
 */

/** What progress needs of a stream such as `process.stderr`. */
export interface ProgressStream {
  isTTY?: boolean;
  columns?: number;
  write(text: string): unknown;
}

export interface Progress {
  /** Shows `text` instead of the current line. */
  update(text: string): void;
  /** Erases the line for other output (`update` shows it again). */
  clear(): void;
  /** Erases the line for good; later updates are ignored. */
  done(): void;
}

/** Width used when a terminal does not say its own (a pseudo-terminal may say 0). */
const DEFAULT_COLUMNS = 80;
/** Erases the terminal's current line and returns to its start. */
const ERASE_LINE = "\r\x1b[2K";

/** Progress on `stream`, starting with `text`; on a stream that is not a terminal every method does nothing. */
export function startProgress(stream: ProgressStream, text: string): Progress {
  if (stream.isTTY !== true) return { update() {}, clear() {}, done() {} };
  let shown = false;
  let finished = false;
  const clear = () => {
    if (shown) stream.write(ERASE_LINE);
    shown = false;
  };
  const update = (next: string) => {
    if (finished) return;
    // One line only: a longer one would wrap, and the erase would leave its first part behind.
    const columns = stream.columns !== undefined && stream.columns > 0 ? stream.columns : DEFAULT_COLUMNS;
    const width = columns - 1;
    const line = next.replace(/\s+/g, " ");
    stream.write(`${ERASE_LINE}${line.length > width ? `${line.slice(0, width - 1)}…` : line}`);
    shown = true;
  };
  update(text);
  return {
    update,
    clear,
    done() {
      clear();
      finished = true;
    },
  };
}
