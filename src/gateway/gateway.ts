/**
 * The code-mode MCP gateway: one MCP server with three tools (`search`, `describe`, `execute`) in front of the tools
 * of every upstream server. A client loads three tool definitions instead of every upstream schema, and the model
 * writes one program that calls the upstream tools in the sandbox. The sessions clients talk to are session.ts's.
 */
import type { Server } from "@modelcontextprotocol/sdk/server/index.js";
import type { ToolAnnotations } from "@modelcontextprotocol/sdk/types.js";
import { describeTool } from "../declarations/describe.ts";
import { renderDeclarations, renderToolSignature, searchTools } from "../declarations/index.ts";
import { booleanOption, integerOption, optionKeys, refuseUnknownOptions } from "../platform/options.ts";
import { type CodemodeSandboxBase, DEFAULT_MEMORY_LIMIT_BYTES } from "../sandbox/base.ts";
import { CodemodeSourceError, parseCodemodeSource } from "../source/index.ts";
import { stripTypeScriptOnThread } from "../source/strip-thread.ts";
import { startTrace, withTraceContext } from "../tracing/index.ts";
import type { CodemodeResult, CodemodeTool } from "../types.ts";
import { ApprovalGate, type ApprovalLimits, MAX_APPROVAL_RECORDS, unsupportedNote } from "../upstream/approval.ts";
import { UpstreamResources } from "../upstream/resources.ts";
import { MCP_TOOL_SEPARATOR } from "../upstream/tool-names.ts";
import { CONNECT_KEYS, type ConnectMcpServersOptions, type McpTool, McpToolset } from "../upstream/toolset.ts";
import {
  DEFAULT_SEARCH_LIMIT,
  MAX_DESCRIBE_NAMES,
  MAX_RESOURCE_URI_CHARS,
  MAX_SEARCH_LIMIT,
  MAX_SEARCH_QUERY_CHARS,
  MAX_TOOL_NAME_CHARS,
} from "../upstream/upstream-limits.ts";
import { CodemodeSandbox } from "../worker/sandbox.ts";
import {
  DEFAULT_APPROVAL_TIMEOUT_MS,
  DEFAULT_GATEWAY_TIMEOUT_MS,
  DEFAULT_MAX_APPROVALS_PER_EXECUTION,
  DEFAULT_MAX_OUTPUT_TOKENS,
} from "./defaults.ts";
import { catalogSummary, DEFAULT_DECLARATIONS_MAX_TOKENS, executeDescription } from "./description.ts";
import { formatRunResult, type McpToolResult } from "./output.ts";
import { createGatewayServer, type GatewayExecuteOptions } from "./session.ts";
import { loadTokenizer } from "./tokens.ts";
import { type GatewayWaitingOptions, refusal, WaitingRuns } from "./waiting.ts";

export interface McpGatewayOptions {
  /** Deadline of one execution in ms; a script's `timeout_ms` can only lower it. Default `DEFAULT_GATEWAY_TIMEOUT_MS`. */
  timeoutMs?: number;
  /** Heap cap of one execution's VM. Default `DEFAULT_MEMORY_LIMIT_BYTES`. */
  memoryLimitBytes?: number;
  /** Cap on the tokens of text one execution returns; a script's `max_output_tokens` can only lower it. */
  maxOutputTokens?: number;
  /**
   * Worker threads of the sandbox the gateway creates. Default: the library's (one per core), so that one client's
   * computing program does not hold up another's.
   */
  poolSize?: number;
  /**
   * A sandbox to run in instead of a new worker pool; the upstream tools are registered on it. Not closed by
   * `close()`. Programs get the `search`, `describe` and `resources` functions only in the gateway's own sandbox.
   */
  sandbox?: CodemodeSandboxBase;
  /**
   * Budget of `execute`'s description for the tools, in tokens (o200k_base): the full declarations when they fit,
   * else one-line signatures, else one line per server. Default `DEFAULT_DECLARATIONS_MAX_TOKENS`.
   */
  declarationsMaxTokens?: number;
  /** How the gateway introduces itself to clients. Default `{ name: "airlock", version: "0.1.0" }`. */
  serverInfo?: { name: string; version: string };
  /**
   * Hand a client's roots to the upstream servers that ask for them (`roots/list`). Default true. The upstream
   * servers are shared by every session, and roots can widen what a server touches (the filesystem server takes
   * them as its allowed directories): `airlock serve --http` forwards them only with `--forward-roots`.
   */
  forwardRoots?: boolean;
  /**
   * Deadline of a person's answer to one approval request, in ms (see upstream/approval.ts); past it the call is refused and
   * not sent. Default `DEFAULT_APPROVAL_TIMEOUT_MS`. The execution's own deadline keeps counting while it waits.
   */
  approvalTimeoutMs?: number;
  /** Most approval requests one execution may ask; calls past it are refused. Default `DEFAULT_MAX_APPROVALS_PER_EXECUTION`. */
  maxApprovalsPerExecution?: number;
  /**
   * A durable store for runs that wait (see waiting.ts): when a client cannot be asked (no elicitation), a call that
   * needs approval makes the run wait for a person (`airlock approve`), and `execute` with `resume` continues it.
   * Without it such calls are refused.
   */
  waiting?: GatewayWaitingOptions;
}

/** What one client session is: who its client is (see `GatewayExecuteOptions.principal`). */
export interface GatewaySessionOptions {
  principal?: string;
}

/** One `search` result as programs get it from `search()`. */
export interface GatewaySearchResult {
  /** As programs call it: `tools.<name>`. */
  name: string;
  server: string;
  signature: string;
  summary: string;
}

const GATEWAY_KEYS = optionKeys<McpGatewayOptions>({
  timeoutMs: true,
  memoryLimitBytes: true,
  maxOutputTokens: true,
  poolSize: true,
  sandbox: true,
  declarationsMaxTokens: true,
  serverInfo: true,
  forwardRoots: true,
  approvalTimeoutMs: true,
  maxApprovalsPerExecution: true,
  waiting: true,
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
  readonly declarationsMaxTokens: number;
  readonly serverInfo: { name: string; version: string };
  readonly forwardRoots: boolean;
  /** Deadline of a person's answer and most requests of one execution, for calls that need approval. */
  readonly approvalLimits: ApprovalLimits;
  /** The upstream servers' resources and prompts, as sessions list and read them. */
  readonly resources: UpstreamResources;
  /** Runs that wait for a person, when the gateway has a store. */
  readonly waiting: WaitingRuns | undefined;
  private readonly ownsSandbox: boolean;
  private readonly ownsToolset: boolean;
  private readonly sessions = new Set<{ server: Server; changed(what: "tools" | "resources" | "prompts"): void }>();
  private registered: string[] = [];
  private readonly stopListening: () => void;
  private described: { key: string; text: string } | undefined;
  /** The description clients were last told of (with tools/list_changed), or that they listed first. */
  private notified = "";
  private closed = false;

  constructor(toolset: McpToolset, options: McpGatewayOptions = {}, ownsToolset = false) {
    refuseUnknownOptions(options, "McpGateway", GATEWAY_KEYS);
    this.toolset = toolset;
    this.ownsToolset = ownsToolset;
    this.timeoutMs = options.timeoutMs ?? DEFAULT_GATEWAY_TIMEOUT_MS;
    this.maxOutputTokens =
      integerOption(options.maxOutputTokens, "maxOutputTokens", 1, Infinity) ?? DEFAULT_MAX_OUTPUT_TOKENS;
    this.declarationsMaxTokens =
      integerOption(options.declarationsMaxTokens, "declarationsMaxTokens", 0, Infinity) ??
      DEFAULT_DECLARATIONS_MAX_TOKENS;
    this.serverInfo = options.serverInfo ?? { name: "airlock", version: "0.1.0" };
    this.forwardRoots = booleanOption(options.forwardRoots, "forwardRoots") ?? true;
    this.approvalLimits = {
      timeoutMs:
        integerOption(options.approvalTimeoutMs, "approvalTimeoutMs", 1, Infinity) ?? DEFAULT_APPROVAL_TIMEOUT_MS,
      maxRequests:
        integerOption(options.maxApprovalsPerExecution, "maxApprovalsPerExecution", 1, Infinity) ??
        DEFAULT_MAX_APPROVALS_PER_EXECUTION,
    };
    // Every request asked is listed in the result.
    if (this.approvalLimits.maxRequests > MAX_APPROVAL_RECORDS) {
      throw new RangeError(
        `maxApprovalsPerExecution must be at most ${MAX_APPROVAL_RECORDS} (MAX_APPROVAL_RECORDS), got ${this.approvalLimits.maxRequests}`,
      );
    }
    this.waiting = options.waiting === undefined ? undefined : new WaitingRuns(options.waiting);
    this.resources = new UpstreamResources(toolset);
    this.ownsSandbox = options.sandbox === undefined;
    this.sandbox =
      options.sandbox ??
      new CodemodeSandbox({
        timeoutMs: this.timeoutMs,
        memoryLimitBytes: options.memoryLimitBytes ?? DEFAULT_MEMORY_LIMIT_BYTES,
        ...(options.poolSize === undefined ? {} : { poolSize: options.poolSize }),
        globals: this.programGlobals(),
      });
    this.registerTools();
    this.stopListening = toolset.onChange((change) => {
      if (change === "tools") this.registerTools();
      // A server's state changes the tool list only through execute's description: each failed retry of a server
      // that stays down leaves it as it was, and clients are not told.
      if (change === "status" && this.executeDescription() === this.notified) return;
      if (change === "tools" || change === "status") this.notified = this.executeDescription();
      const what = change === "status" ? "tools" : change;
      for (const session of this.sessions) session.changed(what);
    });
    this.notified = this.executeDescription();
    // The description's budget is counted in real tokens once the tokenizer is there (bytes until then).
    void loadTokenizer().then(() => {
      this.described = undefined;
    });
  }

  /** Connects the servers of `config` (see `McpToolset.connect`) and starts a gateway in front of them. */
  static async start(config: unknown, options: McpGatewayOptions & ConnectMcpServersOptions = {}): Promise<McpGateway> {
    refuseUnknownOptions(options, "startMcpGateway", [...GATEWAY_KEYS, ...CONNECT_KEYS]);
    const [gatewayOptions, connectOptions] = split(options, GATEWAY_KEYS);
    const [toolset] = await Promise.all([McpToolset.connect(config, connectOptions), loadTokenizer()]);
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

  /** Ranked matches with their signatures and one-line summaries. */
  searchResults(query: string, limit = DEFAULT_SEARCH_LIMIT): GatewaySearchResult[] {
    if (typeof query !== "string") throw new TypeError("search takes a query string");
    if (query.length > MAX_SEARCH_QUERY_CHARS) throw new RangeError(queryTooLong(query));
    if (typeof limit !== "number" || !Number.isFinite(limit)) throw new TypeError("the search limit must be a number");
    const tools = this.tools;
    const byName = new Map(tools.map((tool) => [tool.name, tool]));
    const found = searchTools(tools, query, { limit: Math.min(Math.max(1, Math.floor(limit)), MAX_SEARCH_LIMIT) });
    return found.map((result) => {
      const tool = byName.get(result.name) as McpTool;
      const signature = oneLine(renderToolSignature(tool, { descriptions: false, tags: false }));
      return { name: result.identifier, server: tool.server, signature, summary: result.summary };
    });
  }

  /** `search`: ranked matches with their one-line summaries and signatures, as text; down servers are named. */
  search(query: string, limit = DEFAULT_SEARCH_LIMIT): string {
    const results = this.searchResults(query, limit);
    const down = this.downNote();
    if (results.length === 0) {
      return `No tool matches ${JSON.stringify(query)}. ${catalogSummary(this.toolset)} Try other words, or fewer.${down}`;
    }
    const lines = results.map(
      (result) => `tools.${result.name}${result.signature}${result.summary === "" ? "" : `\n  ${result.summary}`}`,
    );
    const count = results.length === 1 ? "1 tool matches" : `${results.length} tools match`;
    return `${count} ${JSON.stringify(query)}, best first (describe gives a tool's full declaration):\n\n${lines.join("\n\n")}${down}`;
  }

  /** `describe`: the full TypeScript declarations of the named tools. Throws when none of the names is known. */
  describe(names: readonly string[]): string {
    if (!Array.isArray(names) || names.some((name) => typeof name !== "string")) {
      throw new TypeError("describe takes tool names (strings)");
    }
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
   * stripped) and gives its output and value, or its error, as MCP content with `structuredContent`.
   */
  async execute(code: string, options: GatewayExecuteOptions = {}): Promise<McpToolResult> {
    refuseUnknownOptions(options, "execute", [
      "signal",
      "store",
      "onProgress",
      "meta",
      "caller",
      "resume",
      "principal",
    ]);
    if (options.resume !== undefined && this.waiting === undefined) {
      return refusal(
        "INVALID_INPUT",
        "resume continues a run that waited for a person's approval, and this gateway keeps no runs: it has no store (airlock serve --store <file|url>)",
      );
    }
    let script: string;
    let timeoutMs = this.timeoutMs;
    let maxOutputTokens = this.maxOutputTokens;
    try {
      const parsed = parseCodemodeSource(code);
      script = await stripTypeScriptOnThread(parsed.code);
      timeoutMs = Math.min(parsed.options.timeoutMs ?? timeoutMs, timeoutMs);
      maxOutputTokens = Math.min(parsed.options.maxOutputTokens ?? maxOutputTokens, maxOutputTokens);
    } catch (error) {
      if (!(error instanceof CodemodeSourceError)) throw error;
      const where =
        error.line === undefined ? "" : `\n    at codemode.js:${error.line}${error.column ? `:${error.column}` : ""}`;
      const message = `${error.name}: ${error.message}`;
      return {
        content: [{ type: "text", text: `Error (script): ${message}${where}` }],
        structuredContent: {
          ok: false,
          output: "",
          images: 0,
          truncated: false,
          calls: { total: 0, failed: 0, cancelled: 0, byTool: {} },
          error: { kind: "script", name: error.name, message: error.message },
        },
        isError: true,
      };
    }
    // A client that cannot be asked, of a gateway with a store: calls that need approval make the run wait.
    if (
      this.waiting !== undefined &&
      (options.resume !== undefined ||
        (options.caller?.canElicit !== true && this.tools.some((tool) => tool.needsApproval)))
    ) {
      const ended = await this.waiting.run({
        code,
        script,
        timeoutMs,
        values: options.store ?? {},
        sandbox: this.sandbox,
        ...(options.signal === undefined ? {} : { signal: options.signal }),
        ...(options.resume === undefined ? {} : { resume: options.resume }),
        ...(options.principal === undefined ? {} : { principal: options.principal }),
      });
      if ("answer" in ended) return ended.answer;
      return this.answer(ended.result, options, maxOutputTokens, undefined);
    }
    // The run's calls that need approval are asked of the caller's person, one request at a time (see upstream/approval.ts).
    const gate = options.caller === undefined ? undefined : new ApprovalGate(options.caller, this.approvalLimits);
    const run = () =>
      this.sandbox.execute(script, {
        timeoutMs,
        ...(options.signal === undefined ? {} : { signal: options.signal }),
        ...(options.store === undefined ? {} : { store: options.store }),
        ...(options.onProgress === undefined ? {} : { onProgress: options.onProgress }),
        ...(gate === undefined ? {} : { caller: gate }),
      });
    const result: CodemodeResult = await withTraceContext(options.meta, () => {
      // The MCP request's own span; the sandbox's execution span and its tool calls are its children.
      const trace = startTrace(
        "tools/call execute",
        { "mcp.method.name": "tools/call", "gen_ai.tool.name": "execute", "gen_ai.operation.name": "execute_tool" },
        "server",
      );
      if (trace === undefined) return run();
      return trace.within(run).then((done) => {
        trace.end({ ok: done.ok, ...(done.ok ? {} : { error: done.error.kind }) });
        return done;
      });
    });
    return this.answer(result, options, maxOutputTokens, gate);
  }

  /** A finished run's answer: its store writes applied to the session's values, and the approvals it asked. */
  private async answer(
    result: CodemodeResult,
    options: GatewayExecuteOptions,
    maxOutputTokens: number,
    gate: ApprovalGate | undefined,
  ): Promise<McpToolResult> {
    if (result.ok && options.store !== undefined) {
      for (const key of result.storeWrites.delete) delete options.store[key];
      for (const [key, value] of Object.entries(result.storeWrites.set)) {
        Object.defineProperty(options.store, key, { value, enumerable: true, writable: true, configurable: true });
      }
    }
    const answer = await formatRunResult(result, { maxOutputTokens, maxOutputTokensLimit: this.maxOutputTokens });
    if (gate === undefined || !gate.used) return answer;
    // What was asked, and what the person answered, whether or not the program reported it.
    if (answer.structuredContent !== undefined) {
      answer.structuredContent.approvals = [...gate.approvals];
      if (gate.notListed > 0) answer.structuredContent.approvalsNotListed = gate.notListed;
    }
    const unsupported = gate.unsupported;
    if (unsupported.length > 0) answer.content.push({ type: "text", text: unsupportedNote(unsupported) });
    return answer;
  }

  /** The description of `execute`: the program's rules and the tools, in the form that fits the token budget. */
  executeDescription(): string {
    const tools = this.tools;
    const key = JSON.stringify([tools.map((tool) => tool.name), this.toolset.status()]);
    if (this.described?.key !== key) {
      const text = executeDescription({
        toolset: this.toolset,
        tools,
        timeoutMs: this.timeoutMs,
        maxOutputTokens: this.maxOutputTokens,
        maxTokens: this.declarationsMaxTokens,
        programFunctions: this.ownsSandbox,
        waiting: this.waiting !== undefined,
      });
      this.described = { key, text };
    }
    return this.described.text;
  }

  /**
   * `execute`'s annotations, from the tools it can reach: read-only (and not destructive) only when every tool says
   * it is read-only; idempotent when every tool is read-only or idempotent; open-world unless every tool says not.
   */
  executeAnnotations(): ToolAnnotations {
    const tools = this.tools;
    const readOnly = tools.every((tool) => tool.annotations?.readOnlyHint === true);
    const destructive = tools.some(
      (tool) => tool.annotations?.readOnlyHint !== true && tool.annotations?.destructiveHint !== false,
    );
    const idempotent = tools.every(
      (tool) => tool.annotations?.readOnlyHint === true || tool.annotations?.idempotentHint === true,
    );
    const openWorld = tools.some((tool) => tool.annotations?.openWorldHint !== false);
    return {
      title: "Run a program against the tools",
      readOnlyHint: readOnly,
      destructiveHint: !readOnly && destructive,
      idempotentHint: idempotent,
      openWorldHint: openWorld,
    };
  }

  /** The instructions sessions give at initialize. */
  instructions(): string {
    return `Airlock code-mode gateway. ${catalogSummary(this.toolset)} Use execute to run one program that calls them; search finds tools by words, describe gives their TypeScript declarations.`;
  }

  /** A new MCP server for one client session (stdio, or one Streamable HTTP session). */
  createServer(options: GatewaySessionOptions = {}): Server {
    refuseUnknownOptions(options, "createServer", ["principal"]);
    if (options.principal !== undefined && typeof options.principal !== "string") {
      throw new TypeError("principal must be a string");
    }
    const session = createGatewayServer(this, options.principal);
    this.sessions.add(session);
    const previous = session.server.onclose;
    session.server.onclose = () => {
      this.sessions.delete(session);
      previous?.();
    };
    return session.server;
  }

  /** Open client sessions. */
  get sessionCount(): number {
    return this.sessions.size;
  }

  /** Closes the sessions, the sandbox (when the gateway created it) and the upstream connections (when it made them). */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.stopListening();
    await Promise.allSettled([...this.sessions].map((session) => session.server.close()));
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

  /** Servers that are down, for the end of a search answer. */
  private downNote(): string {
    const down = this.toolset.down;
    if (down.length === 0) return "";
    const lines = down.map((status) => `- ${status.server}: ${status.down?.error.reason ?? "down"}`);
    return `\n\nServers down now (their tools are missing; tried again in the background):\n${lines.join("\n")}`;
  }

  /** The functions programs call besides tools: search and describe, and the upstream servers' resources. */
  private programGlobals(): CodemodeTool[] {
    return [
      {
        name: "search",
        spread: true,
        description: "Finds tools by words, best first (what the search tool returns, as data)",
        signature:
          "(query: string, limit?: number): Promise<{ name: string; server: string; signature: string; summary: string }[]>",
        execute: (args) => {
          const [query, limit] = args as [unknown, unknown];
          return this.searchResults(query as string, limit === undefined ? DEFAULT_SEARCH_LIMIT : (limit as number));
        },
      },
      {
        name: "describe",
        description: "The full TypeScript declaration of one tool, by its name as programs call it",
        signature: "(name: string): Promise<string>",
        execute: (name) => this.describe([name as string]),
      },
      {
        name: "resources.list",
        description: "The resources of the upstream servers (or of one server)",
        signature: "(server?: string): Promise<{ server: string; uri: string; name: string; mimeType?: string }[]>",
        execute: async (server) => {
          if (server !== undefined && typeof server !== "string")
            throw new TypeError("resources.list takes a server name");
          const listed = await this.resources.listResources();
          return listed
            .map((resource) => ({
              server: String(resource._meta?.["dev.airlock/server"] ?? ""),
              uri: resource.uri,
              name: resource.name.slice(
                String(resource._meta?.["dev.airlock/server"] ?? "").length + MCP_TOOL_SEPARATOR.length,
              ),
              ...(resource.mimeType === undefined ? {} : { mimeType: resource.mimeType }),
            }))
            .filter((resource) => server === undefined || resource.server === server);
        },
      },
      {
        name: "resources.read",
        spread: true,
        description: "Reads one resource of an upstream server: its contents, each with text or a base64 blob",
        signature:
          "(server: string, uri: string): Promise<{ uri: string; mimeType?: string; text?: string; blob?: string }[]>",
        execute: async (args) => {
          const [server, uri] = args as [unknown, unknown];
          if (typeof server !== "string" || typeof uri !== "string") {
            throw new TypeError("resources.read takes a server name and a URI");
          }
          if (server.length > MAX_TOOL_NAME_CHARS || uri.length > MAX_RESOURCE_URI_CHARS) {
            throw new RangeError(`a URI has at most ${MAX_RESOURCE_URI_CHARS} characters`);
          }
          const read = await this.resources.readResource(uri, { server });
          return read.contents;
        },
      },
    ];
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

export function queryTooLong(query: string): string {
  return `The query is ${query.length} characters long; a query has at most ${MAX_SEARCH_QUERY_CHARS}. Use a few words.`;
}

function tooManyNames(names: readonly string[]): string {
  return `${names.length} names were given; describe takes at most ${MAX_DESCRIBE_NAMES} at once.`;
}

function nameTooLong(name: string): string {
  return `A name of ${name.length} characters was given; a tool name has at most ${MAX_TOOL_NAME_CHARS}.`;
}

function oneLine(signature: string): string {
  return signature.replace(/\s*\n\s*/g, " ");
}
