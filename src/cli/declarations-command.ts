/**
 * `airlock declarations`: what a model sees. With `--tools <module>`, the TypeScript declarations of those tools; with
 * `--config <mcp.json>`, the gateway's tool list and instructions exactly as `airlock serve` gives them to a client.
 */
import { DEFAULT_GATEWAY_TIMEOUT_MS, DEFAULT_MAX_OUTPUT_TOKENS } from "../gateway/defaults.ts";
import { CODEMODE_OPTIONS_LIMITS } from "../source/options-line.ts";
import { EXIT_OK, parseFlags, positiveInteger, timeoutFlag, UsageError } from "./args.ts";
import type { CliIo, Command } from "./command.ts";
import { connectConfig, loadMcp } from "./mcp-config.ts";
import { loadTools } from "./tools.ts";
import { version } from "./version.ts";

const USAGE = `Usage: airlock declarations --tools <module> [options]
       airlock declarations --config <mcp.json> [options]

Prints what a model sees. With --tools, the TypeScript declarations of the tools in <module> (its default export
is an array of tools with JSON Schema or zod input and output schemas). With --config, the tools and instructions
that airlock serve gives an MCP client for those servers (search, describe and execute, whose description carries
the declarations), exactly as a client lists them.

Options:
  --tools <module>           JS module whose default export is an array of tools
  --index-threshold <n>      With --tools: above this many tools, print a compact index instead of full declarations
  --config <mcp.json>        MCP servers, in the format airlock serve reads
  --read-only                With --config: only tools annotated readOnlyHint: true, as serve --read-only
  --timeout <ms>             With --config: the deadline serve --timeout would state (default ${DEFAULT_GATEWAY_TIMEOUT_MS})
  --max-output-tokens <n>    With --config: the limit serve --max-output-tokens would state (default ${DEFAULT_MAX_OUTPUT_TOKENS})
  --json                     With --config: print the instructions and the tools/list result as JSON
  -h, --help                 Show this help
`;

const flags = {
  tools: { type: "string" },
  "index-threshold": { type: "string" },
  config: { type: "string" },
  "read-only": { type: "boolean" },
  timeout: { type: "string" },
  "max-output-tokens": { type: "string" },
  json: { type: "boolean" },
  help: { type: "boolean", short: "h" },
} as const;

type Values = ReturnType<typeof parseFlags<typeof flags>>["values"];

export const declarationsCommand: Command = {
  name: "declarations",
  synopsis: "declarations --tools <module> | --config <mcp.json>",
  summary: "Print what a model sees of a tools module or of the gateway for MCP servers",
  usage: USAGE,
  async run(argv: string[], io: CliIo): Promise<number> {
    const { values, positionals } = parseFlags(argv, flags);
    if (values.help) {
      io.stdout(USAGE);
      return EXIT_OK;
    }
    if (positionals.length > 0) throw new UsageError(`unexpected argument: ${positionals[0]}`);
    if (values.tools !== undefined && values.config !== undefined) {
      throw new UsageError("give --tools <module> or --config <mcp.json>, not both");
    }
    if (values.config !== undefined) return await gatewayView(values.config, values, io);
    if (values.tools === undefined) throw new UsageError("--tools <module> or --config <mcp.json> is required");
    for (const flag of ["read-only", "timeout", "max-output-tokens", "json"] as const) {
      if (values[flag] !== undefined) throw new UsageError(`--${flag} needs --config <mcp.json>`);
    }
    const threshold = values["index-threshold"];
    const tools = await loadTools(values.tools, io.cwd);
    // Loaded by this command only: the other commands start without the renderer.
    const { renderDeclarations } = await import("../declarations/index.ts");
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

/** Lists the gateway's tools through a real MCP client session, the way a desktop client would. */
async function gatewayView(config: string, values: Values, io: CliIo): Promise<number> {
  if (values["index-threshold"] !== undefined) throw new UsageError("--index-threshold needs --tools <module>");
  const timeoutMs = values.timeout === undefined ? DEFAULT_GATEWAY_TIMEOUT_MS : timeoutFlag(values.timeout);
  const maxOutputTokens =
    values["max-output-tokens"] === undefined
      ? DEFAULT_MAX_OUTPUT_TOKENS
      : positiveInteger(
          "--max-output-tokens",
          values["max-output-tokens"],
          CODEMODE_OPTIONS_LIMITS.max_output_tokens,
          "tokens",
        );
  const readOnly = values["read-only"] === true;
  await loadMcp("MCP servers (--config)");
  // The description's token budget is counted with the tokenizer, as `airlock serve` counts it before it answers.
  const [toolset, { McpGateway }, { Client }, { InMemoryTransport }] = await Promise.all([
    connectConfig(config, io, { command: "declarations", readOnly }),
    Promise.all([import("../gateway/gateway.ts"), import("../gateway/tokens.ts")]).then(async ([gateway, tokens]) => {
      await tokens.loadTokenizer();
      return gateway;
    }),
    import("@modelcontextprotocol/sdk/client/index.js"),
    import("@modelcontextprotocol/sdk/inMemory.js"),
  ]);
  const gateway = new McpGateway(toolset, {
    timeoutMs,
    maxOutputTokens,
    serverInfo: { name: "airlock", version: version() },
  });
  const client = new Client({ name: "airlock declarations", version: version() });
  try {
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    await gateway.createServer().connect(serverSide);
    await client.connect(clientSide);
    const instructions = client.getInstructions();
    const { tools } = await client.listTools();
    if (values.json) {
      io.stdout(`${JSON.stringify({ instructions, tools }, null, 2)}\n`);
      return EXIT_OK;
    }
    let out = instructions === undefined ? "" : `Instructions:\n${instructions}\n`;
    for (const tool of tools) {
      const title = tool.title === undefined ? "" : ` (${tool.title})`;
      out += `\nTool ${tool.name}${title}:\n${tool.description ?? ""}\n\nInput schema:\n`;
      out += `${JSON.stringify(tool.inputSchema, null, 2)}\n`;
    }
    io.stdout(out);
    return EXIT_OK;
  } finally {
    await client.close();
    await gateway.close();
    await toolset.close();
  }
}
