/** Serving a gateway to MCP clients: over stdio (one client), or Streamable HTTP (a session per client). */
import { randomUUID } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { hostname, networkInterfaces } from "node:os";
import type { Readable, Writable } from "node:stream";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { isInitializeRequest } from "@modelcontextprotocol/sdk/types.js";
import { optionKeys, refuseUnknownOptions } from "../options.ts";
import {
  type Authenticator,
  OAUTH_KEYS,
  type OAuthResourceServerOptions,
  oauthAuthenticator,
  PROTECTED_RESOURCE_METADATA_PATH,
  sharedTokenAuthenticator,
} from "./auth.ts";
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
  const idleMs = options.sessionIdleMs ?? DEFAULT_SESSION_IDLE_MS;
  if (typeof idleMs !== "number" || !(idleMs > 0)) {
    throw new RangeError(`sessionIdleMs must be a positive number of ms (or Infinity), got ${String(idleMs)}`);
  }
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
    session = {
      transport,
      active: 0,
      lastActive: performance.now(),
      principal,
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
    const sessionId = header(req, "mcp-session-id");
    // A session answers only the principal that opened it: another token does not find it.
    const find = (id: string) => {
      const session = sessions.get(id);
      return session !== undefined && session.principal === principal ? session : undefined;
    };
    if (req.method === "POST") {
      let body: unknown;
      try {
        body = JSON.parse(await readBody(req));
      } catch (error) {
        return reply(res, 400, `The request body is not JSON: ${(error as Error).message}`, -32700);
      }
      if (sessionId !== undefined) {
        const session = find(sessionId);
        if (session === undefined) return reply(res, 404, "Session not found: initialize a new session", -32001);
        return serve(session, req, res, body);
      }
      if (!isInitializeRequest(body)) {
        return reply(res, 400, "No session: the first request must be initialize (without an Mcp-Session-Id)");
      }
      const session = await openSession(principal);
      await serve(session, req, res, body);
      // An initialize that failed leaves no session behind.
      if (session.transport.sessionId === undefined) await session.close();
      return;
    }
    if (req.method === "GET" || req.method === "DELETE") {
      if (sessionId === undefined) return reply(res, 400, "Missing Mcp-Session-Id header");
      const session = find(sessionId);
      if (session === undefined) return reply(res, 404, "Session not found", -32001);
      await serve(session, req, res);
      if (req.method === "DELETE") await session.close();
      return;
    }
    res.setHeader("Allow", "GET, POST, DELETE");
    return reply(res, 405, `Method ${req.method} is not allowed`);
  }

  let closing: Promise<void> | undefined;
  return {
    url,
    port,
    metadataUrl,
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
