/**
 * `--config <mcp.json>` of `run` and `declarations`: the MCP servers of a config (the format `serve` reads), connected
 * with a line of progress on a terminal, their tools named `<server>__<tool>` as the gateway names them. A server
 * that does not start fails the command.
 */
import { resolve } from "node:path";
import type { McpToolset } from "../mcp.ts";
import { missingPackage } from "../platform/platform.ts";
import { CommandError, UsageError } from "./args.ts";
import type { CliIo } from "./command.ts";
import { version } from "./version.ts";

/** The packages MCP servers as tools and the gateway load (optional dependencies), with the majors they need. */
const MCP_PACKAGES: Record<string, string> = {
  "@modelcontextprotocol/sdk": "1",
  jose: "6",
  "eventsource-parser": "3",
};
/** What the gateway needs besides: amaro, which strips every program it runs (an optional peer). */
export const GATEWAY_PACKAGES: Record<string, string> = { ...MCP_PACKAGES, amaro: "1" };

/**
 * `airlock-codemode/mcp`, loaded only by the commands that use MCP: the other commands (and --help) start without
 * the MCP SDK. Without one of `needs` (an install without its optional packages), the command says what to install.
 */
export async function loadMcp(what: string, needs = MCP_PACKAGES): Promise<typeof import("../mcp.ts")> {
  const missing = Object.entries(needs).filter(([name]) => {
    try {
      import.meta.resolve(name);
      return false;
    } catch {
      return true;
    }
  });
  if (missing.length > 0) throw new CommandError(missingPackage(what, Object.fromEntries(missing)).message);
  return import("../mcp.ts");
}

/** Connects every server of the config at `spec` (relative to the current directory). Close the toolset after use. */
export async function connectConfig(
  spec: string,
  io: CliIo,
  options: { command: string; readOnly: boolean },
): Promise<McpToolset> {
  const mcp = await loadMcp("MCP servers (--config)");
  const warn = (text: string) => io.stderr(`airlock ${options.command}: warning: ${text}\n`);
  let config: Awaited<ReturnType<typeof mcp.loadMcpConfig>>;
  try {
    config = await mcp.loadMcpConfig(resolve(io.cwd, spec), { readOnly: options.readOnly });
  } catch (error) {
    if (error instanceof mcp.McpConfigError) throw new UsageError(`--config ${spec}: ${error.message}`);
    throw error;
  }
  for (const warning of config.warnings) warn(warning);
  const names = config.servers.map((server) => server.name);
  const progress = io.progress(
    `connecting to ${names.length} MCP server${names.length === 1 ? "" : "s"} (${names.join(", ")})…`,
  );
  try {
    const toolset = await mcp.connectMcpServers(config, {
      readOnly: options.readOnly,
      clientInfo: { name: "airlock", version: version() },
      onWarning: warn,
    });
    // The gateway serves the other servers while one is down and retries it; a one-shot command cannot wait for
    // that, and a run without one of its servers would fail later and less clearly.
    const down = toolset.down[0]?.down;
    if (down !== undefined) {
      await toolset.close();
      throw new CommandError(down.error.message);
    }
    return toolset;
  } catch (error) {
    if (error instanceof mcp.McpUpstreamError || error instanceof mcp.McpToolCollisionError) {
      throw new CommandError(error.message);
    }
    throw error;
  } finally {
    progress.done();
  }
}
