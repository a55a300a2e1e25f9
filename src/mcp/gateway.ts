/**
 * The code-mode MCP gateway: one MCP server with three tools (`search`, `describe`, `execute`) in front of the tools
 * of every upstream server. A client loads three tool definitions instead of every upstream schema, and the model
 * writes one program that calls the upstream tools in the sandbox.
 */
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { z } from "zod";
import { describeTool } from "../declarations/describe.ts";
import { renderDeclarations, renderToolIndex, renderToolSignature, searchTools } from "../declarations/index.ts";
import { optionKeys, refuseUnknownOptions } from "../options.ts";
import { type CodemodeSandboxBase, DEFAULT_MEMORY_LIMIT_BYTES } from "../sandbox/base.ts";
import { CodemodeSandbox } from "../sandbox/codemode.ts";
import { CodemodeSourceError, parseCodemodeSource, stripTypeScript } from "../source/index.ts";
import type { CodemodeResult } from "../types.ts";
import { DEFAULT_GATEWAY_TIMEOUT_MS, DEFAULT_MAX_OUTPUT_TOKENS } from "./defaults.ts";
import { MCP_TOOL_SEPARATOR } from "./names.ts";
import { formatRunResult, type McpToolResult } from "./output.ts";
import { CONNECT_KEYS, type ConnectMcpServersOptions, type McpTool, McpToolset } from "./toolset.ts";

/**
 * Full declarations up to this many characters (about 2,000 tokens) go into `execute`'s description; a larger catalog
 * gets its compact index there if that fits, else only a count; `describe` gives any tool's declaration on demand.
 * Declarations carry result types, which a plain tool listing leaves out, so past about a dozen tools the index
 * costs the client less (see bench/tokens-gateway.mjs).
 */
export const DEFAULT_INLINE_DECLARATIONS_MAX_CHARS = 8_000;
/** Default and largest number of `search` results. */
export const DEFAULT_SEARCH_LIMIT = 10;
export const MAX_SEARCH_LIMIT = 50;
/** Most tools one `describe` call declares. */
export const MAX_DESCRIBE_NAMES = 50;
/**
 * Longest `search` query and `describe` name, in characters. Both are matched against every tool: without a cap, one
 * call could hold the event loop, and every other session, for seconds.
 */
export const MAX_SEARCH_QUERY_CHARS = 1000;
export const MAX_TOOL_NAME_CHARS = 500;

export interface McpGatewayOptions {
  /** Deadline of one execution in ms; a script's `timeout_ms` can only lower it. Default `DEFAULT_GATEWAY_TIMEOUT_MS`. */
  timeoutMs?: number;
  /** Heap cap of one execution's VM. Default `DEFAULT_MEMORY_LIMIT_BYTES`. */
  memoryLimitBytes?: number;
  /** Cap on the tokens of text one execution returns; a script's `max_output_tokens` can only lower it. */
  maxOutputTokens?: number;
  /**
   * Worker threads of the sandbox the gateway creates. Default 1: a run that waits on tools does not hold its thread,
   * so one thread serves many concurrent runs; only scripts that compute compete for it.
   */
  poolSize?: number;
  /** A sandbox to run in instead of a new worker pool; the upstream tools are registered on it. Not closed by `close()`. */
  sandbox?: CodemodeSandboxBase;
  /** Budget of `execute`'s description for declarations. Default `DEFAULT_INLINE_DECLARATIONS_MAX_CHARS`. */
  inlineDeclarationsMaxChars?: number;
  /** How the gateway introduces itself to clients. Default `{ name: "airlock", version: "0.1.0" }`. */
  serverInfo?: { name: string; version: string };
}

/** What `execute` takes besides the code. */
export interface GatewayExecuteOptions {
  signal?: AbortSignal;
  /** The session's stored values; writes of a successful run are applied to this object. */
  store?: Record<string, unknown>;
}

const GATEWAY_KEYS = optionKeys<McpGatewayOptions>({
  timeoutMs: true,
  memoryLimitBytes: true,
  maxOutputTokens: true,
  poolSize: true,
  sandbox: true,
  inlineDeclarationsMaxChars: true,
  serverInfo: true,
});

/** `options` split into those whose key is in `keys` and the rest. */
function split<T extends object>(options: T, keys: readonly string[]): [Partial<T>, Partial<T>] {
  const chosen: Record<string, unknown> = {};
  const rest: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(options)) (keys.includes(key) ? chosen : rest)[key] = value;
  return [chosen as Partial<T>, rest as Partial<T>];
}

/** The gateway: a toolset, a sandbox holding its tools, and MCP servers made on demand, one per client session. */
export class McpGateway {
  readonly toolset: McpToolset;
  readonly sandbox: CodemodeSandboxBase;
  readonly timeoutMs: number;
  readonly maxOutputTokens: number;
  private readonly ownsSandbox: boolean;
  private readonly ownsToolset: boolean;
  private readonly inlineMaxChars: number;
  private readonly serverInfo: { name: string; version: string };
  private readonly servers = new Set<{ server: McpServer; update: () => void }>();
  private registered: string[] = [];
  private readonly stopListening: () => void;
  private closed = false;

  constructor(toolset: McpToolset, options: McpGatewayOptions = {}, ownsToolset = false) {
    refuseUnknownOptions(options, "McpGateway", GATEWAY_KEYS);
    this.toolset = toolset;
    this.ownsToolset = ownsToolset;
    this.timeoutMs = options.timeoutMs ?? DEFAULT_GATEWAY_TIMEOUT_MS;
    this.maxOutputTokens = options.maxOutputTokens ?? DEFAULT_MAX_OUTPUT_TOKENS;
    if (!Number.isInteger(this.maxOutputTokens) || this.maxOutputTokens < 1) {
      throw new RangeError(`maxOutputTokens must be a positive integer, got ${String(this.maxOutputTokens)}`);
    }
    this.inlineMaxChars = options.inlineDeclarationsMaxChars ?? DEFAULT_INLINE_DECLARATIONS_MAX_CHARS;
    this.serverInfo = options.serverInfo ?? { name: "airlock", version: "0.1.0" };
    this.ownsSandbox = options.sandbox === undefined;
    this.sandbox =
      options.sandbox ??
      new CodemodeSandbox({
        timeoutMs: this.timeoutMs,
        memoryLimitBytes: options.memoryLimitBytes ?? DEFAULT_MEMORY_LIMIT_BYTES,
        poolSize: options.poolSize ?? 1,
      });
    this.registerTools();
    this.stopListening = toolset.onChange(() => {
      this.registerTools();
      for (const entry of this.servers) entry.update();
    });
  }

  /** Connects the servers of `config` (see `McpToolset.connect`) and starts a gateway in front of them. */
  static async start(config: unknown, options: McpGatewayOptions & ConnectMcpServersOptions = {}): Promise<McpGateway> {
    refuseUnknownOptions(options, "startMcpGateway", [...GATEWAY_KEYS, ...CONNECT_KEYS]);
    const [gatewayOptions, connectOptions] = split(options, GATEWAY_KEYS);
    const toolset = await McpToolset.connect(config, connectOptions);
    try {
      return new McpGateway(toolset, gatewayOptions, true);
    } catch (error) {
      await toolset.close();
      throw error;
    }
  }

  /** The upstream tools as the sandbox has them. */
  get tools(): McpTool[] {
    return this.toolset.tools;
  }

  /** `search`: ranked matches with their one-line summaries and signatures, as text. */
  search(query: string, limit = DEFAULT_SEARCH_LIMIT): string {
    if (query.length > MAX_SEARCH_QUERY_CHARS) throw new RangeError(queryTooLong(query));
    const tools = this.tools;
    const results = searchTools(tools, query, { limit: Math.min(Math.max(1, Math.floor(limit)), MAX_SEARCH_LIMIT) });
    if (results.length === 0) {
      return `No tool matches ${JSON.stringify(query)}. ${this.catalogSummary()} Try other words, or fewer.`;
    }
    const byName = new Map(tools.map((tool) => [tool.name, tool]));
    const lines = results.map((result) => {
      const tool = byName.get(result.name) as McpTool;
      const signature = oneLine(renderToolSignature(tool, { descriptions: false, tags: false }));
      const summary = result.summary === "" ? "" : `\n  ${result.summary}`;
      return `tools.${result.identifier}${signature}${summary}`;
    });
    const count = results.length === 1 ? "1 tool matches" : `${results.length} tools match`;
    return `${count} ${JSON.stringify(query)}, best first (describe gives a tool's full declaration):\n\n${lines.join("\n\n")}`;
  }

  /** `describe`: the full TypeScript declarations of the named tools. Throws when none of the names is known. */
  describe(names: readonly string[]): string {
    if (names.length > MAX_DESCRIBE_NAMES) throw new RangeError(tooManyNames(names));
    const long = names.find((name) => name.length > MAX_TOOL_NAME_CHARS);
    if (long !== undefined) throw new RangeError(nameTooLong(long));
    const tools = this.tools;
    const found: McpTool[] = [];
    const problems: string[] = [];
    for (const name of names) {
      const tool = findTool(tools, name);
      if (tool === undefined) {
        try {
          describeTool(tools, name);
        } catch (error) {
          problems.push((error as Error).message);
        }
      } else if (!found.includes(tool)) found.push(tool);
    }
    if (found.length === 0) throw new Error(problems.join("\n"));
    const declarations = renderDeclarations({ tools: found }, { indexThreshold: Number.POSITIVE_INFINITY });
    return problems.length === 0 ? declarations : `${declarations}\n\n// ${problems.join("\n// ")}`;
  }

  /**
   * `execute`: runs a script (its `// @options:` line honoured within the gateway's limits, TypeScript types
   * stripped) and gives its output and value, or its error, as MCP content.
   */
  async execute(code: string, options: GatewayExecuteOptions = {}): Promise<McpToolResult> {
    refuseUnknownOptions(options, "execute", ["signal", "store"]);
    let script: string;
    let timeoutMs = this.timeoutMs;
    let maxOutputTokens = this.maxOutputTokens;
    try {
      const parsed = parseCodemodeSource(code);
      script = stripTypeScript(parsed.code);
      timeoutMs = Math.min(parsed.options.timeoutMs ?? timeoutMs, timeoutMs);
      maxOutputTokens = Math.min(parsed.options.maxOutputTokens ?? maxOutputTokens, maxOutputTokens);
    } catch (error) {
      if (!(error instanceof CodemodeSourceError)) throw error;
      const where =
        error.line === undefined ? "" : `\n    at codemode.js:${error.line}${error.column ? `:${error.column}` : ""}`;
      return {
        content: [{ type: "text", text: `Error (script): ${error.name}: ${error.message}${where}` }],
        isError: true,
      };
    }
    const result: CodemodeResult = await this.sandbox.execute(script, {
      timeoutMs,
      ...(options.signal === undefined ? {} : { signal: options.signal }),
      ...(options.store === undefined ? {} : { store: options.store }),
    });
    if (result.ok && options.store !== undefined) {
      for (const key of result.storeWrites.delete) delete options.store[key];
      for (const [key, value] of Object.entries(result.storeWrites.set)) {
        Object.defineProperty(options.store, key, { value, enumerable: true, writable: true, configurable: true });
      }
    }
    return formatRunResult(result, { maxOutputTokens, maxOutputTokensLimit: this.maxOutputTokens });
  }

  /** The description of `execute`: the script environment's rules and, for small catalogs, the declarations. */
  executeDescription(): string {
    const tools = this.tools;
    const servers = this.toolset.upstreams.map((u) => u.name);
    const limits = `limits here: ${this.timeoutMs} ms, ${this.maxOutputTokens} tokens`;
    const rules = [
      `Run a JavaScript program (TypeScript types allowed) in a sandbox whose only way out is the tools of the MCP servers ${servers.map((s) => JSON.stringify(s)).join(", ") || "(none)"}. Do all the steps in one program: intermediate results stay in the sandbox; only what it prints and returns comes back.`,
      "",
      "The program is the body of an async function (top-level await and return).",
      `- tools.<server>${MCP_TOOL_SEPARATOR}<tool>(args: object) calls a tool; characters other than letters, digits, _ and $ in the names become _ (tool "get-sum" of server "math": tools.math${MCP_TOOL_SEPARATOR}get_sum).`,
      "- A call resolves to the tool's structured result, else its text (JSON-parsed when JSON); several content blocks give an array; images are { type: \"image\", data, mimeType }. Tool errors reject with the server's message. Use Promise.all for independent calls.",
      "- Print with text(value) or console.log(); show an image with image(img); the return value comes last (JSON unless a string).",
      "- store(key, value) / load(key) keep JSON values across executions in this session.",
      "- No fetch, require, import, process, files or timers.",
      `- Optional first line: // @options: {"timeout_ms": 30000, "max_output_tokens": 4000} (${limits}; longer text is cut).`,
      "- Failures return the error kind (script, timeout, aborted, sandbox), message and stack (codemode.js:<line>).",
    ].join("\n");
    return `${rules}\n\n${this.declarationsBlock(tools)}`;
  }

  /** A new MCP server for one client session (stdio, or one Streamable HTTP session). */
  createServer(): McpServer {
    const server = new McpServer(this.serverInfo, {
      capabilities: { tools: { listChanged: true } },
      instructions: `Airlock code-mode gateway. ${this.catalogSummary()} Use execute to run one program that calls them; search finds tools by words, describe gives their TypeScript declarations.`,
    });
    const store: Record<string, unknown> = {};
    const readOnly = this.tools.every((tool) => tool.annotations?.readOnlyHint === true);
    server.registerTool(
      "search",
      {
        title: "Search tools",
        description:
          "Find tools of the connected MCP servers by words, ranked best first. Returns each match as scripts call it (tools.<name>), its signature and a one-line summary. Use describe for a tool's full declaration and execute to call tools.",
        inputSchema: {
          query: z
            .string()
            .max(MAX_SEARCH_QUERY_CHARS, `a query has at most ${MAX_SEARCH_QUERY_CHARS} characters`)
            .describe('Words for what you need, for example "create issue" or "read file"'),
          limit: z
            .number()
            .int()
            .min(1)
            .max(MAX_SEARCH_LIMIT)
            .optional()
            .describe(`Most results to return (default ${DEFAULT_SEARCH_LIMIT})`),
        },
        annotations: { readOnlyHint: true, openWorldHint: false },
      },
      async ({ query, limit }) => {
        try {
          return text(this.search(query, limit));
        } catch (error) {
          return { ...text((error as Error).message), isError: true };
        }
      },
    );
    server.registerTool(
      "describe",
      {
        title: "Describe tools",
        description:
          "The full TypeScript declarations (parameters, result type, documentation) of tools, by their names as scripts call them (tools.<name>).",
        inputSchema: {
          names: z
            .array(z.string().max(MAX_TOOL_NAME_CHARS, `a tool name has at most ${MAX_TOOL_NAME_CHARS} characters`))
            .min(1)
            .max(MAX_DESCRIBE_NAMES, `at most ${MAX_DESCRIBE_NAMES} names at once`)
            .describe('Tool names, for example ["github__create_issue"]'),
        },
        annotations: { readOnlyHint: true, openWorldHint: false },
      },
      async ({ names }) => {
        try {
          return text(this.describe(names));
        } catch (error) {
          return { ...text((error as Error).message), isError: true };
        }
      },
    );
    const execute = server.registerTool(
      "execute",
      {
        title: "Run a program against the tools",
        description: this.executeDescription(),
        inputSchema: {
          code: z.string().describe("The program: the body of an async function, in JavaScript or TypeScript"),
        },
        annotations: { readOnlyHint: readOnly, openWorldHint: true },
      },
      async ({ code }, extra) => this.execute(code, { signal: extra.signal, store }),
    );
    const entry = {
      server,
      update: () => {
        execute.update({ description: this.executeDescription() });
      },
    };
    this.servers.add(entry);
    const previous = server.server.onclose;
    server.server.onclose = () => {
      this.servers.delete(entry);
      previous?.();
    };
    return server;
  }

  /** Closes the sessions, the sandbox (when the gateway created it) and the upstream connections (when it made them). */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.stopListening();
    await Promise.allSettled([...this.servers].map((entry) => entry.server.close()));
    if (this.ownsSandbox) await this.sandbox.close();
    else for (const name of this.registered) this.sandbox.unregisterTool(name);
    if (this.ownsToolset) await this.toolset.close();
  }

  private registerTools(): void {
    for (const name of this.registered) this.sandbox.unregisterTool(name);
    const tools = this.tools;
    for (const tool of tools) this.sandbox.registerTool(tool);
    this.registered = tools.map((tool) => tool.name);
  }

  private catalogSummary(): string {
    const counts = this.toolset.upstreams.map((upstream) => {
      const n = this.tools.filter((tool) => tool.server === upstream.name).length;
      return `${upstream.name} (${n})`;
    });
    return `${this.tools.length} tools of ${counts.length} MCP server${counts.length === 1 ? "" : "s"}: ${counts.join(", ") || "none"}.`;
  }

  private declarationsBlock(tools: McpTool[]): string {
    if (tools.length === 0) return "No tools are available.";
    const full = renderDeclarations({ tools }, { indexThreshold: Number.POSITIVE_INFINITY });
    if (full.length <= this.inlineMaxChars) return `The tools:\n\`\`\`ts\n${full}\n\`\`\``;
    const index = renderToolIndex(tools, {
      hint: "Before calling a tool, get its full declaration (parameters and result type) with the describe tool.",
    });
    if (index.length <= this.inlineMaxChars) return `The tools (an index):\n\`\`\`ts\n${index}\n\`\`\``;
    return `${this.catalogSummary()} Find tools with search and read their declarations with describe before calling them.`;
  }
}

/** Same as `McpGateway.start`. */
export function startMcpGateway(
  config: unknown,
  options: McpGatewayOptions & ConnectMcpServersOptions = {},
): Promise<McpGateway> {
  return McpGateway.start(config, options);
}

/** A tool by its sandbox name, `tools.<name>`, its `<server>__<original tool name>`, or its name in any case. */
function findTool(tools: readonly McpTool[], name: string): McpTool | undefined {
  const wanted = (name.startsWith("tools.") ? name.slice("tools.".length) : name).trim();
  const exact =
    tools.find((tool) => tool.name === wanted) ??
    tools.find((tool) => `${tool.server}${MCP_TOOL_SEPARATOR}${tool.toolName}` === wanted);
  if (exact !== undefined) return exact;
  const loose = tools.filter((tool) => tool.name.toLowerCase() === wanted.toLowerCase());
  return loose.length === 1 ? loose[0] : undefined;
}

function queryTooLong(query: string): string {
  return `The query is ${query.length} characters long; a query has at most ${MAX_SEARCH_QUERY_CHARS}. Use a few words.`;
}

function tooManyNames(names: readonly string[]): string {
  return `${names.length} names were given; describe takes at most ${MAX_DESCRIBE_NAMES} at once.`;
}

function nameTooLong(name: string): string {
  return `A name of ${name.length} characters was given; a tool name has at most ${MAX_TOOL_NAME_CHARS}.`;
}

function text(value: string): McpToolResult {
  return { content: [{ type: "text", text: value }] };
}

function oneLine(signature: string): string {
  return signature.replace(/\s*\n\s*/g, " ");
}
