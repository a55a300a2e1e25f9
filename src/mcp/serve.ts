/** Serving a gateway to MCP clients: over stdio (one client), or Streamable HTTP (a session per client). */
import { createHash, randomUUID, timingSafeEqual } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { Readable, Writable } from "node:stream";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { isInitializeRequest } from "@modelcontextprotocol/sdk/types.js";
import { optionKeys, refuseUnknownOptions } from "../options.ts";
import { DEFAULT_HTTP_HOST, DEFAULT_SESSION_IDLE_MS } from "./defaults.ts";
import type { McpGateway } from "./gateway.ts";
import { GatewayStdioTransport, MAX_STDIO_LINE_BYTES } from "./stdio.ts";

/** Path of the MCP endpoint. */
export const DEFAULT_HTTP_PATH = "/mcp";
/** Largest request body accepted, in bytes (a script travels in one); the same as a message over stdio. */
export const MAX_HTTP_BODY_BYTES = MAX_STDIO_LINE_BYTES;

export interface ServeStdioOptions {
  /** Default `process.stdin`. */
  stdin?: Readable;
  /** Default `process.stdout`. */
  stdout?: Writable;
}

export interface StdioServing {
  /** Resolves when the client closed its end (stdin ended) or `close()` was called. */
  readonly closed: Promise<void>;
  close(): Promise<void>;
}

/** Serves the gateway on stdin and stdout, to one client (the gateway itself is not closed). */
export async function serveGatewayStdio(gateway: McpGateway, options: ServeStdioOptions = {}): Promise<StdioServing> {
  refuseUnknownOptions(options, "serveGatewayStdio", ["stdin", "stdout"]);
  const stdin = options.stdin ?? process.stdin;
  const stdout = options.stdout ?? process.stdout;
  const server = gateway.createServer();
  const transport = new GatewayStdioTransport(stdin, stdout);
  await server.connect(transport);
  let finish: () => void = () => {};
  const closed = new Promise<void>((resolve) => {
    finish = resolve;
  });
  const previous = transport.onclose;
  transport.onclose = () => {
    previous?.();
    finish();
  };
  const close = async () => {
    await server.close().catch(() => {});
    finish();
    await closed;
  };
  // The SDK's stdio transport does not notice the end of stdin: a client that goes away closes the session.
  const onEnd = () => void close();
  stdin.once("end", onEnd);
  stdin.once("close", onEnd);
  void closed.then(() => {
    stdin.off("end", onEnd);
    stdin.off("close", onEnd);
  });
  return { closed, close };
}

export interface ServeHttpOptions {
  /** Port to listen on; 0 picks a free one. */
  port: number;
  /** Default `DEFAULT_HTTP_HOST` (127.0.0.1). */
  host?: string;
  /** Default `DEFAULT_HTTP_PATH` (/mcp). */
  path?: string;
  /**
   * Host names the `Host` header (and an `Origin` header, when a browser sends one) may carry: protection against
   * DNS rebinding and other web pages. Default: when bound to a loopback address, `localhost`, `127.0.0.1` and
   * `[::1]`; otherwise any.
   */
  allowedHosts?: string[];
  /**
   * A session with no request in progress for this long is closed (a client that went away without DELETE would
   * otherwise keep its server forever); its client gets 404 and initializes again. Default
   * `DEFAULT_SESSION_IDLE_MS` (30 minutes); `Infinity` keeps sessions until DELETE.
   */
  sessionIdleMs?: number;
  /**
   * When set, every request must carry `Authorization: Bearer <token>`; others get 401. Anyone who can reach the
   * endpoint can otherwise run programs against the upstream tools: set one whenever it is reachable from elsewhere.
   */
  bearerToken?: string;
}

const HTTP_KEYS = optionKeys<ServeHttpOptions>({
  port: true,
  host: true,
  path: true,
  allowedHosts: true,
  sessionIdleMs: true,
  bearerToken: true,
});

export interface HttpServing {
  /** The endpoint, for example `http://127.0.0.1:3000/mcp`. */
  readonly url: string;
  readonly port: number;
  /** Open client sessions. */
  readonly sessions: number;
  /** Ends every session and stops listening (the gateway itself is not closed). */
  close(): Promise<void>;
}

interface Session {
  transport: StreamableHTTPServerTransport;
  close(): Promise<void>;
  /** Requests in progress (an open GET stream counts), and when the last one began or ended. */
  active: number;
  lastActive: number;
}

/** Serves the gateway over Streamable HTTP: each client that initializes gets its own session and MCP server. */
export async function serveGatewayHttp(gateway: McpGateway, options: ServeHttpOptions): Promise<HttpServing> {
  // A misspelt bearerToken must not serve without one.
  refuseUnknownOptions(options, "serveGatewayHttp", HTTP_KEYS);
  const host = options.host ?? DEFAULT_HTTP_HOST;
  const path = options.path ?? DEFAULT_HTTP_PATH;
  const allowedHosts = options.allowedHosts ?? (isLoopback(host) ? ["localhost", "127.0.0.1", "[::1]"] : null);
  const idleMs = options.sessionIdleMs ?? DEFAULT_SESSION_IDLE_MS;
  if (typeof idleMs !== "number" || !(idleMs > 0)) {
    throw new RangeError(`sessionIdleMs must be a positive number of ms (or Infinity), got ${String(idleMs)}`);
  }
  const token = options.bearerToken;
  if (token !== undefined && (typeof token !== "string" || !/^[\x21-\x7e]+$/.test(token))) {
    throw new TypeError("bearerToken must be a non-empty string of printable ASCII without spaces");
  }
  // Compared as digests, in constant time: the comparison tells nothing about the token's length or prefix.
  const tokenDigest = token === undefined ? undefined : sha256(token);
  const sessions = new Map<string, Session>();
  /** Hands a request to its session's transport, which counts as activity until the response ends. */
  const serve = (session: Session, req: IncomingMessage, res: ServerResponse, body?: unknown) => {
    session.active++;
    session.lastActive = performance.now();
    res.once("close", () => {
      session.active--;
      session.lastActive = performance.now();
    });
    return session.transport.handleRequest(req, res, body);
  };
  const sweeper = Number.isFinite(idleMs)
    ? setInterval(
        () => {
          const now = performance.now();
          for (const session of sessions.values()) {
            if (session.active === 0 && now - session.lastActive > idleMs) session.close().catch(() => {});
          }
        },
        Math.min(idleMs / 2, 60_000),
      )
    : undefined;
  sweeper?.unref();

  const openSession = async (): Promise<Session> => {
    const server = gateway.createServer();
    let session: Session | undefined;
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => {
        if (session) sessions.set(id, session);
      },
    });
    session = {
      transport,
      active: 0,
      lastActive: performance.now(),
      close: async () => {
        const id = transport.sessionId;
        if (id !== undefined) sessions.delete(id);
        await server.close();
      },
    };
    transport.onclose = () => {
      const id = transport.sessionId;
      if (id !== undefined) sessions.delete(id);
    };
    await server.connect(transport);
    return session;
  };

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? "/", "http://localhost");
    if (allowedHosts !== null && !allowedHosts.includes(hostName(req.headers.host))) {
      return reply(res, 403, `Host ${JSON.stringify(req.headers.host ?? "")} is not allowed`);
    }
    // A web page on another site may not drive a local gateway from the user's browser.
    const origin = header(req, "origin");
    if (allowedHosts !== null && origin !== undefined && !allowedHosts.includes(originHost(origin))) {
      return reply(res, 403, `Origin ${JSON.stringify(origin)} is not allowed`);
    }
    if (tokenDigest !== undefined) {
      const given = /^Bearer (\S+)$/i.exec(header(req, "authorization") ?? "")?.[1];
      if (given === undefined || !timingSafeEqual(sha256(given), tokenDigest)) {
        res.setHeader("www-authenticate", 'Bearer realm="airlock"');
        return reply(res, 401, "Unauthorized: send Authorization: Bearer <token>");
      }
    }
    if (url.pathname !== path) return reply(res, 404, `Not found: the MCP endpoint is ${path}`);
    const sessionId = header(req, "mcp-session-id");
    if (req.method === "POST") {
      let body: unknown;
      try {
        body = JSON.parse(await readBody(req));
      } catch (error) {
        return reply(res, 400, `The request body is not JSON: ${(error as Error).message}`, -32700);
      }
      if (sessionId !== undefined) {
        const session = sessions.get(sessionId);
        if (session === undefined) return reply(res, 404, "Session not found: initialize a new session", -32001);
        return serve(session, req, res, body);
      }
      if (!isInitializeRequest(body)) {
        return reply(res, 400, "No session: the first request must be initialize (without an Mcp-Session-Id)");
      }
      const session = await openSession();
      await serve(session, req, res, body);
      // An initialize that failed leaves no session behind.
      if (session.transport.sessionId === undefined) await session.close();
      return;
    }
    if (req.method === "GET" || req.method === "DELETE") {
      if (sessionId === undefined) return reply(res, 400, "Missing Mcp-Session-Id header");
      const session = sessions.get(sessionId);
      if (session === undefined) return reply(res, 404, "Session not found", -32001);
      await serve(session, req, res);
      if (req.method === "DELETE") await session.close();
      return;
    }
    res.setHeader("Allow", "GET, POST, DELETE");
    return reply(res, 405, `Method ${req.method} is not allowed`);
  };

  const http: Server = createServer((req, res) => {
    handle(req, res).catch((error: unknown) => {
      if (!res.headersSent) reply(res, 500, `Internal error: ${(error as Error)?.message ?? String(error)}`, -32603);
      else res.end();
    });
  });
  await new Promise<void>((resolve, reject) => {
    http.once("error", reject);
    http.listen(options.port, host, () => {
      http.off("error", reject);
      resolve();
    });
  });
  const port = (http.address() as AddressInfo).port;
  const shownHost = host.includes(":") ? `[${host}]` : host;
  let closing: Promise<void> | undefined;
  return {
    url: `http://${shownHost}:${port}${path}`,
    port,
    get sessions() {
      return sessions.size;
    },
    close() {
      closing ??= (async () => {
        clearInterval(sweeper);
        await Promise.allSettled([...sessions.values()].map((session) => session.close()));
        await new Promise<void>((resolve) => {
          http.close(() => resolve());
          http.closeAllConnections();
        });
      })();
      return closing;
    },
  };
}

function sha256(text: string): Buffer {
  return createHash("sha256").update(text).digest();
}

function reply(res: ServerResponse, status: number, message: string, code = -32000): void {
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify({ jsonrpc: "2.0", error: { code, message }, id: null }));
}

function header(req: IncomingMessage, name: string): string | undefined {
  const value = req.headers[name];
  return Array.isArray(value) ? value[0] : value;
}

function hostName(host: string | undefined): string {
  if (host === undefined) return "";
  try {
    return new URL(`http://${host}`).hostname;
  } catch {
    return "";
  }
}

function originHost(origin: string): string {
  try {
    return new URL(origin).hostname;
  } catch {
    return "";
  }
}

function isLoopback(host: string): boolean {
  return host === "localhost" || host === "::1" || host.startsWith("127.");
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_HTTP_BODY_BYTES) throw new Error(`the body is larger than ${MAX_HTTP_BODY_BYTES} bytes`);
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString("utf8");
}
