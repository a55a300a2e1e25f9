/** Serving a gateway to MCP clients: over stdio (one client), or Streamable HTTP (a session per client). */
import { randomUUID } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { hostname, networkInterfaces } from "node:os";
import type { Readable, Writable } from "node:stream";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { isInitializeRequest, type RequestId } from "@modelcontextprotocol/sdk/types.js";
import { durationOption, integerOption, optionKeys, refuseUnknownOptions } from "../platform/options.ts";
import {
  type Authenticator,
  OAUTH_KEYS,
  type OAuthResourceServerOptions,
  oauthAuthenticator,
  PROTECTED_RESOURCE_METADATA_PATH,
  sharedTokenAuthenticator,
} from "./auth.ts";
import {
  DEFAULT_HTTP_HOST,
  DEFAULT_MAX_SESSIONS,
  DEFAULT_MAX_SESSIONS_PER_PRINCIPAL,
  DEFAULT_SESSION_IDLE_MS,
} from "./defaults.ts";
import type { McpGateway } from "./gateway.ts";
import {
  HTTP_RECEIVE_TIMEOUT_MS,
  HTTP_RETRY_AFTER_S,
  type HttpRefusal,
  isRefusal,
  RequestBudget,
  type RequestHold,
  SESSION_EVICTION_GRACE_MS,
} from "./http-limits.ts";
import { END_BYTES, GatewayStdioTransport, leadingId } from "./stdio.ts";

/** Path of the MCP endpoint. */
export const DEFAULT_HTTP_PATH = "/mcp";

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
   * The URL clients reach the endpoint at, when that is not `http://<host>:<port><path>` (behind a proxy, or a name
   * for a wildcard address): the resource identifier of the metadata, the default OAuth audience, and an allowed host.
   */
  publicUrl?: string;
  /**
   * Host names the `Host` header (and an `Origin` header, when a browser sends one) may carry: protection against
   * DNS rebinding and other web pages, on whatever address the server is bound to. Default: `localhost`,
   * `127.0.0.1`, `[::1]`, the bound address (for a wildcard address, every address of this machine and its host name)
   * and the host of `publicUrl`. Given, these names are allowed besides the loopback ones.
   */
  allowedHosts?: string[];
  /**
   * A session with no request in progress for this long is closed, with its store (a client that went away without
   * DELETE would otherwise keep its server forever); its client gets 404 and initializes again. Default
   * `DEFAULT_SESSION_IDLE_MS` (30 minutes); `Infinity` keeps sessions until DELETE.
   */
  sessionIdleMs?: number;
  /**
   * Most open sessions of one principal (whom a token names; all clients are one principal without a token). A new
   * session past it closes that principal's session idle longest (no request in progress, no open stream, for
   * `SESSION_EVICTION_GRACE_MS` at least), whose client gets 404 and initializes again; with none idle, the
   * initialize gets 429. Default `DEFAULT_MAX_SESSIONS_PER_PRINCIPAL` (32).
   */
  maxSessionsPerPrincipal?: number;
  /** Most open sessions of all principals together; past it an initialize gets 503. Default `DEFAULT_MAX_SESSIONS` (256). */
  maxSessions?: number;
  /**
   * When set, every request must carry `Authorization: Bearer <token>`; others get 401. Anyone who can reach the
   * endpoint can otherwise run programs against the upstream tools: set one (or `oauth`) whenever it is reachable
   * from elsewhere.
   */
  bearerToken?: string;
  /** OAuth 2.1 resource-server mode: every request carries an access token of this authorization server. */
  oauth?: OAuthResourceServerOptions;
}

const HTTP_KEYS = optionKeys<ServeHttpOptions>({
  port: true,
  host: true,
  path: true,
  publicUrl: true,
  allowedHosts: true,
  sessionIdleMs: true,
  maxSessionsPerPrincipal: true,
  maxSessions: true,
  bearerToken: true,
  oauth: true,
});

export interface HttpServing {
  /** The endpoint, for example `http://127.0.0.1:3000/mcp`. */
  readonly url: string;
  readonly port: number;
  /** Where the protected-resource metadata is (also served when no token is required). */
  readonly metadataUrl: string;
  /** Open client sessions. */
  readonly sessions: number;
  /** Requests in progress and the bytes of their bodies (see http-limits.ts), of `principal` or of all. */
  held(principal?: string): { requests: number; bodyBytes: number };
  /** Ends every session and stops listening (the gateway itself is not closed). */
  close(): Promise<void>;
}

interface Session {
  transport: StreamableHTTPServerTransport;
  close(): Promise<void>;
  /** Requests in progress (an open GET stream counts), and when the last one began or ended. */
  active: number;
  lastActive: number;
  /** Who opened it: requests of another principal do not find it. */
  principal: string | undefined;
}

/** Serves the gateway over Streamable HTTP: each client that initializes gets its own session and MCP server. */
export async function serveGatewayHttp(gateway: McpGateway, options: ServeHttpOptions): Promise<HttpServing> {
  // A misspelt bearerToken must not serve without one.
  refuseUnknownOptions(options, "serveGatewayHttp", HTTP_KEYS);
  const host = options.host ?? DEFAULT_HTTP_HOST;
  const path = options.path ?? DEFAULT_HTTP_PATH;
  const idleMs = durationOption(options.sessionIdleMs, "sessionIdleMs", true) ?? DEFAULT_SESSION_IDLE_MS;
  const maxSessions = integerOption(options.maxSessions, "maxSessions", 1, Infinity) ?? DEFAULT_MAX_SESSIONS;
  const maxPerPrincipal =
    integerOption(options.maxSessionsPerPrincipal, "maxSessionsPerPrincipal", 1, Infinity) ??
    DEFAULT_MAX_SESSIONS_PER_PRINCIPAL;
  const token = options.bearerToken;
  if (token !== undefined && (typeof token !== "string" || !/^[\x21-\x7e]+$/.test(token))) {
    throw new TypeError("bearerToken must be a non-empty string of printable ASCII without spaces");
  }
  if (token !== undefined && options.oauth !== undefined) {
    throw new TypeError("give bearerToken or oauth, not both");
  }
  if (options.oauth !== undefined && (options.oauth === null || typeof options.oauth !== "object")) {
    throw new TypeError("oauth must be an object with the authorization server's issuer");
  }
  if (options.oauth !== undefined) refuseUnknownOptions(options.oauth, "oauth", OAUTH_KEYS);
  const publicUrl = options.publicUrl === undefined ? undefined : parsePublicUrl(options.publicUrl);
  const extraHosts = options.allowedHosts;
  if (
    extraHosts !== undefined &&
    (!Array.isArray(extraHosts) || extraHosts.some((h) => typeof h !== "string" || h === ""))
  ) {
    throw new TypeError("allowedHosts must be an array of host names");
  }

  const http: Server = createServer((req, res) => {
    handle(req, res).catch((error: unknown) => {
      if (!res.headersSent) reply(res, 500, `Internal error: ${(error as Error)?.message ?? String(error)}`, -32603);
      else res.end();
    });
  });
  // A body's bytes are held from its first chunk: a client that stops sending lets go of them this soon.
  http.requestTimeout = HTTP_RECEIVE_TIMEOUT_MS;
  await new Promise<void>((resolve, reject) => {
    http.once("error", reject);
    http.listen(options.port, host, () => {
      http.off("error", reject);
      resolve();
    });
  });
  const port = (http.address() as AddressInfo).port;
  const shownHost = host.includes(":") ? `[${host}]` : host;
  const url = `http://${shownHost}:${port}${path}`;
  const resource = publicUrl?.href ?? url;
  const metadataUrl = new URL(`${PROTECTED_RESOURCE_METADATA_PATH}${new URL(resource).pathname}`, resource).href;
  const allowedHosts = new Set([
    ...defaultAllowedHosts(host, publicUrl),
    ...(extraHosts ?? []).map((h) => h.toLowerCase()),
  ]);
  let auth: Authenticator | undefined;
  try {
    if (token !== undefined) auth = sharedTokenAuthenticator(token, resource, metadataUrl);
    else if (options.oauth !== undefined) auth = await oauthAuthenticator(options.oauth, resource, metadataUrl);
  } catch (error) {
    await new Promise((done) => http.close(done));
    throw error;
  }

  const sessions = new Map<string, Session>();
  /** Every session from its initialize on (`sessions` has them once they have an id), for the caps. */
  const open = new Set<Session>();
  const budget = new RequestBudget();
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

  const openSession = async (principal: string | undefined): Promise<Session> => {
    const server = gateway.createServer(principal === undefined ? {} : { principal });
    let session: Session | undefined;
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => {
        if (session) sessions.set(id, session);
      },
    });
    const opened: Session = {
      transport,
      active: 0,
      lastActive: performance.now(),
      principal,
      close: async () => {
        const id = transport.sessionId;
        if (id !== undefined) sessions.delete(id);
        open.delete(opened);
        await server.close();
      },
    };
    session = opened;
    open.add(opened);
    transport.onclose = () => {
      const id = transport.sessionId;
      if (id !== undefined) sessions.delete(id);
      open.delete(opened);
    };
    await server.connect(transport);
    return opened;
  };

  /**
   * Makes room for one more session of `principal`: its session idle longest is closed when it has
   * `maxPerPrincipal` already. Says why not when every one of them is busy, or the gateway has `maxSessions`.
   */
  const roomForSession = async (principal: string | undefined): Promise<HttpRefusal | undefined> => {
    const mine = [...open].filter((session) => session.principal === principal);
    if (mine.length >= maxPerPrincipal) {
      const now = performance.now();
      const idle = mine
        .filter(
          (session) =>
            session.active === 0 &&
            session.transport.sessionId !== undefined &&
            now - session.lastActive >= SESSION_EVICTION_GRACE_MS,
        )
        .sort((a, b) => a.lastActive - b.lastActive)[0];
      if (idle === undefined) {
        return {
          status: 429,
          message: `Too busy: this client has ${maxPerPrincipal} sessions, none idle for ${SESSION_EVICTION_GRACE_MS / 1000} s; close one (DELETE) or try again in ${HTTP_RETRY_AFTER_S} s`,
        };
      }
      await idle.close().catch(() => {});
    }
    if (open.size >= maxSessions) {
      return {
        status: 503,
        message: `Too busy: the gateway has ${maxSessions} sessions open, the most it takes; try again in ${HTTP_RETRY_AFTER_S} s`,
      };
    }
    return undefined;
  };

  async function handle(req: IncomingMessage, res: ServerResponse) {
    const requestUrl = new URL(req.url ?? "/", "http://localhost");
    if (!allowedHosts.has(hostName(req.headers.host))) {
      return reply(res, 403, `Host ${JSON.stringify(req.headers.host ?? "")} is not allowed`);
    }
    // A web page on another site may not drive the gateway from the user's browser.
    const origin = header(req, "origin");
    if (origin !== undefined && !allowedHosts.has(originHost(origin))) {
      return reply(res, 403, `Origin ${JSON.stringify(origin)} is not allowed`);
    }
    if (requestUrl.pathname.startsWith(PROTECTED_RESOURCE_METADATA_PATH) && auth !== undefined) {
      if (req.method !== "GET" && req.method !== "HEAD") {
        res.setHeader("Allow", "GET, HEAD");
        return reply(res, 405, `Method ${req.method} is not allowed`);
      }
      const known = [PROTECTED_RESOURCE_METADATA_PATH, new URL(metadataUrl).pathname];
      if (!known.includes(requestUrl.pathname)) return reply(res, 404, "Not found");
      res.writeHead(200, { "content-type": "application/json", "cache-control": "max-age=3600" });
      res.end(JSON.stringify(auth.metadata()));
      return;
    }
    let principal: string | undefined;
    if (auth !== undefined) {
      const checked = await auth.check(header(req, "authorization"));
      if (!checked.ok) {
        res.setHeader("www-authenticate", checked.challenge);
        return reply(res, checked.status, checked.message);
      }
      principal = checked.principal.id;
    }
    if (requestUrl.pathname !== path) return reply(res, 404, `Not found: the MCP endpoint is ${path}`);
    if (req.method !== "POST" && req.method !== "GET" && req.method !== "DELETE") {
      res.setHeader("Allow", "GET, POST, DELETE");
      return reply(res, 405, `Method ${req.method} is not allowed`);
    }
    // The request holds its body's bytes, and its place among the requests in progress, until its response ends.
    const hold = budget.admit(principal);
    if (isRefusal(hold)) return refuse(req, res, hold);
    res.once("close", hold.release);
    const sessionId = header(req, "mcp-session-id");
    // A session answers only the principal that opened it: another token does not find it.
    const find = (id: string) => {
      const session = sessions.get(id);
      return session !== undefined && session.principal === principal ? session : undefined;
    };
    if (req.method === "POST") {
      const read = await readBody(req, hold);
      if ("refusal" in read) return refuse(req, res, read.refusal, read.id);
      let body: unknown;
      try {
        body = JSON.parse(read.text);
      } catch (error) {
        return reply(res, 400, `The request body is not JSON: ${(error as Error).message}`, -32700);
      }
      const id = requestIdOf(body);
      if (sessionId !== undefined) {
        const session = find(sessionId);
        if (session === undefined) return reply(res, 404, "Session not found: initialize a new session", -32001, id);
        return serve(session, req, res, body);
      }
      if (!isInitializeRequest(body)) {
        return reply(
          res,
          400,
          "No session: the first request must be initialize (without an Mcp-Session-Id)",
          -32000,
          id,
        );
      }
      const full = await roomForSession(principal);
      if (full !== undefined) return refuse(req, res, full, id ?? undefined);
      const session = await openSession(principal);
      await serve(session, req, res, body);
      // An initialize that failed leaves no session behind.
      if (session.transport.sessionId === undefined) await session.close();
      return;
    }
    if (sessionId === undefined) return reply(res, 400, "Missing Mcp-Session-Id header");
    const session = find(sessionId);
    if (session === undefined) return reply(res, 404, "Session not found", -32001);
    await serve(session, req, res);
    if (req.method === "DELETE") await session.close();
  }

  let closing: Promise<void> | undefined;
  return {
    url,
    port,
    metadataUrl,
    get sessions() {
      return sessions.size;
    },
    held: (principal) => budget.held(principal),
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

/**
 * The host names a request may name: the loopback names, the bound address (every address and the host name of this
 * machine for a wildcard address), and the public URL's host.
 */
function defaultAllowedHosts(host: string, publicUrl: URL | undefined): string[] {
  const names = new Set(["localhost", "127.0.0.1", "[::1]"]);
  if (publicUrl !== undefined) names.add(publicUrl.hostname.toLowerCase());
  if (host === "0.0.0.0" || host === "::" || host === "") {
    names.add(hostname().toLowerCase());
    for (const addresses of Object.values(networkInterfaces())) {
      for (const address of addresses ?? []) {
        if (address.family === "IPv4") names.add(address.address);
        else if (!address.address.includes("%")) names.add(`[${address.address.toLowerCase()}]`);
      }
    }
  } else names.add(hostName(host.includes(":") && !host.startsWith("[") ? `[${host}]` : host));
  return [...names];
}

function parsePublicUrl(value: unknown): URL {
  if (typeof value !== "string") throw new TypeError("publicUrl must be a URL");
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new TypeError(`publicUrl is not a valid URL: ${JSON.stringify(value)}`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") throw new TypeError("publicUrl must be an http(s) URL");
  if (url.search !== "" || url.hash !== "") throw new TypeError("publicUrl may not have a query or a fragment");
  return url;
}

function reply(res: ServerResponse, status: number, message: string, code = -32000, id: RequestId | null = null): void {
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify({ jsonrpc: "2.0", error: { code, message }, id }));
}

/**
 * Answers a request the gateway does not take: 413 as an invalid request, 429 and 503 with `Retry-After`. The rest
 * of a body left unread is dropped as it arrives, so that the client reads the answer and may send again on the same
 * connection; past the size cap, the connection closes instead.
 */
function refuse(
  req: IncomingMessage,
  res: ServerResponse,
  refusal: HttpRefusal,
  id: RequestId | undefined = undefined,
): void {
  if (refusal.status === 413) res.setHeader("connection", "close");
  else res.setHeader("retry-after", String(HTTP_RETRY_AFTER_S));
  reply(res, refusal.status, refusal.message, refusal.status === 413 ? -32600 : -32000, id ?? null);
  if (refusal.status !== 413) req.resume();
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

/**
 * Reads a request's body, each chunk held against the budget before it is kept (all of a declared length at its first
 * chunk). A body past a cap is refused as soon as that is known, with the id its first bytes carry, if any.
 */
function readBody(
  req: IncomingMessage,
  hold: RequestHold,
): Promise<{ text: string } | { refusal: HttpRefusal; id: RequestId | undefined }> {
  const declared = Number(req.headers["content-length"]);
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let held = 0;
    let head = "";
    const done = () => {
      req.off("data", onData);
      req.off("end", onEnd);
      req.off("error", onError);
    };
    const onData = (chunk: Buffer) => {
      if (head.length < END_BYTES) head += chunk.subarray(0, END_BYTES).toString("utf8");
      // A declared length is held whole at the first chunk: a body that cannot fit is refused before it is read.
      const wanted = Math.max(size + chunk.length, size === 0 && Number.isSafeInteger(declared) ? declared : 0);
      const refusal = wanted > held ? hold.grow(wanted - held) : undefined;
      if (refusal !== undefined) {
        done();
        resolve({ refusal, id: leadingId(head) });
        return;
      }
      held = Math.max(held, wanted);
      size += chunk.length;
      chunks.push(chunk);
    };
    const onEnd = () => {
      done();
      resolve({ text: Buffer.concat(chunks, size).toString("utf8") });
    };
    const onError = (error: Error) => {
      done();
      reject(error);
    };
    req.on("data", onData);
    req.once("end", onEnd);
    req.once("error", onError);
  });
}

/** The id of a request body that is one JSON-RPC request, for the error that answers it; null otherwise. */
function requestIdOf(body: unknown): RequestId | null {
  const id = (body as { id?: unknown } | null)?.id;
  return typeof id === "string" || Number.isSafeInteger(id) ? (id as RequestId) : null;
}
