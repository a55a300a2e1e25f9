/**
 * The subcommand table. A command parses its own flags (see `parseFlags`), throws `UsageError` for bad usage and
 * resolves to its exit status. To add one, write `src/cli/<name>-command.ts` exporting a `Command` (command.ts) and list it here.
 */
import type { Command } from "./command.ts";
import { declarationsCommand } from "./declarations-command.ts";
import { runCommand } from "./run-command.ts";
import { approvalsCommand, approveCommand, rejectCommand, runsCommand } from "./runs-commands.ts";
import { serveCommand } from "./serve-command.ts";

export const commands: readonly Command[] = [
  runCommand,
  declarationsCommand,
  serveCommand,
  runsCommand,
  approvalsCommand,
  approveCommand,
  rejectCommand,
];

export function findCommand(name: string): Command | undefined {
  return commands.find((command) => command.name === name);
}
