/** `airlock declarations --tools <module>`: prints the TypeScript declarations a model sees for those tools. */
import { renderDeclarations } from "../declarations/index.ts";
import { EXIT_OK, parseFlags, positiveInteger, UsageError } from "./args.ts";
import type { CliIo, Command } from "./commands.ts";
import { loadTools } from "./tools.ts";

const USAGE = `Usage: airlock declarations --tools <module> [options]

Prints the TypeScript declarations of the tools in <module> (its default export is an array of tools with
JSON Schema or zod input and output schemas), as a model sees them.

Options:
  --tools <module>       JS module whose default export is an array of tools
  --index-threshold <n>  Above this many tools, print a compact index instead of full declarations
  -h, --help             Show this help
`;

const flags = {
  tools: { type: "string" },
  "index-threshold": { type: "string" },
  help: { type: "boolean", short: "h" },
} as const;

export const declarationsCommand: Command = {
  name: "declarations",
  synopsis: "declarations --tools <module>",
  summary: "Print the TypeScript declarations of a tools module",
  usage: USAGE,
  async run(argv: string[], io: CliIo): Promise<number> {
    const { values, positionals } = parseFlags(argv, flags);
    if (values.help) {
      io.stdout(USAGE);
      return EXIT_OK;
    }
    if (positionals.length > 0) throw new UsageError(`unexpected argument: ${positionals[0]}`);
    if (values.tools === undefined) throw new UsageError("--tools <module> is required");
    const threshold = values["index-threshold"];
    const tools = await loadTools(values.tools, io.cwd);
    const text = renderDeclarations(
      { tools },
      threshold === undefined
        ? {}
        : { indexThreshold: positiveInteger("--index-threshold", threshold, 1_000_000, "tools") },
    );
    io.stdout(text.endsWith("\n") ? text : `${text}\n`);
    return EXIT_OK;
  },
};
