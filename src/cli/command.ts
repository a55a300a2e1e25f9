/** What a command is, and what it may touch of the process. The table of commands is commands.ts. */
import type { Progress } from "./progress.ts";

/** What a command may touch of the process, so that it never reaches for globals it does not need. */
export interface CliIo {
  /** Directory that relative paths on the command line are resolved against. */
  cwd: string;
  stdout(text: string): void;
  stderr(text: string): void;
  /** Reads standard input to its end as UTF-8. */
  readStdin(): Promise<string>;
  /** Calls `handler` on Ctrl-C (SIGINT) until the returned function is called. */
  onInterrupt(handler: () => void): () => void;
  /** A line of progress on stderr while long work runs, shown on a terminal only (see `progress.ts`). */
  progress(text: string): Progress;
}

export interface Command {
  name: string;
  /** The command with its arguments as the general help lists it, for example `run <file|->`. */
  synopsis: string;
  /** One line for the general help. */
  summary: string;
  /** The command's full help text, ending with a newline. */
  usage: string;
  run(argv: string[], io: CliIo): Promise<number>;
}
