/**
 * One upstream MCP server: starting it (stdio) or reaching it (Streamable HTTP) with the official SDK's `Client`,
 * listing its tools page by page, calling them with cancellation, and reconnecting once when it died.
 */
import { randomUUID } from "node:crypto";
import { statSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport, StreamableHTTPError } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js";
import { type CallToolResult, ErrorCode, McpError, type Tool } from "@modelcontextprotocol/sdk/types.js";
import { optionKeys, refuseUnknownOptions } from "../options.ts";
import { unansweredReason, watchAnswerStreams } from "./answer-streams.ts";
import type { McpServerSpec } from "./config.ts";
import { McpUpstreamError } from "./errors.ts";

/** How long starting a server and its MCP handshake may take (an `npx` server may have to be downloaded first). */
export const DEFAULT_CONNECT_TIMEOUT_MS = 60_000;
/** How long one `tools/call` may take when nothing aborts it sooner (a sandbox deadline aborts it). */
export const DEFAULT_CALL_TIMEOUT_MS = 300_000;
/** Pages of `tools/list` followed before giving up on a server that never stops paging. */
export const MAX_TOOL_LIST_PAGES = 1000;
/** Characters of a stdio server's stderr kept for error messages. */
export const STDERR_TAIL_CHARS = 4000;
/** How long a stdio server has to exit by itself after its stdin was closed, before it gets SIGTERM. */
export const STDIO_EXIT_GRACE_MS = 300;
/** How long closing waits for an HTTP server to confirm the end of its session. */
export const HTTP_TERMINATE_TIMEOUT_MS = 1000;
/** How long an HTTP server has to answer a ping after one of its response streams broke. */
export const HTTP_PROBE_TIMEOUT_MS = 5000;
/** Lines of that stderr shown in an error message. */
export const STDERR_TAIL_LINES = 20;

export interface McpUpstreamOptions {
  /** How Airlock introduces itself to upstream servers. Default `{ name: "airlock", version: "0.1.0" }`. */
  clientInfo?: { name: string; version: string };
  /** Default `DEFAULT_CONNECT_TIMEOUT_MS`. */
  connectTimeoutMs?: number;
  /** Default `DEFAULT_CALL_TIMEOUT_MS`. */
  callTimeoutMs?: number;
  /** Receives what a stdio server writes to stderr, as it arrives. Default: kept for error messages only. */
  onStderr?: (server: string, text: string) => void;
  /** Called when the server's tool list changed (it sent `notifications/tools/list_changed`). */
  onToolsChanged?: (server: string) => void;
}

export const UPSTREAM_KEYS = optionKeys<McpUpstreamOptions>({
  clientInfo: true,
  connectTimeoutMs: true,
  callTimeoutMs: true,
  onStderr: true,
  onToolsChanged: true,
});

export interface McpCallOptions {
  signal?: AbortSignal;
  /**
   * The call may be sent again when the connection was lost while it ran (its annotations say it is read-only or
   * idempotent). Calls that were never delivered are always sent again after a reconnect.
   */
  repeatable?: boolean;
}

/** "unanswered": the server ended or broke the stream of this one answer, and still answers a ping. */
type Failure = "not-sent" | "lost" | "unanswered" | "other";

/** Clients whose transport closed. A server may send code -32000 (ConnectionClosed) itself: the generic server error. */
const closedClients = new WeakSet<Client>();

/** A connection to one upstream server, reconnected on demand. */
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
  private readonly clientInfo: { name: string; version: string };
  private readonly connectTimeoutMs: number;
  private readonly callTimeoutMs: number;
  /** Marks the errors written for answers a server's stream did not carry (see answer-streams.ts). */
  private readonly unansweredMarker = randomUUID();

  constructor(
    spec: McpServerSpec,
    private readonly options: McpUpstreamOptions = {},
  ) {
    refuseUnknownOptions(options, "McpUpstream", UPSTREAM_KEYS);
    this.spec = spec;
    this.clientInfo = options.clientInfo ?? { name: "airlock", version: "0.1.0" };
    this.connectTimeoutMs = options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
    this.callTimeoutMs = options.callTimeoutMs ?? DEFAULT_CALL_TIMEOUT_MS;
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
    const transport = this.client?.transport;
    return transport instanceof StdioClientTransport ? transport.pid : null;
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

  /** Starts or reaches the server and does the MCP handshake. */
  async connect(): Promise<void> {
    await this.ensureClient();
  }

  /** Every tool of the server, following `tools/list` pagination. */
  async listTools(): Promise<Tool[]> {
    const client = await this.ensureClient();
    if (client.getServerCapabilities()?.tools === undefined) return [];
    const tools: Tool[] = [];
    const cursors = new Set<string>();
    let cursor: string | undefined;
    for (let page = 0; ; page++) {
      if (page >= MAX_TOOL_LIST_PAGES) {
        throw new McpUpstreamError(
          this.name,
          `server "${this.name}" sent more than ${MAX_TOOL_LIST_PAGES} pages of tools`,
        );
      }
      let result: Awaited<ReturnType<Client["listTools"]>>;
      try {
        result = await client.listTools(cursor === undefined ? {} : { cursor }, { timeout: this.connectTimeoutMs });
      } catch (error) {
        throw new McpUpstreamError(this.name, `server "${this.name}" failed to list its tools: ${message(error)}`, "", {
          cause: error,
        });
      }
      tools.push(...result.tools);
      cursor = result.nextCursor;
      if (cursor === undefined || cursor === "") return tools;
      if (cursors.has(cursor)) {
        throw new McpUpstreamError(
          this.name,
          `server "${this.name}" sent the tools/list cursor ${JSON.stringify(cursor)} twice`,
        );
      }
      cursors.add(cursor);
    }
  }

  /**
   * Calls a tool and resolves to the server's `CallToolResult` (an `isError` result included). An aborted `signal`
   * cancels the request (`notifications/cancelled`). A server that died is started again once: before the call when
   * it is known to be down, or after the call failed because the connection was lost.
   */
  async callTool(name: string, args: Record<string, unknown>, options: McpCallOptions = {}): Promise<CallToolResult> {
    const { signal } = options;
    signal?.throwIfAborted();
    let reconnected = false;
    let client = this.client;
    if (client === undefined) {
      client = await this.reconnect(signal);
      reconnected = true;
    }
    try {
      return await this.request(client, name, args, signal);
    } catch (error) {
      if (signal?.aborted) throw signal.reason ?? error;
      let failure = unansweredReason(error, this.unansweredMarker)
        ? (await this.answersPing(client))
          ? "unanswered"
          : "lost"
        : classify(error, client);
      if (failure === "unanswered") return await this.unanswered(client, name, args, options, error);
      // Some servers (the reference "everything" server among them) answer 400 instead of 404 to a session they no
      // longer know. Only when the session refuses a ping too was the call refused unseen; otherwise 400 is its answer.
      if (error instanceof StreamableHTTPError && error.code === 400 && (await this.sessionGone(client))) {
        failure = "not-sent";
      }
      if (failure === "other" || this.closed) throw this.callError(name, error);
      this.drop(client);
      if (reconnected) throw this.lostError(name, error, "right after it was started again", client);
      if (failure === "lost" && options.repeatable !== true) {
        throw this.lostError(
          name,
          error,
          "while the call ran; the tool may or may not have run, so it was not repeated",
          client,
        );
      }
      const fresh = await this.reconnect(signal);
      return await this.request(fresh, name, args, signal).catch((again: unknown) => {
        if (signal?.aborted) throw signal.reason ?? again;
        if (classify(again, fresh) === "other") throw this.callError(name, again);
        this.drop(fresh);
        throw this.lostError(name, again, "again when the call was sent a second time", fresh);
      });
    }
  }

  /** Closes the connection (a stdio server is asked to exit, then killed). */
  async close(): Promise<void> {
    this.closed = true;
    const client = this.client;
    this.client = undefined;
    const pending = this.connecting;
    this.connecting = undefined;
    await Promise.allSettled([client && closeClient(client), pending?.then(closeClient)]);
  }

  private request(client: Client, name: string, args: Record<string, unknown>, signal: AbortSignal | undefined) {
    return client.callTool({ name, arguments: args }, undefined, {
      timeout: this.callTimeoutMs,
      ...(signal === undefined ? {} : { signal }),
    }) as Promise<CallToolResult>;
  }

  /**
   * A call whose answer stream ended without its answer, from a server that is still there: the connection stays (other
   * calls stream on it), and the call is sent again only when it may be.
   */
  private async unanswered(
    client: Client,
    name: string,
    args: Record<string, unknown>,
    options: McpCallOptions,
    error: unknown,
  ): Promise<CallToolResult> {
    const fail = (when: string, cause: unknown) =>
      new McpUpstreamError(
        this.name,
        `server "${this.name}" did not answer the call of ${name}${when} (${unansweredReason(cause, this.unansweredMarker)})`,
        "",
        { cause },
      );
    if (options.repeatable !== true || this.closed) {
      throw fail("; the tool may or may not have run, so it was not repeated", error);
    }
    const { signal } = options;
    return await this.request(client, name, args, signal).catch((again: unknown) => {
      if (signal?.aborted) throw signal.reason ?? again;
      throw unansweredReason(again, this.unansweredMarker)
        ? fail(" when it was sent a second time", again)
        : this.callError(name, again);
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

  /** A failed call as the script sees it: an HTTP error status is the server's answer, so it is named. */
  private callError(tool: string, error: unknown): unknown {
    if (!(error instanceof StreamableHTTPError)) return error;
    const detail = error.message.replace(/^Streamable HTTP error: /, "");
    const status = (error.code ?? -1) > 0 ? `HTTP ${error.code}` : "an error";
    return new McpUpstreamError(
      this.name,
      `server "${this.name}" answered the call of ${tool} with ${status}: ${detail}`,
      "",
      { cause: error },
    );
  }

  private lostError(tool: string, error: unknown, when: string, client: Client): Error {
    const reason = this.malformed.get(client);
    const what =
      reason === undefined
        ? `the connection to server "${this.name}" was lost`
        : `server "${this.name}" sent ${reason} and was disconnected`;
    return new McpUpstreamError(
      this.name,
      `${what} ${when} (calling ${tool}: ${message(error)})`,
      this.spec.transport === "stdio" ? this.stderrTail : "",
      { cause: error },
    );
  }

  private async reconnect(signal: AbortSignal | undefined): Promise<Client> {
    return abortable(this.ensureClient(), signal);
  }

  private ensureClient(): Promise<Client> {
    if (this.closed) return Promise.reject(new McpUpstreamError(this.name, `server "${this.name}" is closed`));
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
   * A message that is not JSON-RPC is dropped by the SDK, and the call it answered would wait until its deadline: the
   * server is disconnected instead (started again on the next call), which fails its calls now, saying why.
   */
  private dropIfMalformed(client: Client, error: Error): boolean {
    if (!(error instanceof SyntaxError) && error.name !== "ZodError") return false;
    this.malformed.set(
      client,
      error.name === "ZodError" ? "a message that is not JSON-RPC" : "a line that is not JSON",
    );
    this.drop(client);
    return true;
  }

  private drop(client: Client): void {
    if (this.client === client) this.client = undefined;
    void client.close().catch(() => {});
  }

  private async open(): Promise<Client> {
    const spec = this.spec;
    const client = new Client(this.clientInfo, {
      capabilities: {},
      listChanged: {
        tools: {
          autoRefresh: false,
          debounceMs: 100,
          onChanged: () => this.options.onToolsChanged?.(this.name),
        },
      },
    });
    let transport: Transport;
    if (spec.transport === "stdio") {
      const stdio = new StdioClientTransport({
        command: spec.command,
        args: spec.args,
        env: spec.env,
        ...(spec.cwd === undefined ? {} : { cwd: spec.cwd }),
        stderr: "pipe",
      });
      stdio.stderr?.on("data", (chunk: Buffer | string) => {
        const text = chunk.toString();
        this.stderr = (this.stderr + text).slice(-STDERR_TAIL_CHARS);
        this.options.onStderr?.(this.name, text);
      });
      transport = stdio;
      client.onerror = (error) => this.dropIfMalformed(client, error);
    } else {
      transport = new StreamableHTTPClientTransport(spec.url, {
        requestInit: { headers: spec.headers },
        fetch: watchAnswerStreams(this.unansweredMarker),
      });
      // A response stream that broke (the server died, the network dropped) leaves its call pending until its deadline
      // unless the stream resumes. A server that does not answer a ping then is gone: the connection is dropped, which
      // fails its calls as lost now.
      let probing = false;
      client.onerror = (error) => {
        if (this.dropIfMalformed(client, error)) return;
        if (probing || !/^(SSE stream disconnected|Failed to reconnect|Maximum reconnection)/.test(error.message))
          return;
        probing = true;
        client.ping({ timeout: HTTP_PROBE_TIMEOUT_MS }).then(
          () => {
            probing = false;
          },
          () => this.drop(client),
        );
      };
    }
    client.onclose = () => {
      closedClients.add(client);
      if (this.client === client) this.client = undefined;
    };
    try {
      await client.connect(transport, { timeout: this.connectTimeoutMs });
    } catch (error) {
      await client.close().catch(() => {});
      // The last stderr chunks of a process that exited may still be on their way through the pipe.
      await new Promise((resolve) => setTimeout(resolve, 50));
      throw this.startError(error, client);
    }
    return client;
  }

  private startError(error: unknown, client: Client): McpUpstreamError {
    const spec = this.spec;
    const code = (error as NodeJS.ErrnoException)?.code;
    let reason: string;
    if (spec.transport === "stdio") {
      const command = [spec.command, ...spec.args].map((part) => (/\s/.test(part) ? JSON.stringify(part) : part));
      // spawn() reports a missing working directory as ENOENT too, as if the command were missing.
      if ((code === "ENOENT" || code === "ENOTDIR") && spec.cwd !== undefined && !isDirectory(spec.cwd)) {
        reason = `its working directory "cwd" (${spec.cwd}) is not a directory that exists`;
      } else if (code === "ENOENT")
        reason = `command "${spec.command}" was not found (is it installed and on the PATH?)`;
      else if (code === "EACCES") reason = `command "${spec.command}" is not executable`;
      else if (isTimeout(error)) reason = `it did not finish the MCP handshake within ${this.connectTimeoutMs} ms`;
      else if (isConnectionClosed(error, client)) reason = "the process exited before finishing the MCP handshake";
      else reason = message(error);
      return new McpUpstreamError(
        this.name,
        `server "${this.name}" did not start: ${reason}. Command: ${command.join(" ")}`,
        this.stderrTail,
        { cause: error },
      );
    }
    if (error instanceof StreamableHTTPError) reason = `HTTP ${error.code}: ${error.message}`;
    else if (isTimeout(error)) reason = `it did not finish the MCP handshake within ${this.connectTimeoutMs} ms`;
    else reason = message(error);
    return new McpUpstreamError(
      this.name,
      `server "${this.name}" at ${spec.url.href} could not be reached: ${reason}`,
      "",
      {
        cause: error,
      },
    );
  }
}

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

/**
 * Ends an HTTP session with a DELETE (a server may not support it), then closes the transport. A stdio server gets
 * its stdin closed and, if it is still running `STDIO_EXIT_GRACE_MS` later (many servers ignore the end of stdin),
 * SIGTERM; the SDK's transport sends SIGKILL if that does not end it either.
 */
async function closeClient(client: Client): Promise<void> {
  const transport = client.transport;
  if (transport instanceof StreamableHTTPClientTransport && transport.sessionId !== undefined) {
    await Promise.race([
      transport.terminateSession().catch(() => {}),
      new Promise((resolve) => setTimeout(resolve, HTTP_TERMINATE_TIMEOUT_MS).unref()),
    ]);
  }
  const pid = transport instanceof StdioClientTransport ? transport.pid : null;
  const timer =
    pid === null
      ? undefined
      : setTimeout(() => {
          try {
            process.kill(pid, "SIGTERM");
          } catch {
            // It exited already.
          }
        }, STDIO_EXIT_GRACE_MS);
  try {
    await client.close();
  } finally {
    clearTimeout(timer);
  }
}

function isDirectory(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
}

function isTimeout(error: unknown): boolean {
  return error instanceof McpError && error.code === ErrorCode.RequestTimeout;
}

/** The SDK's own "Connection closed": it rejects pending requests with it after the client's onclose ran. */
function isConnectionClosed(error: unknown, client: Client): boolean {
  return error instanceof McpError && error.code === ErrorCode.ConnectionClosed && closedClients.has(client);
}

function message(error: unknown): string {
  if (error instanceof Error) {
    const cause = (error as { cause?: unknown }).cause;
    return cause instanceof Error && !error.message.includes(cause.message)
      ? `${error.message} (${cause.message})`
      : error.message;
  }
  return String(error);
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
