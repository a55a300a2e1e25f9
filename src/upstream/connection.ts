/**
 * One connection to an upstream server, per transport, with the official SDK's `Client`: a stdio child process (its
 * stderr kept for error messages) or Streamable HTTP (answer streams watched, a broken stream probed with a ping).
 * Also how a connection is closed, and why one did not open. What a failed call or a failed start means (send it
 * again, reconnect, retry later) is the retry policy's, in server.ts.
 */
import { statSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport, StreamableHTTPError } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js";
import { ErrorCode, ListRootsRequestSchema, McpError, type Root } from "@modelcontextprotocol/sdk/types.js";
import { watchAnswerStreams } from "./answer-streams.ts";
import type { McpServerSpec } from "./config.ts";
import { McpUpstreamError } from "./upstream-errors.ts";
import { MAX_UPSTREAM_MESSAGE_BYTES, MAX_UPSTREAM_OWED_ANSWERS } from "./upstream-limits.ts";

/** How long a stdio server has to exit by itself after its stdin was closed, before it gets SIGTERM. */
export const STDIO_EXIT_GRACE_MS = 300;
/** How long closing waits for an HTTP server to confirm the end of its session. */
export const HTTP_TERMINATE_TIMEOUT_MS = 1000;
/** How long an HTTP server has to answer a ping after one of its response streams broke. */
export const HTTP_PROBE_TIMEOUT_MS = 5000;

/** What one connection reports to the upstream that opened it. */
export interface ClientHooks {
  clientInfo: { name: string; version: string };
  connectTimeoutMs: number;
  /** Marks the errors written for answers a server's stream did not carry (see answer-streams.ts). */
  unansweredMarker: string;
  /** What a stdio server writes to stderr, as it arrives. */
  onStderr(text: string): void;
  /** The server said that its tools, resources or prompts changed. */
  onListChanged(list: "tools" | "resources" | "prompts"): void;
  /** The server sent something that is not JSON-RPC: `reason` says what. The connection is to be dropped. */
  onMalformed(client: Client, reason: string): void;
  /** An HTTP server whose answer stream broke did not answer a ping: the connection is to be dropped. */
  onGone(client: Client): void;
  /** The connection closed (the server exited, or it was closed). */
  onClosed(client: Client): void;
  /** The roots the server may ask for (`roots/list`): those of the gateway's client, or none. */
  roots(): Root[];
}

/** Clients whose transport closed. A server may send code -32000 (ConnectionClosed) itself: the generic server error. */
const closedClients = new WeakSet<Client>();

/** Starts or reaches the server of `spec` and does the MCP handshake. Rejects with an `McpUpstreamError` saying why not. */
export async function openClient(spec: McpServerSpec, hooks: ClientHooks, stderrTail: () => string): Promise<Client> {
  const client = new Client(hooks.clientInfo, {
    capabilities: { roots: { listChanged: true } },
    listChanged: {
      tools: { autoRefresh: false, debounceMs: 100, onChanged: () => hooks.onListChanged("tools") },
      resources: { autoRefresh: false, debounceMs: 100, onChanged: () => hooks.onListChanged("resources") },
      prompts: { autoRefresh: false, debounceMs: 100, onChanged: () => hooks.onListChanged("prompts") },
    },
  });
  client.setRequestHandler(ListRootsRequestSchema, () => ({ roots: hooks.roots() }));
  let transport: Transport;
  if (spec.transport === "stdio") {
    const stdio = new StdioClientTransport({
      command: spec.command,
      args: spec.args,
      env: spec.env,
      ...(spec.cwd === undefined ? {} : { cwd: spec.cwd }),
      stderr: "pipe",
      maxBufferSize: MAX_UPSTREAM_MESSAGE_BYTES,
    });
    stdio.stderr?.on("data", (chunk: Buffer | string) => hooks.onStderr(chunk.toString()));
    transport = stdio;
    client.onerror = (error) => malformed(client, error, hooks);
  } else {
    transport = new StreamableHTTPClientTransport(spec.url, {
      requestInit: { headers: spec.headers },
      fetch: watchAnswerStreams(hooks.unansweredMarker),
    });
    // A response stream that broke (the server died, the network dropped) leaves its call pending until its deadline
    // unless the stream resumes. A server that does not answer a ping then is gone: the connection is dropped, which
    // fails its calls as lost now.
    let probing = false;
    client.onerror = (error) => {
      if (malformed(client, error, hooks)) return;
      if (probing || !/^(SSE stream disconnected|Failed to reconnect|Maximum reconnection)/.test(error.message)) return;
      probing = true;
      client.ping({ timeout: HTTP_PROBE_TIMEOUT_MS }).then(
        () => {
          probing = false;
        },
        () => hooks.onGone(client),
      );
    };
  }
  owedAnswers(transport, () =>
    hooks.onMalformed(
      client,
      `more than ${MAX_UPSTREAM_OWED_ANSWERS} requests whose answers it did not take (MAX_UPSTREAM_OWED_ANSWERS)`,
    ),
  );
  client.onclose = () => {
    closedClients.add(client);
    hooks.onClosed(client);
  };
  try {
    await client.connect(transport, { timeout: hooks.connectTimeoutMs });
  } catch (error) {
    await client.close().catch(() => {});
    // The last stderr chunks of a process that exited may still be on their way through the pipe.
    await new Promise((resolve) => setTimeout(resolve, 50));
    throw startError(spec, error, client, hooks.connectTimeoutMs, stderrTail());
  }
  return client;
}

/**
 * Counts the answers to a server's own requests (ping, roots/list) that are sent but not yet taken: written to a
 * stdio server's stdin and not read, or POSTed to an HTTP server and not answered. A server that floods requests and
 * never takes the answers would otherwise make the gateway hold every one of them: past `MAX_UPSTREAM_OWED_ANSWERS`,
 * `onFlood` drops the connection.
 */
function owedAnswers(transport: Transport, onFlood: () => void): void {
  const send = transport.send.bind(transport);
  let owed = 0;
  transport.send = async (message, options) => {
    if ("method" in message) return send(message, options);
    if (owed >= MAX_UPSTREAM_OWED_ANSWERS) {
      // What it sends until it is gone is dropped: the requests already in the pipe would each hold a handler.
      transport.onmessage = () => {};
      onFlood();
      throw new Error("the server takes no more answers");
    }
    owed++;
    try {
      return await send(message, options);
    } finally {
      owed--;
    }
  };
}

/**
 * A message that is not JSON-RPC is dropped by the SDK, and the call it answered would wait until its deadline: the
 * server is disconnected instead (started again on the next call), which fails its calls now, saying why. So is a
 * stdio server whose message passed the SDK's buffer (`MAX_UPSTREAM_MESSAGE_BYTES`), which the SDK closes itself.
 */
function malformed(client: Client, error: Error, hooks: ClientHooks): boolean {
  if (/^ReadBuffer exceeded maximum size/.test(error.message)) {
    hooks.onMalformed(client, `a message longer than ${MAX_UPSTREAM_MESSAGE_BYTES} bytes (MAX_UPSTREAM_MESSAGE_BYTES)`);
    return true;
  }
  if (!(error instanceof SyntaxError) && error.name !== "ZodError") return false;
  hooks.onMalformed(client, error.name === "ZodError" ? "a message that is not JSON-RPC" : "a line that is not JSON");
  return true;
}

/** The process id of a stdio connection's server while it runs. */
export function clientPid(client: Client | undefined): number | null {
  const transport = client?.transport;
  return transport instanceof StdioClientTransport ? transport.pid : null;
}

/** The SDK's own "Connection closed": it rejects pending requests with it after the client's onclose ran. */
export function isConnectionClosed(error: unknown, client: Client): boolean {
  return error instanceof McpError && error.code === ErrorCode.ConnectionClosed && closedClients.has(client);
}

/** Whether the client's transport closed (the server exited, or the connection was closed). */
export function isClosed(client: Client): boolean {
  return closedClients.has(client);
}

export function isTimeout(error: unknown): boolean {
  return error instanceof McpError && error.code === ErrorCode.RequestTimeout;
}

/**
 * Ends an HTTP session with a DELETE (a server may not support it), then closes the transport. A stdio server gets
 * its stdin closed and, if it is still running `STDIO_EXIT_GRACE_MS` later (many servers ignore the end of stdin),
 * SIGTERM; the SDK's transport sends SIGKILL if that does not end it either.
 */
export async function closeClient(client: Client): Promise<void> {
  const transport = client.transport;
  if (transport instanceof StreamableHTTPClientTransport && transport.sessionId !== undefined) {
    await Promise.race([
      transport.terminateSession().catch(() => {}),
      new Promise((resolve) => setTimeout(resolve, HTTP_TERMINATE_TIMEOUT_MS).unref()),
    ]);
  }
  const pid = clientPid(client);
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

function startError(
  spec: McpServerSpec,
  error: unknown,
  client: Client,
  connectTimeoutMs: number,
  stderrTail: string,
): McpUpstreamError {
  const code = (error as NodeJS.ErrnoException)?.code;
  let reason: string;
  if (spec.transport === "stdio") {
    const command = [spec.command, ...spec.args].map((part) => (/\s/.test(part) ? JSON.stringify(part) : part));
    // A reason Airlock did not write (the handshake's own error) is left out of what models are told.
    let own = true;
    // spawn() reports a missing working directory as ENOENT too, as if the command were missing.
    if ((code === "ENOENT" || code === "ENOTDIR") && spec.cwd !== undefined && !isDirectory(spec.cwd)) {
      reason = `its working directory "cwd" (${spec.cwd}) is not a directory that exists`;
    } else if (code === "ENOENT") reason = `command "${spec.command}" was not found (is it installed and on the PATH?)`;
    else if (code === "EACCES") reason = `command "${spec.command}" is not executable`;
    else if (isTimeout(error)) reason = `it did not finish the MCP handshake within ${connectTimeoutMs} ms`;
    else if (isConnectionClosed(error, client)) reason = "the process exited before finishing the MCP handshake";
    else {
      reason = errorText(error);
      own = false;
    }
    return new McpUpstreamError(
      spec.name,
      `server "${spec.name}" did not start: ${reason}. Command: ${command.join(" ")}`,
      stderrTail,
      { cause: error, reason: `did not start: ${own ? reason : "it failed before finishing the MCP handshake"}` },
    );
  }
  let shown: string;
  if (error instanceof StreamableHTTPError) {
    reason = `HTTP ${error.code}: ${error.message}`;
    shown = `HTTP ${error.code}`;
  } else if (isTimeout(error)) {
    reason = `it did not finish the MCP handshake within ${connectTimeoutMs} ms`;
    shown = reason;
  } else {
    reason = errorText(error);
    shown = "the connection failed";
  }
  return new McpUpstreamError(
    spec.name,
    `server "${spec.name}" at ${spec.url.href} could not be reached: ${reason}`,
    "",
    {
      cause: error,
      reason: `could not be reached (${shown})`,
    },
  );
}

function isDirectory(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
}

/** An error's message, with its cause's when that adds something. */
export function errorText(error: unknown): string {
  if (error instanceof Error) {
    const cause = (error as { cause?: unknown }).cause;
    return cause instanceof Error && !error.message.includes(cause.message)
      ? `${error.message} (${cause.message})`
      : error.message;
  }
  return String(error);
}
