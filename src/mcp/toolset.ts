/**
 * Upstream MCP servers as sandbox tools: every server of a config connected, its tools listed (all pages), filtered
 * by the server's allow-list and read-only mode, and named `<server>__<tool>` (see `names.ts`).
 */
import type { Tool } from "@modelcontextprotocol/sdk/types.js";
import { optionKeys, refuseUnknownOptions } from "../options.ts";
import type { CodemodeTool, CodemodeToolContext } from "../types.ts";
import { type McpServerSpec, type ParsedMcpConfig, parseMcpConfig } from "./config.ts";
import { McpToolCollisionError } from "./errors.ts";
import { mcpToolName } from "./names.ts";
import { callResultErrorMessage, callResultToValue } from "./result.ts";
import { McpUpstream, type McpUpstreamOptions, UPSTREAM_KEYS } from "./upstream.ts";

/** A sandbox tool backed by a tool of an upstream server. */
export interface McpTool extends CodemodeTool {
  /** The sandbox name, `<server>__<tool>` made an identifier. */
  name: string;
  description?: string;
  inputSchema: Record<string, unknown>;
  outputSchema?: Record<string, unknown>;
  /** The server's key in the config. */
  server: string;
  /** The tool's name on its server. */
  toolName: string;
  title?: string;
  /** The MCP annotations the server gave the tool (`readOnlyHint`, `destructiveHint`, ...). */
  annotations?: Tool["annotations"];
}

export interface ConnectMcpServersOptions extends Omit<McpUpstreamOptions, "onToolsChanged"> {
  /** Read-only mode for every server: only tools annotated `readOnlyHint: true`. */
  readOnly?: boolean;
  /** Allowed but doubtful things: unknown config fields, allow-list names a server does not have, skipped tools. */
  onWarning?: (message: string) => void;
}

export const CONNECT_KEYS = [
  ...UPSTREAM_KEYS.filter((key) => key !== "onToolsChanged"),
  ...optionKeys<Omit<ConnectMcpServersOptions, keyof McpUpstreamOptions>>({ readOnly: true, onWarning: true }),
];

/** The tools of a set of connected upstream servers. */
export class McpToolset {
  private readonly toolsByServer = new Map<string, McpTool[]>();
  private readonly listeners = new Set<() => void>();
  private closed = false;

  private constructor(
    readonly upstreams: readonly McpUpstream[],
    private readonly warn: (message: string) => void,
  ) {}

  /**
   * Connects every server of `config` (a config object in the `mcpServers` format, or `parseMcpConfig`'s result) at
   * the same time and lists their tools. If any server fails to start, the others are closed and the first failure
   * (in config order) is thrown: an `McpUpstreamError` with the server's stderr tail. Two tools with the same sandbox
   * name throw an `McpToolCollisionError`.
   */
  static async connect(config: unknown, options: ConnectMcpServersOptions = {}): Promise<McpToolset> {
    refuseUnknownOptions(options, "connectMcpServers", CONNECT_KEYS);
    const { clientInfo, connectTimeoutMs, callTimeoutMs, onStderr } = options;
    const parsed = isParsed(config)
      ? config
      : parseMcpConfig(config, options.readOnly === undefined ? {} : { readOnly: options.readOnly });
    const warn = options.onWarning ?? (() => {});
    if (!isParsed(config)) for (const warning of parsed.warnings) warn(warning);
    const specs = parsed.servers.map((spec) => (options.readOnly ? { ...spec, readOnly: true } : spec));
    let toolset: McpToolset | undefined;
    const upstreams = specs.map(
      (spec) =>
        new McpUpstream(spec, {
          clientInfo,
          connectTimeoutMs,
          callTimeoutMs,
          onStderr,
          onToolsChanged: (server) => void toolset?.refresh(server),
        }),
    );
    toolset = new McpToolset(upstreams, warn);
    const listed = await Promise.allSettled(upstreams.map((upstream) => upstream.listTools()));
    const failed = listed.find((result) => result.status === "rejected");
    if (failed !== undefined) {
      await toolset.close();
      throw failed.reason;
    }
    try {
      const taken = new Map<string, { server: string; tool: string }>();
      upstreams.forEach((upstream, i) => {
        const tools = toolset.build(upstream, (listed[i] as PromiseFulfilledResult<Tool[]>).value);
        checkCollisions(tools, taken);
        toolset.toolsByServer.set(upstream.name, tools);
      });
    } catch (error) {
      await toolset.close();
      throw error;
    }
    return toolset;
  }

  /** Every exposed tool, servers in config order. */
  get tools(): McpTool[] {
    return this.upstreams.flatMap((upstream) => this.toolsByServer.get(upstream.name) ?? []);
  }

  upstream(server: string): McpUpstream | undefined {
    return this.upstreams.find((upstream) => upstream.name === server);
  }

  /** Calls `listener` after a server's tool list changed and `tools` changed with it. Returns the unsubscribe. */
  onChange(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Lists a server's tools again (after `notifications/tools/list_changed`); a colliding new list is ignored. */
  async refresh(server: string): Promise<void> {
    const upstream = this.upstream(server);
    if (upstream === undefined || this.closed) return;
    try {
      const tools = this.build(upstream, await upstream.listTools());
      const taken = new Map<string, { server: string; tool: string }>();
      for (const other of this.upstreams)
        if (other !== upstream) checkCollisions(this.toolsByServer.get(other.name) ?? [], taken);
      checkCollisions(tools, taken);
      const before = fingerprint(this.toolsByServer.get(server) ?? []);
      this.toolsByServer.set(server, tools);
      if (fingerprint(tools) !== before) for (const listener of this.listeners) listener();
    } catch (error) {
      this.warn(`server "${server}" changed its tools, but the new list was not taken: ${(error as Error).message}`);
    }
  }

  /** Closes every connection (stdio servers are stopped). */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.allSettled(this.upstreams.map((upstream) => upstream.close()));
  }

  private build(upstream: McpUpstream, listed: Tool[]): McpTool[] {
    const spec = upstream.spec;
    let tools = listed;
    if (spec.allow !== null) {
      const allow = spec.allow;
      for (const name of allow) {
        if (!listed.some((tool) => tool.name === name || mcpToolName(spec.name, tool.name) === name)) {
          this.warn(`server "${spec.name}": its "tools" allow-list names "${name}", which the server does not have`);
        }
      }
      tools = tools.filter((tool) => allow.includes(tool.name) || allow.includes(mcpToolName(spec.name, tool.name)));
    }
    if (spec.readOnly) tools = tools.filter((tool) => tool.annotations?.readOnlyHint === true);
    tools = tools.filter((tool) => {
      if (tool.execution?.taskSupport !== "required") return true;
      this.warn(`server "${spec.name}": tool "${tool.name}" is left out: it only runs as an MCP task`);
      return false;
    });
    return tools.map((tool) => toSandboxTool(upstream, tool));
  }
}

/** Same as `McpToolset.connect`. */
export function connectMcpServers(config: unknown, options: ConnectMcpServersOptions = {}): Promise<McpToolset> {
  return McpToolset.connect(config, options);
}

function toSandboxTool(upstream: McpUpstream, tool: Tool): McpTool {
  const name = mcpToolName(upstream.name, tool.name);
  const annotations = tool.annotations;
  const repeatable = annotations?.readOnlyHint === true || annotations?.idempotentHint === true;
  const description = tool.description ?? tool.title;
  return {
    name,
    ...(description === undefined ? {} : { description }),
    inputSchema: tool.inputSchema as Record<string, unknown>,
    ...(tool.outputSchema === undefined ? {} : { outputSchema: tool.outputSchema as Record<string, unknown> }),
    server: upstream.name,
    toolName: tool.name,
    ...(tool.title === undefined ? {} : { title: tool.title }),
    ...(annotations === undefined ? {} : { annotations }),
    async execute(args: unknown, { signal }: CodemodeToolContext) {
      const input = args === undefined || args === null ? {} : args;
      if (typeof input !== "object" || Array.isArray(input)) {
        throw new TypeError(
          `tools.${name} takes one object of arguments, got ${Array.isArray(input) ? "an array" : typeof input}`,
        );
      }
      const result = await upstream.callTool(tool.name, input as Record<string, unknown>, { signal, repeatable });
      if (result.isError === true) throw new Error(callResultErrorMessage(result, `tools.${name}`));
      return callResultToValue(result);
    },
  };
}

function checkCollisions(tools: readonly McpTool[], taken: Map<string, { server: string; tool: string }>): void {
  for (const tool of tools) {
    const mine = { server: tool.server, tool: tool.toolName };
    const other = taken.get(tool.name);
    if (other !== undefined) throw new McpToolCollisionError(tool.name, other, mine);
    taken.set(tool.name, mine);
  }
}

/** What a client sees of a tool list, to tell whether a new list changed anything. */
function fingerprint(tools: readonly McpTool[]): string {
  return JSON.stringify(
    tools.map((tool) => [tool.name, tool.description, tool.inputSchema, tool.outputSchema, tool.annotations]),
  );
}

function isParsed(config: unknown): config is ParsedMcpConfig {
  return (
    typeof config === "object" &&
    config !== null &&
    Array.isArray((config as ParsedMcpConfig).servers) &&
    Array.isArray((config as ParsedMcpConfig).warnings)
  );
}

export type { McpServerSpec };
