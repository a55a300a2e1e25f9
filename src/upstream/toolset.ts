/**
 * Upstream MCP servers as sandbox tools: every server of a config connected, its tools listed (all pages), filtered
 * by the server's allow-list and read-only mode, and named `<server>__<tool>` (see `tool-names.ts`). A server that does not
 * start, or dies for good, fails alone: the others serve on, and it is tried again in the background.
 */
import type { Root, Tool } from "@modelcontextprotocol/sdk/types.js";
import { optionKeys, refuseUnknownOptions } from "../platform/options.ts";
import type { CodemodeTool, CodemodeToolContext } from "../types.ts";
import { needsApproval, requireApproval } from "./approval.ts";
import { callResultErrorMessage, callResultToValue } from "./call-result.ts";
import { type McpServerSpec, type ParsedMcpConfig, parseMcpConfig } from "./config.ts";
import { McpUpstream, type McpUpstreamDown, type McpUpstreamOptions, UPSTREAM_KEYS } from "./server.ts";
import { mcpToolName } from "./tool-names.ts";
import { McpToolCollisionError } from "./upstream-errors.ts";
import { MAX_STDIO_CALL_ARGUMENT_BYTES } from "./upstream-limits.ts";

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
  /** A person approves each call before it is sent (the server's `approval` config field; see approval.ts). */
  needsApproval: boolean;
}

/** Options the toolset sets on its upstreams itself. */
type OwnUpstreamOptions = "onToolsChanged" | "onListChanged" | "onUp" | "roots";

export interface ConnectMcpServersOptions extends Omit<McpUpstreamOptions, OwnUpstreamOptions> {
  /** Read-only mode for every server: only tools annotated `readOnlyHint: true`. */
  readOnly?: boolean;
  /** Allowed but doubtful things: unknown config fields, allow-list names a server does not have, skipped tools. */
  onWarning?: (message: string) => void;
  /** Called when a server that was down started again and its tools were listed. */
  onUp?: (server: string) => void;
}

export const CONNECT_KEYS = [
  ...UPSTREAM_KEYS.filter((key) => !["onToolsChanged", "onListChanged", "onUp", "roots"].includes(key)),
  ...optionKeys<Omit<ConnectMcpServersOptions, keyof McpUpstreamOptions>>({ readOnly: true, onWarning: true }),
  "onUp",
];

/**
 * What changed: the tools (and with them the sandbox's registry), a server's state (it went down or came back), or
 * an upstream's resources or prompts.
 */
export type McpToolsetChange = "tools" | "status" | "resources" | "prompts";

/** The state of one upstream server. */
export interface McpServerStatus {
  server: string;
  /** "up" once its tools were listed; "down" while it is tried again in the background. */
  state: "up" | "down";
  /** The tools it exposes (those it listed last, when it is down after having been up). */
  tools: number;
  down?: McpUpstreamDown;
}

/** The tools of a set of upstream servers. */
export class McpToolset {
  private readonly toolsByServer = new Map<string, McpTool[]>();
  private readonly listeners = new Set<(change: McpToolsetChange) => void>();
  private currentRoots: Root[] = [];
  private closed = false;

  private constructor(
    readonly upstreams: readonly McpUpstream[],
    private readonly warn: (message: string) => void,
    private readonly onUp: ((server: string) => void) | undefined,
  ) {}

  /**
   * Connects every server of `config` (a config object in the `mcpServers` or `servers` format, or `parseMcpConfig`'s
   * result) at the same time and lists their tools. A server that fails to start (or to list its tools) does not fail
   * the others: it is reported through `onDown` and `status()`, and tried again in the background with a delay that
   * doubles up to `UPSTREAM_RETRY_MAX_MS`. Two tools with the same sandbox name throw an `McpToolCollisionError`.
   */
  static async connect(config: unknown, options: ConnectMcpServersOptions = {}): Promise<McpToolset> {
    refuseUnknownOptions(options, "connectMcpServers", CONNECT_KEYS);
    const { readOnly, onWarning, onUp, onDown, ...upstreamOptions } = options;
    const parsed = isParsed(config) ? config : parseMcpConfig(config, readOnly === undefined ? {} : { readOnly });
    const warn = onWarning ?? (() => {});
    if (!isParsed(config)) for (const warning of parsed.warnings) warn(warning);
    const specs = parsed.servers.map((spec) => (readOnly ? { ...spec, readOnly: true } : spec));
    let toolset: McpToolset | undefined;
    const upstreams = specs.map(
      (spec) =>
        new McpUpstream(spec, {
          ...upstreamOptions,
          onToolsChanged: (server) => void toolset?.refresh(server),
          onListChanged: (_server, list) => toolset?.emit(list),
          onUp: (server) => void toolset?.refresh(server, true),
          onDown: (server, down) => {
            onDown?.(server, down);
            toolset?.emit("status");
          },
          roots: () => toolset?.currentRoots ?? [],
        }),
    );
    toolset = new McpToolset(upstreams, warn, onUp);
    const listed = await Promise.allSettled(upstreams.map((upstream) => upstream.listTools()));
    try {
      const taken = new Map<string, { server: string; tool: string }>();
      upstreams.forEach((upstream, i) => {
        const result = listed[i] as PromiseSettledResult<Tool[]>;
        if (result.status === "rejected") {
          // Marked down already when it did not start; a server that started but could not list is down too.
          if (upstream.down === undefined) upstream.fail(result.reason);
          return;
        }
        const tools = (toolset as McpToolset).build(upstream, result.value);
        checkCollisions(tools, taken);
        (toolset as McpToolset).toolsByServer.set(upstream.name, tools);
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

  /** Every server, in config order, with its state. */
  status(): McpServerStatus[] {
    return this.upstreams.map((upstream) => {
      const down = upstream.down;
      const tools = this.toolsByServer.get(upstream.name)?.length ?? 0;
      return down === undefined
        ? { server: upstream.name, state: "up" as const, tools }
        : { server: upstream.name, state: "down" as const, tools, down };
    });
  }

  /** The servers that are down now. */
  get down(): McpServerStatus[] {
    return this.status().filter((status) => status.state === "down");
  }

  /**
   * Calls `listener` after a server's tool list changed and `tools` changed with it ("tools"), or after a server said
   * that its resources or prompts changed. Returns the unsubscribe.
   */
  onChange(listener: (change: McpToolsetChange) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** The roots upstream servers get when they ask (`roots/list`): the gateway's client's. Tells them when they change. */
  get roots(): Root[] {
    return this.currentRoots;
  }

  setRoots(roots: readonly Root[]): void {
    this.currentRoots = roots.map((root) => ({ ...root }));
    for (const upstream of this.upstreams) upstream.rootsChanged();
  }

  /**
   * Lists a server's tools again (after `notifications/tools/list_changed`, or when it is back after being down); a
   * colliding new list is not taken. A server that is back but cannot list its tools is down again.
   */
  async refresh(server: string, cameBack = false): Promise<void> {
    const upstream = this.upstream(server);
    if (upstream === undefined || this.closed) return;
    let listed: Tool[];
    try {
      listed = await upstream.listTools();
    } catch (error) {
      if (cameBack) upstream.fail(error);
      else this.warn(`server "${server}" changed its tools, but listing them failed: ${(error as Error).message}`);
      return;
    }
    if (this.closed) return;
    try {
      const tools = this.build(upstream, listed);
      const taken = new Map<string, { server: string; tool: string }>();
      for (const other of this.upstreams)
        if (other !== upstream) checkCollisions(this.toolsByServer.get(other.name) ?? [], taken);
      checkCollisions(tools, taken);
      const before = fingerprint(this.toolsByServer.get(server) ?? []);
      this.toolsByServer.set(server, tools);
      if (fingerprint(tools) !== before) this.emit("tools");
      if (cameBack) {
        upstream.confirmUp();
        this.onUp?.(server);
        this.emit("status");
      }
    } catch (error) {
      this.warn(`server "${server}" changed its tools, but the new list was not taken: ${(error as Error).message}`);
    }
  }

  /** Closes every connection (stdio servers are stopped) and stops retrying servers that are down. */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.allSettled(this.upstreams.map((upstream) => upstream.close()));
  }

  private emit(change: McpToolsetChange): void {
    if (this.closed) return;
    for (const listener of this.listeners) listener(change);
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
    if (Array.isArray(spec.approval)) {
      for (const name of spec.approval) {
        if (!listed.some((tool) => tool.name === name || mcpToolName(spec.name, tool.name) === name)) {
          this.warn(`server "${spec.name}": its "approval" list names "${name}", which the server does not have`);
        }
      }
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
  const gated = needsApproval(upstream.spec.approval, tool.name, name);
  return {
    name,
    ...(description === undefined ? {} : { description }),
    inputSchema: tool.inputSchema as Record<string, unknown>,
    ...(tool.outputSchema === undefined ? {} : { outputSchema: tool.outputSchema as Record<string, unknown> }),
    server: upstream.name,
    toolName: tool.name,
    ...(tool.title === undefined ? {} : { title: tool.title }),
    ...(annotations === undefined ? {} : { annotations }),
    needsApproval: gated,
    async execute(args: unknown, { signal, caller }: CodemodeToolContext) {
      const input = args === undefined || args === null ? {} : args;
      if (typeof input !== "object" || Array.isArray(input)) {
        throw new TypeError(
          `tools.${name} takes one object of arguments, got ${Array.isArray(input) ? "an array" : typeof input}`,
        );
      }
      if (upstream.spec.transport === "stdio") checkStdioArguments(name, input);
      if (gated) {
        const call = { server: upstream.name, tool: tool.name, name, args: input as Record<string, unknown> };
        await requireApproval(caller, call, signal);
      }
      const result = await upstream.callTool(tool.name, input as Record<string, unknown>, { signal, repeatable });
      if (result.isError === true) throw new Error(callResultErrorMessage(result, `tools.${name}`));
      return callResultToValue(result);
    },
  };
}

/**
 * Refuses a call to a stdio server whose arguments the server could not read (see MAX_STDIO_CALL_ARGUMENT_BYTES): it
 * would close the connection, and with it the other executions' calls to that server.
 */
function checkStdioArguments(name: string, input: object): void {
  const json = JSON.stringify(input);
  // Every character is at most 3 bytes of UTF-8: most arguments are counted without encoding them.
  if (json.length * 3 <= MAX_STDIO_CALL_ARGUMENT_BYTES) return;
  const bytes = Buffer.byteLength(json);
  if (bytes <= MAX_STDIO_CALL_ARGUMENT_BYTES) return;
  throw new RangeError(
    `tools.${name}: its arguments are ${bytes} bytes of JSON, more than a call to a stdio server may carry (${MAX_STDIO_CALL_ARGUMENT_BYTES}, MAX_STDIO_CALL_ARGUMENT_BYTES); it was not sent`,
  );
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
