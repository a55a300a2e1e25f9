/**
 * One client session of the gateway: an MCP server (the SDK's low-level `Server`) with the three tools, the upstream
 * servers' resources and prompts, logging and progress, the client's roots forwarded upstream, and the session's own
 * store. An unknown tool is a JSON-RPC error (-32602), as the specification counts it; bad arguments to a known tool
 * are a tool error the model can read.
 */
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import {
  CallToolRequestSchema,
  type CallToolResult,
  ErrorCode,
  GetPromptRequestSchema,
  ListPromptsRequestSchema,
  ListResourcesRequestSchema,
  ListResourceTemplatesRequestSchema,
  ListToolsRequestSchema,
  type LoggingLevel,
  LoggingLevelSchema,
  McpError,
  type ProgressToken,
  ReadResourceRequestSchema,
  type Root,
  RootsListChangedNotificationSchema,
  type ServerNotification,
  SetLevelRequestSchema,
  type Tool,
  type ToolAnnotations,
} from "@modelcontextprotocol/sdk/types.js";
import type { CodemodeProgressEvent } from "../types.ts";
import { type ApprovalAsker, sessionAsker } from "../upstream/approval.ts";
import type { UpstreamResources } from "../upstream/resources.ts";
import {
  DEFAULT_SEARCH_LIMIT,
  MAX_DESCRIBE_NAMES,
  MAX_SEARCH_LIMIT,
  MAX_SEARCH_QUERY_CHARS,
  MAX_TOOL_NAME_CHARS,
} from "../upstream/upstream-limits.ts";
import { EXECUTE_OUTPUT_SCHEMA, type McpToolResult } from "./output.ts";
import { resumeProblem } from "./waiting.ts";

/** Least time between two progress notifications of one run, however fast its calls and output come. */
export const PROGRESS_MIN_INTERVAL_MS = 250;
/** A run that reports nothing for this long sends a progress notification anyway (a slow tool call). */
export const PROGRESS_HEARTBEAT_MS = 5_000;
/** Most console lines of one run sent as log messages; the rest are only in the result. */
export const MAX_LOG_MESSAGES_PER_RUN = 1_000;
/**
 * Most characters of console lines one run sends as log messages; the rest are only in the result. A client that
 * does not read its response stream makes the gateway hold what is written to it, up to this (a program may print
 * `MAX_OUTPUT_CHARS`, 16 MiB).
 */
export const MAX_LOG_CHARS_PER_RUN = 256 * 1024;

/** What `execute` takes besides the code. */
export interface GatewayExecuteOptions {
  signal?: AbortSignal;
  /** The session's stored values; writes of a successful run are applied to this object. */
  store?: Record<string, unknown>;
  /** What the run does while it runs (output items, tool calls), as the sandbox reports it. */
  onProgress?: (event: CodemodeProgressEvent) => void;
  /** The request's `_meta`: its `traceparent` (and `tracestate`) make the run's spans part of the caller's trace. */
  meta?: Record<string, unknown>;
  /**
   * The client session that asked for the run: calls of tools that need approval are asked of its person (MCP
   * elicitation). Without it such calls are refused (`GUARD_BLOCKED`).
   */
  caller?: ApprovalAsker;
  /** The id of a run that waited: continues it (the same code), with the gateway's `waiting` store. */
  resume?: string;
  /**
   * Who the client is (over HTTP, the principal its token names): a run that waits belongs to it, and only the same
   * principal can resume it. Without it, runs belong to the gateway's scope alone.
   */
  principal?: string;
}

/**
 * The gateway as one client's session sees it: what it serves, and the three tools it answers with. McpGateway
 * (gateway.ts) is the one there is; a session knows it by these members alone.
 */
export interface SessionGateway {
  readonly serverInfo: { name: string; version: string };
  readonly forwardRoots: boolean;
  readonly toolset: { setRoots(roots: readonly Root[]): void };
  readonly resources: UpstreamResources;
  instructions(): string;
  search(query: string, limit: number): string;
  describe(names: readonly string[]): string;
  execute(code: string, options: GatewayExecuteOptions): Promise<McpToolResult>;
  executeDescription(): string;
  executeAnnotations(): ToolAnnotations;
}

/** The tools' names, for the error of an unknown one. */
const TOOL_NAMES = ["search", "describe", "execute"];

/** What the gateway keeps of one session. */
export interface GatewaySession {
  server: Server;
  /** Tells the client that a list changed. */
  changed(what: "tools" | "resources" | "prompts"): void;
}

type Notify = (notification: ServerNotification) => Promise<void>;

export function createGatewayServer(gateway: SessionGateway, principal?: string): GatewaySession {
  const server = new Server(gateway.serverInfo, {
    capabilities: {
      tools: { listChanged: true },
      resources: { listChanged: true },
      prompts: { listChanged: true },
      logging: {},
    },
    instructions: gateway.instructions(),
  });
  const store: Record<string, unknown> = {};
  // Console output goes out as log messages only once the client asked for them with logging/setLevel.
  let logLevel: LoggingLevel | undefined;

  server.setRequestHandler(SetLevelRequestSchema, (request) => {
    const parsed = LoggingLevelSchema.safeParse(request.params.level);
    if (!parsed.success)
      throw new McpError(ErrorCode.InvalidParams, `Unknown logging level ${JSON.stringify(request.params.level)}`);
    logLevel = parsed.data;
    return {};
  });

  server.setRequestHandler(ListToolsRequestSchema, () => ({ tools: toolList(gateway) }));

  server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    const { name, arguments: args = {} } = request.params;
    switch (name) {
      case "search": {
        const problem = checkSearch(args);
        if (problem !== undefined) return toolError(`Invalid arguments for search: ${problem}`);
        const { query, limit } = args as { query: string; limit?: number };
        return attempt(() => gateway.search(query, limit ?? DEFAULT_SEARCH_LIMIT));
      }
      case "describe": {
        const problem = checkDescribe(args);
        if (problem !== undefined) return toolError(`Invalid arguments for describe: ${problem}`);
        return attempt(() => gateway.describe((args as { names: string[] }).names));
      }
      case "execute": {
        if (typeof args.code !== "string") return toolError('Invalid arguments for execute: "code" must be a string');
        const problem = args.resume === undefined ? undefined : resumeProblem(args.resume);
        if (problem !== undefined) return toolError(`Invalid arguments for execute: ${problem}`);
        const meta = request.params._meta as Record<string, unknown> | undefined;
        const reporter = new RunReporter(extra.sendNotification as Notify, meta?.progressToken as ProgressToken, () =>
          logLevel === undefined ? false : severity(logLevel) <= severity("info"),
        );
        try {
          return (await gateway.execute(args.code, {
            signal: extra.signal,
            store,
            ...(reporter.listening ? { onProgress: (event: CodemodeProgressEvent) => reporter.on(event) } : {}),
            ...(meta === undefined ? {} : { meta }),
            caller: sessionAsker(server, extra.requestId),
            ...(args.resume === undefined ? {} : { resume: args.resume as string }),
            ...(principal === undefined ? {} : { principal }),
          })) as CallToolResult;
        } finally {
          reporter.end();
        }
      }
      default:
        throw new McpError(
          ErrorCode.InvalidParams,
          `Unknown tool ${JSON.stringify(name)}: this server has the tools ${TOOL_NAMES.join(", ")}`,
        );
    }
  });

  server.setRequestHandler(ListResourcesRequestSchema, async () => ({
    resources: await gateway.resources.listResources(),
  }));
  server.setRequestHandler(ListResourceTemplatesRequestSchema, async () => ({
    resourceTemplates: await gateway.resources.listResourceTemplates(),
  }));
  server.setRequestHandler(ReadResourceRequestSchema, (request, extra) =>
    gateway.resources.readResource(request.params.uri, { signal: extra.signal }),
  );
  server.setRequestHandler(ListPromptsRequestSchema, async () => ({ prompts: await gateway.resources.listPrompts() }));
  server.setRequestHandler(GetPromptRequestSchema, (request, extra) =>
    gateway.resources.getPrompt(request.params.name, request.params.arguments, extra.signal),
  );

  // The client's roots go to the upstream servers that ask for them (over HTTP, the latest client's that has roots).
  const fetchRoots = () => {
    if (!gateway.forwardRoots || server.getClientCapabilities()?.roots === undefined) return;
    server.listRoots().then(
      (result) => gateway.toolset.setRoots(result.roots),
      () => {},
    );
  };
  server.oninitialized = fetchRoots;
  server.setNotificationHandler(RootsListChangedNotificationSchema, fetchRoots);

  const changed = (what: "tools" | "resources" | "prompts") => {
    if (server.transport === undefined) return;
    const sent =
      what === "tools"
        ? server.sendToolListChanged()
        : what === "resources"
          ? server.sendResourceListChanged()
          : server.sendPromptListChanged();
    sent.catch(() => {});
  };
  return { server, changed };
}

function toolList(gateway: SessionGateway): Tool[] {
  return [
    {
      name: "search",
      title: "Search tools",
      description:
        "Find tools of the connected MCP servers by words, ranked best first. Returns each match as scripts call it (tools.<name>), its signature and a one-line summary. Use describe for a tool's full declaration and execute to call tools.",
      inputSchema: {
        type: "object",
        properties: {
          query: {
            type: "string",
            maxLength: MAX_SEARCH_QUERY_CHARS,
            description: 'Words for what you need, for example "create issue" or "read file"',
          },
          limit: {
            type: "integer",
            minimum: 1,
            maximum: MAX_SEARCH_LIMIT,
            description: `Most results to return (default ${DEFAULT_SEARCH_LIMIT})`,
          },
        },
        required: ["query"],
      },
      annotations: { title: "Search tools", readOnlyHint: true, openWorldHint: false },
    },
    {
      name: "describe",
      title: "Describe tools",
      description:
        "The full TypeScript declarations (parameters, result type, documentation) of tools, by their names as scripts call them (tools.<name>).",
      inputSchema: {
        type: "object",
        properties: {
          names: {
            type: "array",
            items: { type: "string", maxLength: MAX_TOOL_NAME_CHARS },
            minItems: 1,
            maxItems: MAX_DESCRIBE_NAMES,
            description: 'Tool names, for example ["github__create_issue"]',
          },
        },
        required: ["names"],
      },
      annotations: { title: "Describe tools", readOnlyHint: true, openWorldHint: false },
    },
    {
      name: "execute",
      title: "Run a program against the tools",
      description: gateway.executeDescription(),
      inputSchema: {
        type: "object",
        properties: {
          code: {
            type: "string",
            description: "The program: the body of an async function, in JavaScript or TypeScript",
          },
          resume: {
            type: "string",
            description:
              "The id of a run that execute said waits for a person's approval: continues it once the person decided. Send exactly the same code; the calls it already made are not sent again.",
          },
        },
        required: ["code"],
      },
      outputSchema: EXECUTE_OUTPUT_SCHEMA as unknown as Tool["outputSchema"],
      annotations: gateway.executeAnnotations(),
    },
  ];
}

function checkSearch(args: Record<string, unknown>): string | undefined {
  const { query, limit } = args;
  if (typeof query !== "string") return '"query" must be a string';
  if (query.length > MAX_SEARCH_QUERY_CHARS) {
    return `"query" has ${query.length} characters; a query has at most ${MAX_SEARCH_QUERY_CHARS} characters`;
  }
  if (
    limit !== undefined &&
    (!Number.isInteger(limit) || (limit as number) < 1 || (limit as number) > MAX_SEARCH_LIMIT)
  ) {
    return `"limit" must be an integer from 1 to ${MAX_SEARCH_LIMIT}`;
  }
  return undefined;
}

function checkDescribe(args: Record<string, unknown>): string | undefined {
  const { names } = args;
  if (!Array.isArray(names) || names.some((name) => typeof name !== "string"))
    return '"names" must be an array of strings';
  if (names.length === 0) return '"names" must name at least one tool';
  if (names.length > MAX_DESCRIBE_NAMES) return `at most ${MAX_DESCRIBE_NAMES} names at once`;
  const long = (names as string[]).find((name) => name.length > MAX_TOOL_NAME_CHARS);
  if (long !== undefined)
    return `a name has ${long.length} characters; a tool name has at most ${MAX_TOOL_NAME_CHARS} characters`;
  return undefined;
}

function attempt(run: () => string): McpToolResult {
  try {
    return { content: [{ type: "text", text: run() }] };
  } catch (error) {
    return toolError((error as Error).message);
  }
}

function toolError(message: string): McpToolResult {
  return { content: [{ type: "text", text: message }], isError: true };
}

const LEVELS = LoggingLevelSchema.options;

function severity(level: LoggingLevel): number {
  return LEVELS.indexOf(level);
}

/**
 * Reports one run while it runs, on the request's own stream: progress notifications (when the request carried a
 * progress token), at most one per `PROGRESS_MIN_INTERVAL_MS` and at least one per `PROGRESS_HEARTBEAT_MS`; and its
 * console lines as log messages (when the client asked for info-level logs), up to `MAX_LOG_MESSAGES_PER_RUN` lines
 * and `MAX_LOG_CHARS_PER_RUN` characters.
 */
class RunReporter {
  private progress = 0;
  private calls = 0;
  private done = 0;
  private lines = 0;
  private logged = 0;
  private loggedChars = 0;
  private lastSent = 0;
  private pending: ReturnType<typeof setTimeout> | undefined;
  private readonly heartbeat: ReturnType<typeof setInterval> | undefined;
  private readonly started = performance.now();
  private ended = false;

  constructor(
    private readonly notify: Notify,
    private readonly token: ProgressToken | undefined,
    private readonly logging: () => boolean,
  ) {
    if (token !== undefined) {
      this.heartbeat = setInterval(() => {
        if (performance.now() - this.lastSent >= PROGRESS_HEARTBEAT_MS) this.sendProgress();
      }, PROGRESS_HEARTBEAT_MS);
      this.heartbeat.unref();
    }
  }

  /** Whether anything listens: a progress token, or a client that takes log messages. */
  get listening(): boolean {
    return this.token !== undefined || this.logging();
  }

  on(event: CodemodeProgressEvent): void {
    if (this.ended) return;
    if (event.type === "call") this.calls++;
    else if (event.type === "result") this.done++;
    else if (event.item.type === "text") {
      this.lines++;
      if (event.item.console === true && this.logging() && this.logged < MAX_LOG_MESSAGES_PER_RUN) {
        this.logged++;
        this.loggedChars += event.item.text.length;
        const last = this.logged === MAX_LOG_MESSAGES_PER_RUN || this.loggedChars > MAX_LOG_CHARS_PER_RUN;
        if (last) this.logged = MAX_LOG_MESSAGES_PER_RUN;
        const line =
          this.loggedChars > MAX_LOG_CHARS_PER_RUN
            ? event.item.text.slice(0, Math.max(0, MAX_LOG_CHARS_PER_RUN - (this.loggedChars - event.item.text.length)))
            : event.item.text;
        const data = last ? `${line}\n(further console output is only in the result)` : line;
        this.notify({ method: "notifications/message", params: { level: "info", logger: "console", data } }).catch(
          () => {},
        );
      }
    }
    if (this.token === undefined) return;
    const wait = PROGRESS_MIN_INTERVAL_MS - (performance.now() - this.lastSent);
    if (wait <= 0) this.sendProgress();
    else this.pending ??= setTimeout(() => this.sendProgress(), wait);
  }

  end(): void {
    this.ended = true;
    clearInterval(this.heartbeat);
    clearTimeout(this.pending);
  }

  private sendProgress(): void {
    this.pending = undefined;
    if (this.ended || this.token === undefined) return;
    this.lastSent = performance.now();
    const seconds = ((this.lastSent - this.started) / 1000).toFixed(1);
    const message = `running for ${seconds} s: ${this.calls} tool call${this.calls === 1 ? "" : "s"} (${this.done} answered), ${this.lines} line${this.lines === 1 ? "" : "s"} printed`;
    this.progress++;
    this.notify({
      method: "notifications/progress",
      params: { progressToken: this.token, progress: this.progress, message },
    }).catch(() => {});
  }
}
