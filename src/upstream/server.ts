/**
 * One upstream MCP server and the retry policy around it: when a failed request may be sent again, when the server is
 * started again, and how a server that is down is tried again in the background. Opening and closing a connection
 * over each transport is connection.ts's.
 */
import { randomUUID } from "node:crypto";
import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPError } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  type CallToolResult,
  type GetPromptResult,
  McpError,
  type Prompt,
  type ReadResourceResult,
  type Resource,
  type ResourceTemplate,
  type Root,
  type Tool,
} from "@modelcontextprotocol/sdk/types.js";
import { durationOption, optionKeys, refuseUnknownOptions } from "../platform/options.ts";
import { traceMeta } from "../tracing/index.ts";
import { answerCutReason, unansweredReason } from "./answer-streams.ts";
import type { McpServerSpec } from "./config.ts";
import {
  type ClientHooks,
  clientPid,
  closeClient,
  errorText,
  HTTP_PROBE_TIMEOUT_MS,
  isConnectionClosed,
  openClient,
} from "./connection.ts";
import { McpUpstreamError } from "./upstream-errors.ts";
import { MAX_UPSTREAM_LIST_BYTES, MAX_UPSTREAM_LIST_ITEMS, MAX_UPSTREAM_TOOLS } from "./upstream-limits.ts";

export { HTTP_PROBE_TIMEOUT_MS, HTTP_TERMINATE_TIMEOUT_MS, STDIO_EXIT_GRACE_MS } from "./connection.ts";

/** How long starting a server and its MCP handshake may take (an `npx` server may have to be downloaded first). */
export const DEFAULT_CONNECT_TIMEOUT_MS = 60_000;
/** How long one `tools/call` may take when nothing aborts it sooner (a sandbox deadline aborts it). */
export const DEFAULT_CALL_TIMEOUT_MS = 300_000;
/** Pages of a list (`tools/list`, `resources/list`, ...) followed before giving up on a server that never stops paging. */
export const MAX_TOOL_LIST_PAGES = 1000;
/** Characters of a stdio server's stderr kept for error messages. */
export const STDERR_TAIL_CHARS = 4000;
/** Lines of that stderr shown in an error message. */
export const STDERR_TAIL_LINES = 20;
/** First delay before a server that is down is tried again; each failure doubles it, up to `UPSTREAM_RETRY_MAX_MS`. */
export const UPSTREAM_RETRY_INITIAL_MS = 1_000;
/** Longest delay between two attempts to start a server that is down: it is tried again at least this often. */
export const UPSTREAM_RETRY_MAX_MS = 5 * 60_000;

/** A server that is down: it did not start (or could not list its tools), and is tried again in the background. */
export interface McpUpstreamDown {
  /** Why the last attempt failed. */
  error: McpUpstreamError;
  /** When it was found down, in ms since the epoch. */
  since: number;
  /** Failed attempts in a row. */
  attempts: number;
  /** When the next attempt starts, in ms since the epoch. */
  retryAt: number;
}

export interface McpUpstreamOptions {
  /** How Airlock introduces itself to upstream servers. Default `{ name: "airlock", version: "0.1.0" }`. */
  clientInfo?: { name: string; version: string };
  /** Default `DEFAULT_CONNECT_TIMEOUT_MS`. */
  connectTimeoutMs?: number;
  /** Default `DEFAULT_CALL_TIMEOUT_MS`. */
  callTimeoutMs?: number;
  /** First delay before a server that is down is tried again. Default `UPSTREAM_RETRY_INITIAL_MS`. */
  retryInitialMs?: number;
  /** Longest delay between two attempts. Default `UPSTREAM_RETRY_MAX_MS`. */
  retryMaxMs?: number;
  /** Receives what a stdio server writes to stderr, as it arrives. Default: kept for error messages only. */
  onStderr?: (server: string, text: string) => void;
  /** Called when the server's tool list changed (it sent `notifications/tools/list_changed`). */
  onToolsChanged?: (server: string) => void;
  /** Called when the server's resources or prompts changed. */
  onListChanged?: (server: string, list: "resources" | "prompts") => void;
  /** Called each time the server is found down (at the first failure and after each failed retry). */
  onDown?: (server: string, down: McpUpstreamDown) => void;
  /** Called when a server that was down started again. */
  onUp?: (server: string) => void;
  /** The roots to answer the server's `roots/list` with (the gateway's client's). Default none. */
  roots?: () => Root[];
}

export const UPSTREAM_KEYS = optionKeys<McpUpstreamOptions>({
  clientInfo: true,
  connectTimeoutMs: true,
  callTimeoutMs: true,
  retryInitialMs: true,
  retryMaxMs: true,
  onStderr: true,
  onToolsChanged: true,
  onListChanged: true,
  onDown: true,
  onUp: true,
  roots: true,
});

export interface McpCallOptions {
  signal?: AbortSignal;
  /**
   * The call may be sent again when the connection was lost while it ran (its annotations say it is read-only or
   * idempotent). Calls that were never delivered are always sent again after a reconnect.
   */
  repeatable?: boolean;
}

/** The lists a server has, by the name its errors give them. */
type ListName = "tools" | "resources" | "resource templates" | "prompts";

/** A listing under way, and the one asked for since it began. */
interface Listing {
  running: Promise<unknown[]>;
  next?: Promise<unknown[]>;
}

/** Asks for one page of a list. */
type Pager<T> = (
  client: Client,
  params: { cursor?: string },
  options: { timeout: number },
) => Promise<{ items: T[]; next?: string | undefined }>;

/** "unanswered": the server ended or broke the stream of this one answer, and still answers a ping. */
type Failure = "not-sent" | "lost" | "unanswered" | "other";

/** A request to the server: the tool (or method) it is about, for messages, and how to send it on a connection. */
interface Request<T> {
  what: string;
  send(client: Client, signal: AbortSignal | undefined): Promise<T>;
}

/** A connection to one upstream server, reconnected on demand, and retried in the background while it is down. */
export class McpUpstream {
  readonly spec: McpServerSpec;
  private client: Client | undefined;
  private connecting: Promise<Client> | undefined;
  private stderr = "";
  private closed = false;
  /** Why a connection was dropped for breaking the protocol, to say so in its calls' errors. */
  private readonly malformed = new WeakMap<Client, string>();
  private reconnectCount = 0;
  private opened = false;
  private downState: (McpUpstreamDown & { timer: ReturnType<typeof setTimeout> }) | undefined;
  /** Failed attempts before the last retry that started the server, until its tools were listed (`confirmUp`). */
  private attemptsBeforeUp = 0;
  private readonly clientInfo: { name: string; version: string };
  private readonly connectTimeoutMs: number;
  private readonly callTimeoutMs: number;
  private readonly retryInitialMs: number;
  private readonly retryMaxMs: number;
  /** Marks the errors written for answers a server's stream did not carry (see answer-streams.ts). */
  private readonly unansweredMarker = randomUUID();
  /**
   * The listing of each list under way, and the one asked for since it began: every caller asking meanwhile waits
   * for that next one, so that a flood of `list_changed` notifications or of clients' `resources/list` requests
   * holds at most one list of each kind being read.
   */
  private readonly listings = new Map<ListName, Listing>();

  constructor(
    spec: McpServerSpec,
    private readonly options: McpUpstreamOptions = {},
  ) {
    refuseUnknownOptions(options, "McpUpstream", UPSTREAM_KEYS);
    this.spec = spec;
    this.clientInfo = options.clientInfo ?? { name: "airlock", version: "0.1.0" };
    this.connectTimeoutMs = options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
    this.callTimeoutMs = options.callTimeoutMs ?? DEFAULT_CALL_TIMEOUT_MS;
    this.retryInitialMs = durationOption(options.retryInitialMs, "retryInitialMs", false) ?? UPSTREAM_RETRY_INITIAL_MS;
    this.retryMaxMs = durationOption(options.retryMaxMs, "retryMaxMs", false) ?? UPSTREAM_RETRY_MAX_MS;
  }

  /** The server's key in the config. */
  get name(): string {
    return this.spec.name;
  }

  /** True while a connection is open. */
  get connected(): boolean {
    return this.client !== undefined;
  }

  /** The process id of a stdio server while it runs. */
  get pid(): number | null {
    return clientPid(this.client);
  }

  /** How many times the connection was opened again after it was lost. */
  get reconnects(): number {
    return this.reconnectCount;
  }

  /** The last lines the server wrote to stderr. */
  get stderrTail(): string {
    return this.stderr.split("\n").slice(-STDERR_TAIL_LINES).join("\n");
  }

  /** Name and version the server gave in its handshake. */
  get serverVersion(): { name: string; version: string } | undefined {
    return this.client?.getServerVersion();
  }

  /** The capabilities the server gave in its handshake (undefined while it is not connected). */
  get capabilities(): ReturnType<Client["getServerCapabilities"]> {
    return this.client?.getServerCapabilities();
  }

  /** Set while the server is down and tried again in the background. */
  get down(): McpUpstreamDown | undefined {
    if (this.downState === undefined) return undefined;
    const { error, since, attempts, retryAt } = this.downState;
    return { error, since, attempts, retryAt };
  }

  /** Starts or reaches the server and does the MCP handshake. */
  async connect(): Promise<void> {
    await this.ensureClient();
  }

  /** Every tool of the server, following `tools/list` pagination. */
  listTools(): Promise<Tool[]> {
    return this.list("tools", "tools", (client, params, options) =>
      client.listTools(params, options).then((page) => ({ items: page.tools, next: page.nextCursor })),
    );
  }

  /** Every resource of the server (empty when it has none). */
  listResources(): Promise<Resource[]> {
    return this.list("resources", "resources", (client, params, options) =>
      client.listResources(params, options).then((page) => ({ items: page.resources, next: page.nextCursor })),
    );
  }

  /** Every resource template of the server (empty when it has none). */
  listResourceTemplates(): Promise<ResourceTemplate[]> {
    return this.list("resource templates", "resources", (client, params, options) =>
      client
        .listResourceTemplates(params, options)
        .then((page) => ({ items: page.resourceTemplates, next: page.nextCursor })),
    );
  }

  /** Every prompt of the server (empty when it has none). */
  listPrompts(): Promise<Prompt[]> {
    return this.list("prompts", "prompts", (client, params, options) =>
      client.listPrompts(params, options).then((page) => ({ items: page.prompts, next: page.nextCursor })),
    );
  }

  /** Reads one resource (reading has no effects, so a read that was cut off is sent again). */
  readResource(uri: string, options: { signal?: AbortSignal } = {}): Promise<ReadResourceResult> {
    return this.send(
      {
        what: `resources/read of ${uri}`,
        send: (client, signal) =>
          client.readResource({ uri, ...meta() }, { timeout: this.callTimeoutMs, ...withSignal(signal) }),
      },
      { ...options, repeatable: true },
    );
  }

  /** Gets one prompt with its arguments. */
  getPrompt(
    name: string,
    args: Record<string, string> | undefined,
    options: { signal?: AbortSignal } = {},
  ): Promise<GetPromptResult> {
    return this.send(
      {
        what: `prompts/get of ${name}`,
        send: (client, signal) =>
          client.getPrompt(
            { name, ...(args === undefined ? {} : { arguments: args }), ...meta() },
            { timeout: this.callTimeoutMs, ...withSignal(signal) },
          ),
      },
      { ...options, repeatable: true },
    );
  }

  /** Tells the server that the roots changed (it asks for them again), when it is connected. */
  rootsChanged(): void {
    this.client?.sendRootsListChanged().catch(() => {});
  }

  /**
   * Calls a tool and resolves to the server's `CallToolResult` (an `isError` result included). An aborted `signal`
   * cancels the request (`notifications/cancelled`). A server that died is started again once: before the call when
   * it is known to be down, or after the call failed because the connection was lost. While the server is down (it
   * did not start again), calls fail at once.
   */
  callTool(name: string, args: Record<string, unknown>, options: McpCallOptions = {}): Promise<CallToolResult> {
    return this.send(
      {
        what: name,
        send: (client, signal) =>
          client.callTool({ name, arguments: args, ...meta() }, undefined, {
            timeout: this.callTimeoutMs,
            ...withSignal(signal),
          }) as Promise<CallToolResult>,
      },
      options,
    );
  }

  /**
   * Marks the server down after `error` (it did not start, or could not list its tools), drops its connection, and
   * tries it again after a delay that doubles with each failure. The first failure is also the first delay's start.
   */
  fail(error: unknown): void {
    if (this.closed) return;
    const cause =
      error instanceof McpUpstreamError
        ? error
        : new McpUpstreamError(this.name, `server "${this.name}" failed: ${errorText(error)}`, "", {
            cause: error,
            reason: "failed",
          });
    // A server that starts but then fails its listing keeps backing off instead of being retried every second.
    const attempts = (this.downState?.attempts ?? this.attemptsBeforeUp) + 1;
    const delay = Math.min(this.retryInitialMs * 2 ** Math.min(attempts - 1, 30), this.retryMaxMs);
    if (this.downState !== undefined) clearTimeout(this.downState.timer);
    const timer = setTimeout(() => void this.retry(), delay);
    timer.unref();
    const now = Date.now();
    this.downState = { error: cause, since: this.downState?.since ?? now, attempts, retryAt: now + delay, timer };
    if (this.client !== undefined) this.drop(this.client);
    this.options.onDown?.(this.name, this.down as McpUpstreamDown);
  }

  /** Closes the connection (a stdio server is asked to exit, then killed) and stops trying a server that is down. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.downState !== undefined) clearTimeout(this.downState.timer);
    const client = this.client;
    this.client = undefined;
    const pending = this.connecting;
    this.connecting = undefined;
    await Promise.allSettled([client && closeClient(client), pending?.then(closeClient)]);
  }

  private async retry(): Promise<void> {
    if (this.closed || this.downState === undefined) return;
    try {
      await this.establish();
    } catch (error) {
      if (!this.closed) this.fail(error);
      return;
    }
    if (this.downState !== undefined) {
      clearTimeout(this.downState.timer);
      this.attemptsBeforeUp = this.downState.attempts;
    }
    this.downState = undefined;
    if (!this.closed) this.options.onUp?.(this.name);
  }

  /** Says that the server is fully back (its tools were listed): a later failure backs off from the start again. */
  confirmUp(): void {
    this.attemptsBeforeUp = 0;
  }

  /** Sends a request under the retry policy (see `callTool`). */
  private async send<T>(request: Request<T>, options: McpCallOptions): Promise<T> {
    const { signal } = options;
    signal?.throwIfAborted();
    let reconnected = false;
    let client = this.client;
    if (client === undefined) {
      client = await abortable(this.ensureClient(), signal).catch((error: unknown) => {
        throw this.publicError(error);
      });
      reconnected = true;
    }
    try {
      return await request.send(client, signal);
    } catch (error) {
      if (signal?.aborted) throw signal.reason ?? error;
      // Its answer was too long to read: the same call would bring the same answer.
      if (answerCutReason(error, this.unansweredMarker) !== undefined) throw this.callError(request.what, error);
      let failure: Failure = unansweredReason(error, this.unansweredMarker)
        ? (await this.answersPing(client))
          ? "unanswered"
          : "lost"
        : classify(error, client);
      if (failure === "unanswered") return await this.unanswered(client, request, options, error);
      // Some servers (the reference "everything" server among them) answer 400 instead of 404 to a session they no
      // longer know. Only when the session refuses a ping too was the call refused unseen; otherwise 400 is its answer.
      if (error instanceof StreamableHTTPError && error.code === 400 && (await this.sessionGone(client))) {
        failure = "not-sent";
      }
      if (failure === "other" || this.closed) throw this.callError(request.what, error);
      this.drop(client);
      if (reconnected) throw this.lostError(request.what, error, "right after it was started again", client);
      if (failure === "lost" && options.repeatable !== true) {
        throw this.lostError(
          request.what,
          error,
          "while the call ran; the tool may or may not have run, so it was not repeated",
          client,
        );
      }
      const fresh = await abortable(this.ensureClient(), signal).catch((again: unknown) => {
        throw this.publicError(again);
      });
      return await request.send(fresh, signal).catch((again: unknown) => {
        if (signal?.aborted) throw signal.reason ?? again;
        if (classify(again, fresh) === "other") throw this.callError(request.what, again);
        this.drop(fresh);
        throw this.lostError(request.what, again, "again when the call was sent a second time", fresh);
      });
    }
  }

  /** A listing that begins after this call (see `listings`): the one asked for already, or a new one. */
  private list<T>(what: ListName, capability: "tools" | "resources" | "prompts", page: Pager<T>): Promise<T[]> {
    const under = this.listings.get(what);
    if (under?.next !== undefined) return under.next as Promise<T[]>;
    const start = (): Promise<T[]> => {
      const running = this.listAll(capability, what, page);
      const entry: Listing = { running };
      this.listings.set(what, entry);
      const done = () => {
        if (this.listings.get(what) === entry && entry.next === undefined) this.listings.delete(what);
      };
      running.then(done, done);
      return running;
    };
    if (under === undefined) return start();
    under.next = under.running.then(start, start);
    return under.next as Promise<T[]>;
  }

  /**
   * Every item of a list (nothing when the server lacks the capability), its pages followed to the end; a server that
   * never ends or repeats a cursor, or whose list passes `MAX_UPSTREAM_TOOLS` (tools) or `MAX_UPSTREAM_LIST_ITEMS`
   * items, or `MAX_UPSTREAM_LIST_BYTES` of JSON, is refused.
   */
  private async listAll<T>(
    capability: "tools" | "resources" | "prompts",
    what: ListName,
    page: Pager<T>,
  ): Promise<T[]> {
    const client = await this.ensureClient();
    if (client.getServerCapabilities()?.[capability] === undefined) return [];
    const most = what === "tools" ? MAX_UPSTREAM_TOOLS : MAX_UPSTREAM_LIST_ITEMS;
    const items: T[] = [];
    let bytes = 0;
    const cursors = new Set<string>();
    let cursor: string | undefined;
    for (let n = 0; ; n++) {
      if (n >= MAX_TOOL_LIST_PAGES) {
        throw new McpUpstreamError(
          this.name,
          `server "${this.name}" sent more than ${MAX_TOOL_LIST_PAGES} pages of ${what}`,
        );
      }
      let result: { items: T[]; next?: string | undefined };
      try {
        result = await page(client, cursor === undefined ? {} : { cursor }, { timeout: this.connectTimeoutMs });
      } catch (error) {
        throw new McpUpstreamError(
          this.name,
          `server "${this.name}" failed to list its ${what}: ${errorText(error)}`,
          "",
          {
            cause: error,
          },
        );
      }
      bytes += JSON.stringify(result.items).length;
      if (items.length + result.items.length > most || bytes > MAX_UPSTREAM_LIST_BYTES) {
        const cap =
          bytes > MAX_UPSTREAM_LIST_BYTES
            ? `more than ${MAX_UPSTREAM_LIST_BYTES} characters of JSON (MAX_UPSTREAM_LIST_BYTES)`
            : `more than ${most} ${what} (${what === "tools" ? "MAX_UPSTREAM_TOOLS" : "MAX_UPSTREAM_LIST_ITEMS"})`;
        throw new McpUpstreamError(this.name, `server "${this.name}" lists ${cap}`, "", {
          reason: `lists ${cap}`,
        });
      }
      items.push(...result.items);
      cursor = result.next;
      if (cursor === undefined || cursor === "") return items;
      if (cursors.has(cursor)) {
        throw new McpUpstreamError(
          this.name,
          `server "${this.name}" sent the ${what} list cursor ${JSON.stringify(cursor)} twice`,
        );
      }
      cursors.add(cursor);
    }
  }

  /**
   * A call whose answer stream ended without its answer, from a server that is still there: the connection stays (other
   * calls stream on it), and the call is sent again only when it may be.
   */
  private async unanswered<T>(
    client: Client,
    request: Request<T>,
    options: McpCallOptions,
    error: unknown,
  ): Promise<T> {
    const fail = (when: string, cause: unknown) =>
      new McpUpstreamError(
        this.name,
        `server "${this.name}" did not answer the call of ${request.what}${when} (${unansweredReason(cause, this.unansweredMarker)})`,
        "",
        { cause },
      );
    if (options.repeatable !== true || this.closed) {
      throw fail("; the tool may or may not have run, so it was not repeated", error);
    }
    const { signal } = options;
    return await request.send(client, signal).catch((again: unknown) => {
      if (signal?.aborted) throw signal.reason ?? again;
      throw unansweredReason(again, this.unansweredMarker)
        ? fail(" when it was sent a second time", again)
        : this.callError(request.what, again);
    });
  }

  /** True when the server answers a ping in time. */
  private answersPing(client: Client): Promise<boolean> {
    return client.ping({ timeout: HTTP_PROBE_TIMEOUT_MS }).then(
      () => true,
      () => false,
    );
  }

  /** True when the server refuses a ping as coming from a session it does not know (HTTP 400 or 404). */
  private sessionGone(client: Client): Promise<boolean> {
    return client.ping({ timeout: HTTP_PROBE_TIMEOUT_MS }).then(
      () => false,
      (error: unknown) => error instanceof StreamableHTTPError && (error.code === 400 || error.code === 404),
    );
  }

  /**
   * A failed call as the script sees it: an HTTP error status is the server's answer, so it is named, and so is an
   * answer cut off for its length.
   */
  private callError(what: string, error: unknown): unknown {
    const cut = answerCutReason(error, this.unansweredMarker);
    if (cut !== undefined) {
      return new McpUpstreamError(
        this.name,
        `server "${this.name}" answered the call of ${what} with more than the gateway reads: ${cut}; it was cut off there, and the call was not sent again`,
        "",
        { cause: error },
      );
    }
    if (!(error instanceof StreamableHTTPError)) return error;
    const detail = error.message.replace(/^Streamable HTTP error: /, "");
    const status = (error.code ?? -1) > 0 ? `HTTP ${error.code}` : "an error";
    return new McpUpstreamError(
      this.name,
      `server "${this.name}" answered the call of ${what} with ${status}: ${detail}`,
      "",
      { cause: error },
    );
  }

  private lostError(what: string, error: unknown, when: string, client: Client): Error {
    const reason = this.malformed.get(client);
    const lost =
      reason === undefined
        ? `the connection to server "${this.name}" was lost`
        : `server "${this.name}" sent ${reason} and was disconnected`;
    return new McpUpstreamError(
      this.name,
      `${lost} ${when} (calling ${what}: ${errorText(error)})`,
      this.spec.transport === "stdio" ? this.stderrTail : "",
      { cause: error },
    );
  }

  /** The open connection, or a new one; fails at once while the server is down (the background retry owns it). */
  private ensureClient(): Promise<Client> {
    if (this.closed) return Promise.reject(new McpUpstreamError(this.name, `server "${this.name}" is closed`));
    if (this.client !== undefined) return Promise.resolve(this.client);
    // Calls do not wait on a retry under way, which may take as long as a start may.
    if (this.downState !== undefined) return Promise.reject(this.downError());
    return this.establish().catch((error: unknown) => {
      // A start that failed marks the server down; the retry that failed has already done so.
      if (!this.closed && this.downState === undefined) this.fail(error);
      throw error;
    });
  }

  /** Opens a connection, or joins the attempt under way. */
  private establish(): Promise<Client> {
    if (this.client !== undefined) return Promise.resolve(this.client);
    if (this.connecting === undefined) {
      const attempt = this.open().then(
        (client) => {
          if (this.connecting === attempt) this.connecting = undefined;
          if (this.closed) {
            void client.close();
            throw new McpUpstreamError(this.name, `server "${this.name}" is closed`);
          }
          if (this.opened) this.reconnectCount++;
          this.opened = true;
          this.client = client;
          return client;
        },
        (error: unknown) => {
          if (this.connecting === attempt) this.connecting = undefined;
          throw error;
        },
      );
      this.connecting = attempt;
    }
    return this.connecting;
  }

  /**
   * A failure to start the server as the call that needed it fails: the reason in Airlock's words, without the
   * command line, URL or stderr (they can carry secrets of the config); the full error is its `cause`.
   */
  private publicError(error: unknown): unknown {
    if (!(error instanceof McpUpstreamError) || error.reason === "failed" || told.has(error)) return error;
    return new McpUpstreamError(this.name, `server "${this.name}" ${error.reason}`, "", {
      cause: error,
      reason: error.reason,
    });
  }

  private downError(): McpUpstreamError {
    const down = this.downState as McpUpstreamDown;
    const seconds = Math.max(0, Math.ceil((down.retryAt - Date.now()) / 1000));
    // Programs see this: the reason in Airlock's words, not the command line or stderr of the message.
    const error = new McpUpstreamError(
      this.name,
      `server "${this.name}" is down (it ${down.error.reason}); it is tried again in the background, next in ${seconds} s`,
      "",
      { cause: down.error, reason: down.error.reason },
    );
    told.add(error);
    return error;
  }

  private drop(client: Client): void {
    if (this.client === client) this.client = undefined;
    void client.close().catch(() => {});
  }

  private open(): Promise<Client> {
    const hooks: ClientHooks = {
      clientInfo: this.clientInfo,
      connectTimeoutMs: this.connectTimeoutMs,
      unansweredMarker: this.unansweredMarker,
      onStderr: (text) => {
        this.stderr = (this.stderr + text).slice(-STDERR_TAIL_CHARS);
        this.options.onStderr?.(this.name, text);
      },
      onListChanged: (list) => {
        if (list === "tools") this.options.onToolsChanged?.(this.name);
        else this.options.onListChanged?.(this.name, list);
      },
      onMalformed: (client, reason) => {
        this.malformed.set(client, reason);
        this.drop(client);
      },
      onGone: (client) => this.drop(client),
      onClosed: (client) => {
        if (this.client === client) this.client = undefined;
      },
      roots: () => this.options.roots?.() ?? [],
    };
    return openClient(this.spec, hooks, () => (this.spec.transport === "stdio" ? this.stderrTail : ""));
  }
}

/** Errors already written for programs to see (see `publicError`). */
const told = new WeakSet<Error>();

/** What a failed request says about the connection. */
function classify(error: unknown, client: Client): Failure {
  // Rejected because the transport closed while the request was pending: it may have been handled. Any other
  // McpError, -32000 included, is the server's answer.
  if (error instanceof McpError) return isConnectionClosed(error, client) ? "lost" : "other";
  if (error instanceof StreamableHTTPError) {
    // 404: the server no longer knows the session, say it restarted; nothing was handled. Any other status is the
    // server's answer to the call.
    return error.code === 404 ? "not-sent" : "other";
  }
  if (error instanceof Error && error.message === "Not connected") return "not-sent";
  // fetch() fails with a TypeError whose cause says why. Only a connection that was never made proves the request
  // never left; a socket that closed or reset after it was written ("other side closed") may have delivered it.
  if (error instanceof TypeError && error.cause !== undefined) {
    const code = (error.cause as { code?: unknown }).code;
    return typeof code === "string" && NOT_CONNECTED_CODES.has(code) ? "not-sent" : "lost";
  }
  return "other";
}

/** Errors of fetch() that happen before a connection exists: refused, DNS, connect timeout. */
const NOT_CONNECTED_CODES = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "UND_ERR_CONNECT_TIMEOUT"]);

/** The trace context of the caller, as `_meta` of an upstream request, so that the server's spans join the trace. */
function meta(): { _meta?: Record<string, string> } {
  const context = traceMeta();
  return context === undefined ? {} : { _meta: context };
}

function withSignal(signal: AbortSignal | undefined): { signal?: AbortSignal } {
  return signal === undefined ? {} : { signal };
}

function abortable<T>(promise: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (signal === undefined) return promise;
  signal.throwIfAborted();
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener("abort", onAbort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(error);
      },
    );
  });
}
