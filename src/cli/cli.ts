/** The `airlock` command line: global flags, the command table, and how usage errors are reported. */
import { CommandError, EXIT_FAILED, EXIT_OK, EXIT_USAGE, UsageError } from "./args.ts";
import type { CliIo, Command } from "./command.ts";
import { commands, findCommand } from "./commands.ts";
import { version } from "./version.ts";

export function generalUsage(): string {
  const commandRows = [
    ...commands.map((c) => [c.synopsis, c.summary]),
    ["help [command]", "Show the help of a command"],
  ];
  const optionRows = [
    ["-h, --help", "Show this help"],
    ["-v, --version", "Print the version"],
  ];
  const width = Math.max(...[...commandRows, ...optionRows].map(([left]) => (left as string).length)) + 3;
  const table = (rows: string[][]) =>
    rows.map(([left, right]) => `  ${(left as string).padEnd(width)}${right}`).join("\n");
  return `Usage: airlock <command> [options]

Runs model-written JavaScript in a QuickJS sandbox whose only way out is the tools you hand it.

Commands:
${table(commandRows)}

Options:
${table(optionRows)}

Run "airlock help <command>" for the options of a command.
`;
}

/** Runs the command line `argv` (without node and the script) and resolves to the exit status. */
export async function cli(argv: string[], io: CliIo): Promise<number> {
  const [first, ...rest] = argv;
  let command: Command | undefined;
  try {
    if (first === undefined) {
      io.stderr(`airlock: missing command\n\n${generalUsage()}`);
      return EXIT_USAGE;
    }
    if (first === "-h" || first === "--help" || first === "help") {
      const topic = first === "help" ? rest[0] : undefined;
      // `help help` asks for the help of the help command, which is the general help.
      if (topic === undefined || topic === "help") {
        io.stdout(generalUsage());
        return EXIT_OK;
      }
      const target = findCommand(topic);
      if (!target) throw new UsageError(`unknown command "${topic}"`);
      io.stdout(target.usage);
      return EXIT_OK;
    }
    if (first === "-v" || first === "--version") {
      io.stdout(`${version()}\n`);
      return EXIT_OK;
    }
    if (first.startsWith("-")) throw new UsageError(`unknown flag ${first}`);
    command = findCommand(first);
    if (!command) throw new UsageError(`unknown command "${first}"`);
    return await command.run(rest, io);
  } catch (error) {
    if (error instanceof UsageError) {
      const name = command ? `airlock ${command.name}` : "airlock";
      io.stderr(`${name}: ${error.message}\nRun "${name} --help" for usage.\n`);
      return EXIT_USAGE;
    }
    if (error instanceof CommandError) {
      io.stderr(`${command ? `airlock ${command.name}` : "airlock"}: ${error.message}\n`);
      return EXIT_FAILED;
    }
    io.stderr(`airlock: ${(error as Error)?.stack ?? String(error)}\n`);
    return EXIT_FAILED;
  }
}
