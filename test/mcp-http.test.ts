/**
 * The gateway over HTTP where others can reach it: the protected-resource metadata (RFC 9728) and its challenges,
 * OAuth 2.1 resource-server mode against a local authorization server started here (its keys generated here, tokens
 * signed with jose), a client's token never reaching upstream servers, DNS-rebinding protection on a wildcard
 * address, and sessions that expire with their stores.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { networkInterfaces } from "node:os";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { McpGateway, serveGatewayHttp } from "airlock-codemode/mcp";
import { type JWTPayload, UnsecuredJWT } from "jose";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type AuthorizationServer, startAuthorizationServer } from "./fixtures/mcp/authorization-server.ts";
import { type HttpUpstream, startHttpUpstream } from "./fixtures/mcp/http-upstream.ts";
import { paged, REPO_ROOT, tempFolder, waitFor } from "./fixtures/mcp/servers.ts";

const CLI = join(REPO_ROOT, "dist", "cli", "main.js");

function textOf(result: unknown): string {
  return (result as CallToolResult).content
    .filter((block) => block.type === "text")
    .map((block) => (block as { text: string }).text)
    .join("\n");
}

const INITIALIZE = {
  jsonrpc: "2.0",
  id: 1,
  method: "initialize",
  params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "raw", version: "1" } },
};

function post(url: string, body: unknown, headers: Record<string, string> = {}) {
  return fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", accept: "application/json, text/event-stream", ...headers },
    body: JSON.stringify(body),
  });
}

let upstream: HttpUpstream;
let gateway: McpGateway;

beforeAll(async () => {
  upstream = await startHttpUpstream();
  gateway = await McpGateway.start(
    { mcpServers: { web: { url: upstream.url, headers: { Authorization: "Bearer upstream-own-token" } } } },
    { poolSize: 1 },
  );
});

afterAll(async () => {
  await gateway?.close();
  await upstream?.close();
});

describe("the protected-resource metadata", () => {
  it("is served without a token, and a request without one is told where it is", async () => {
    const serving = await serveGatewayHttp(gateway, { port: 0, bearerToken: "shared-Token_1" });
    try {
      expect(serving.metadataUrl).toBe(serving.url.replace("/mcp", "/.well-known/oauth-protected-resource/mcp"));
      for (const path of [serving.metadataUrl, serving.url.replace("/mcp", "/.well-known/oauth-protected-resource")]) {
        const response = await fetch(path);
        expect([path, response.status]).toEqual([path, 200]);
        expect(await response.json()).toEqual({
          resource: serving.url,
          bearer_methods_supported: ["header"],
          resource_name: "Airlock gateway",
        });
      }
      const denied = await post(serving.url, INITIALIZE);
      expect(denied.status).toBe(401);
      expect(denied.headers.get("www-authenticate")).toBe(
        `Bearer realm="airlock", resource_metadata="${serving.metadataUrl}"`,
      );
      const wrong = await post(serving.url, INITIALIZE, { authorization: "Bearer not-it" });
      expect(wrong.headers.get("www-authenticate")).toContain('error="invalid_token"');
      // Without a token to require, there is no protected resource to describe.
      const open = await serveGatewayHttp(gateway, { port: 0 });
      expect((await fetch(open.metadataUrl)).status).toBe(404);
      await open.close();
    } finally {
      await serving.close();
    }
  });
});

describe("OAuth resource-server mode", () => {
  let as: AuthorizationServer;
  let serving: Awaited<ReturnType<typeof serveGatewayHttp>>;

  beforeAll(async () => {
    as = await startAuthorizationServer();
    serving = await serveGatewayHttp(gateway, {
      port: 0,
      oauth: { issuer: as.issuer, requiredScopes: ["mcp:tools"] },
    });
  });

  afterAll(async () => {
    await serving?.close();
    await as?.close();
  });

  const good = (claims: JWTPayload = {}) =>
    as.sign({ iss: as.issuer, aud: serving.url, sub: "alice", scope: "mcp:tools profile", ...claims });

  it("names the authorization server and the scopes in its metadata and challenges", async () => {
    expect(await (await fetch(serving.metadataUrl)).json()).toEqual({
      resource: serving.url,
      authorization_servers: [as.issuer],
      bearer_methods_supported: ["header"],
      scopes_supported: ["mcp:tools"],
      resource_name: "Airlock gateway",
    });
    const denied = await post(serving.url, INITIALIZE);
    expect(denied.status).toBe(401);
    expect(denied.headers.get("www-authenticate")).toBe(
      `Bearer resource_metadata="${serving.metadataUrl}", scope="mcp:tools"`,
    );
  });

  it("serves a client whose token the authorization server signed for this gateway, and passes it on to no one", async () => {
    const token = await good();
    const client = new Client({ name: "oauth-test", version: "1.0.0" });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(serving.url), {
        requestInit: { headers: { authorization: `Bearer ${token}` } },
      }),
    );
    try {
      const before = upstream.authorizations.length;
      const run = await client.callTool({ name: "execute", arguments: { code: "return await tools.web__echo({})" } });
      expect(textOf(run)).toBe("echo");
      const seen = upstream.authorizations.slice(before);
      expect(seen.length).toBeGreaterThan(0);
      // The upstream server got the header of its own config, never the client's token.
      expect(new Set(seen)).toEqual(new Set(["Bearer upstream-own-token"]));
    } finally {
      await client.close();
    }
  });

  it("refuses a token that is expired, for another audience, from another issuer, signed by another key, or unsigned", async () => {
    const cases: [string, Promise<string> | string, RegExp][] = [
      [
        "expired",
        as.sign(
          { iss: as.issuer, aud: serving.url, scope: "mcp:tools" },
          { expiresIn: Math.floor(Date.now() / 1000) - 120 },
        ),
        /the token has expired/,
      ],
      ["audience", good({ aud: "https://other.example/mcp" }), /the token is not for this gateway \(its audience\)/],
      ["issuer", good({ iss: "https://other-issuer.example" }), /not issued by the gateway's authorization server/],
      [
        "key",
        as.sign({ iss: as.issuer, aud: serving.url, scope: "mcp:tools" }, { key: "other" }),
        /not signed by a key of the authorization server/,
      ],
      [
        "unsigned",
        new UnsecuredJWT({ iss: as.issuer, aud: serving.url, scope: "mcp:tools" }).setExpirationTime("5m").encode(),
        /algorithm the gateway does not accept/,
      ],
      ["not a JWT", "opaque-token-value", /not a valid access token/],
    ];
    const sessions = serving.sessions;
    for (const [what, token, reason] of cases) {
      const response = await post(serving.url, INITIALIZE, { authorization: `Bearer ${await token}` });
      expect([what, response.status]).toEqual([what, 401]);
      const challenge = response.headers.get("www-authenticate") ?? "";
      expect([what, challenge]).toEqual([what, expect.stringContaining('error="invalid_token"')]);
      expect([what, challenge]).toEqual([what, expect.stringMatching(reason)]);
      expect(challenge).toContain(`resource_metadata="${serving.metadataUrl}"`);
    }
    expect(serving.sessions).toBe(sessions);
  });

  it("answers 403 insufficient_scope to a token without the required scope", async () => {
    const response = await post(serving.url, INITIALIZE, {
      authorization: `Bearer ${await good({ scope: "profile" })}`,
    });
    expect(response.status).toBe(403);
    expect(response.headers.get("www-authenticate")).toBe(
      `Bearer resource_metadata="${serving.metadataUrl}", scope="mcp:tools", error="insufficient_scope", error_description="the token lacks the scope mcp:tools"`,
    );
  });

  it("keeps a session to the subject that opened it", async () => {
    const alice = await good();
    const init = await post(serving.url, INITIALIZE, { authorization: `Bearer ${alice}` });
    expect(init.status).toBe(200);
    await init.text();
    const session = init.headers.get("mcp-session-id") ?? "";
    const list = { jsonrpc: "2.0", id: 2, method: "tools/list" };
    const headers = (token: string) => ({
      authorization: `Bearer ${token}`,
      "mcp-session-id": session,
      "mcp-protocol-version": "2025-06-18",
    });
    const mallory = await post(serving.url, list, headers(await good({ sub: "mallory" })));
    expect(mallory.status).toBe(404);
    // A JSON-RPC error that answers the request by its id.
    expect(await mallory.json()).toEqual({
      jsonrpc: "2.0",
      id: 2,
      error: { code: -32001, message: "Session not found: initialize a new session" },
    });
    const again = await post(serving.url, list, headers(alice));
    expect(again.status).toBe(200);
    await again.text();
  });

  it("refuses a token that names no subject: two clients' tokens without sub would share one principal", async () => {
    const sessions = serving.sessions;
    // Two clients of one issuer, each with a valid token for this gateway, told apart only by their client ids.
    const tokens = [
      ["client A", await as.sign({ iss: as.issuer, aud: serving.url, client_id: "a", scope: "mcp:tools" })],
      ["client B", await as.sign({ iss: as.issuer, aud: serving.url, client_id: "b", scope: "mcp:tools" })],
      ["an empty sub", await good({ sub: "" })],
      ["a sub that is not a string", await good({ sub: 7 as unknown as string })],
    ] as const;
    for (const [what, token] of tokens) {
      const response = await post(serving.url, INITIALIZE, { authorization: `Bearer ${token}` });
      expect([what, response.status]).toEqual([what, 401]);
      expect([what, response.headers.get("www-authenticate")]).toEqual([
        what,
        expect.stringContaining(
          'error="invalid_token", error_description="the token names no subject (its sub claim)"',
        ),
      ]);
      expect(await response.json()).toMatchObject({
        error: { message: "Unauthorized: the token names no subject (its sub claim)" },
      });
    }
    expect(serving.sessions).toBe(sessions);
  });

  it("refuses to start with an issuer whose metadata names another issuer", async () => {
    const liar = await startAuthorizationServer("https://someone-else.example");
    try {
      await expect(serveGatewayHttp(gateway, { port: 0, oauth: { issuer: liar.issuer } })).rejects.toThrow(
        `names the issuer "https://someone-else.example", not "${liar.issuer}"`,
      );
      await expect(
        serveGatewayHttp(gateway, { port: 0, oauth: { issuer: liar.issuer, algorithms: ["HS256"] } }),
      ).rejects.toThrow(/may not hold HS\* or none/);
      await expect(
        serveGatewayHttp(gateway, { port: 0, oauth: { issuer: "http://auth.example.com" } }),
      ).rejects.toThrow(/oauth.issuer must be an https URL \(http only on a loopback address\)/);
    } finally {
      await liar.close();
    }
  });

  it("is what airlock serve --oauth-issuer serves", async () => {
    const folder = tempFolder({ "mcp.json": JSON.stringify({ mcpServers: { data: paged("--tools", "1") } }) });
    const child: ChildProcess = spawn(
      process.execPath,
      [CLI, "serve", "--config", "mcp.json", "--http", "0", "--oauth-issuer", as.issuer, "--oauth-scopes", "mcp:tools"],
      { cwd: folder.dir, stdio: ["ignore", "ignore", "pipe"] },
    );
    let log = "";
    child.stderr?.on("data", (chunk) => {
      log += chunk;
    });
    try {
      await waitFor(
        () => /listening on \S+ \(OAuth/.test(log) || child.exitCode !== null,
        30_000,
        "the gateway to listen",
      ).catch((error: Error) => {
        throw new Error(`${error.message}; it wrote:\n${log}`);
      });
      expect(log, log).toContain(`(OAuth access tokens of ${as.issuer} required)`);
      const url = /listening on (\S+)/.exec(log)?.[1] ?? "";
      expect((await post(url, INITIALIZE)).status).toBe(401);
      const token = await as.sign({ iss: as.issuer, aud: url, sub: "cli", scope: "mcp:tools" });
      expect((await post(url, INITIALIZE, { authorization: `Bearer ${token}` })).status).toBe(200);
    } finally {
      if (child.exitCode === null) {
        const exited = new Promise((resolve) => child.once("exit", resolve));
        child.kill("SIGTERM");
        await exited;
      }
      folder.cleanup();
    }
  });
});

describe("DNS rebinding", () => {
  it("stays on when the gateway is bound to every address", async () => {
    const serving = await serveGatewayHttp(gateway, { port: 0, host: "0.0.0.0", bearerToken: "t0ken" });
    const port = serving.port;
    const address = Object.values(networkInterfaces())
      .flat()
      .find((a) => a?.family === "IPv4" && !a.internal)?.address;
    const status = async (host: string) => {
      // fetch() sets Host from the URL: ask 127.0.0.1 while naming another host needs a raw request.
      const { request } = await import("node:http");
      return new Promise<number>((resolve, reject) => {
        const req = request({ host: "127.0.0.1", port, path: "/mcp", method: "POST", headers: { host } }, (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        });
        req.once("error", reject);
        req.end("{}");
      });
    };
    try {
      expect(await status("evil.example")).toBe(403);
      expect(await status(`evil.example:${port}`)).toBe(403);
      // This machine's names pass the check (and then need the token).
      expect(await status(`127.0.0.1:${port}`)).toBe(401);
      expect(await status(`localhost:${port}`)).toBe(401);
      if (address !== undefined) expect(await status(`${address}:${port}`)).toBe(401);
      const foreign = await fetch(serving.url.replace("0.0.0.0", "127.0.0.1"), {
        method: "POST",
        headers: { origin: "https://evil.example" },
        body: "{}",
      });
      expect(foreign.status).toBe(403);
    } finally {
      await serving.close();
    }
    // Names given are allowed besides this machine's.
    const named = await serveGatewayHttp(gateway, { port: 0, host: "0.0.0.0", allowedHosts: ["gateway.internal"] });
    try {
      const { request } = await import("node:http");
      const code = await new Promise<number>((resolve) => {
        const req = request(
          { host: "127.0.0.1", port: named.port, path: "/mcp", method: "GET", headers: { host: "gateway.internal" } },
          (res) => {
            res.resume();
            resolve(res.statusCode ?? 0);
          },
        );
        req.end();
      });
      expect(code).toBe(400);
    } finally {
      await named.close();
    }
  });
});

describe("sessions", () => {
  it("expire after their idle time, and their stores with them", async () => {
    const serving = await serveGatewayHttp(gateway, { port: 0, sessionIdleMs: 300 });
    const sessionsBefore = gateway.sessionCount;
    const client = new Client({ name: "idle-test", version: "1.0.0" });
    const transport = new StreamableHTTPClientTransport(new URL(serving.url));
    await client.connect(transport);
    try {
      await client.callTool({ name: "execute", arguments: { code: 'store("kept", 42); return load("kept")' } });
      expect(gateway.sessionCount).toBe(sessionsBefore + 1);
      // The SDK client keeps a GET stream open, which keeps a session: close it, as a client that went away.
      await transport.close();
      await waitFor(() => serving.sessions === 0, 10_000, "the idle session to close");
      // Its MCP server, and the store it held, are gone from the gateway.
      await waitFor(() => gateway.sessionCount === sessionsBefore, 5_000, "the session's server to close");
      const next = new Client({ name: "idle-test-2", version: "1.0.0" });
      await next.connect(new StreamableHTTPClientTransport(new URL(serving.url)));
      const loaded = await next.callTool({ name: "execute", arguments: { code: 'return load("kept") ?? "gone"' } });
      expect(textOf(loaded)).toBe("gone");
      await next.close();
    } finally {
      await serving.close();
    }
  });
});
