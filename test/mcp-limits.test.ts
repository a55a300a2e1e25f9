import { readFileSync, writeFileSync } from "node:fs";
import { type ClientRequest, request } from "node:http";
import { join } from "node:path";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import {
  DEFAULT_MAX_SESSIONS_PER_PRINCIPAL,
  MAX_HTTP_BODY_BYTES,
  MAX_HTTP_BODY_BYTES_PER_PRINCIPAL,
  MAX_HTTP_BODY_BYTES_TOTAL,
  MAX_HTTP_REQUESTS_PER_PRINCIPAL,
  MAX_HTTP_REQUESTS_TOTAL,
  MAX_UPSTREAM_LIST_BYTES,
  MAX_UPSTREAM_MESSAGE_BYTES,
  MAX_UPSTREAM_OWED_ANSWERS,
  MAX_UPSTREAM_TOOLS,
  McpGateway,
  SESSION_EVICTION_GRACE_MS,
  serveGatewayHttp,
} from "airlock-codemode/mcp";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HTTP_RETRY_AFTER_S } from "../dist/gateway/http-limits.js";
import { type AuthorizationServer, startAuthorizationServer } from "./fixtures/mcp/authorization-server.ts";
import { ENDLESS_BYTES, type HttpUpstream, startHttpUpstream } from "./fixtures/mcp/http-upstream.ts";
import { paged, tempFolder, waitFor } from "./fixtures/mcp/servers.ts";
import { serveHttpCli } from "./helpers/cli.ts";

const MiB = 1024 * 1024;
const PROTOCOL = "2025-06-18";
const INITIALIZE = {
  jsonrpc: "2.0",
  id: 1,
  method: "initialize",
  params: { protocolVersion: PROTOCOL, capabilities: {}, clientInfo: { name: "limits-test", version: "1" } },
};
/** A program that fills its session's store to the most it may hold (`MAX_STORE_TOTAL_CHARS`, 1 MiB of JSON). */
const FILL_STORE = 'for (let i = 0; i < 4; i++) store("k" + i, "x".repeat(250000)); return "filled";';

/** A full collection of this process's heap (V8's own, as the engine reaches it). */
const collect = (() => {
  setFlagsFromString("--expose-gc");
  return runInNewContext("gc") as () => void;
})();

/** Live heap of this process after full collections, in bytes. */
async function liveHeap(): Promise<number> {
  for (let i = 0; i < 3; i++) {
    collect();
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return process.memoryUsage().heapUsed;
}

/** Resident and peak resident memory of a process (Linux /proc), in bytes. */
function memoryOf(pid: number): { rss: number; peak: number } {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const kb = (field: string) => Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(status)?.[1]) * 1024;
  return { rss: kb("VmRSS"), peak: kb("VmHWM") };
}

interface Raw {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

/** A POST with a raw client (node:http), its body declared at `bytes` and left to the caller to write; its answer. */
function openPost(url: string, bytes: number, headers: Record<string, string>) {
  const target = new URL(url);
  let req: ClientRequest | undefined;
  const answer = new Promise<Raw>((resolve, reject) => {
    req = request(
      {
        host: target.hostname,
        port: target.port,
        path: target.pathname,
        method: "POST",
        headers: {
          "content-type": "application/json",
          accept: "application/json, text/event-stream",
          "content-length": String(bytes),
          ...headers,
        },
      },
      (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => {
          text += chunk;
        });
        res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text }));
      },
    );
    req.once("error", reject);
  });
  return { req: req as unknown as ClientRequest, answer };
}

/** One POST whose body is sent whole, as given; its answer. */
function rawPost(url: string, body: Buffer | string, headers: Record<string, string> = {}): Promise<Raw> {
  const bytes = typeof body === "string" ? Buffer.from(body) : body;
  const { req, answer } = openPost(url, bytes.length, headers);
  req.end(bytes);
  return answer;
}

/** The JSON-RPC message of an answer, whether it came as JSON or as one server-sent event. */
function messageOf(raw: Raw): { id?: unknown; result?: unknown; error?: { code: number; message: string } } {
  const data = raw.body.startsWith("{") ? raw.body : /^data: (.*)$/m.exec(raw.body)?.[1];
  return JSON.parse(data ?? "null");
}

/** A session opened with raw requests (no GET stream, as a client that went away), and a request in it. */
async function rawSession(url: string, headers: Record<string, string> = {}) {
  const init = await rawPost(url, JSON.stringify(INITIALIZE), headers);
  const id = init.headers["mcp-session-id"] as string | undefined;
  const inSession = { ...headers, "mcp-session-id": id ?? "", "mcp-protocol-version": PROTOCOL };
  if (id !== undefined) {
    await rawPost(url, JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" }), inSession);
  }
  return {
    init,
    id,
    call: (id: number, method: string, params: unknown = {}) =>
      rawPost(url, JSON.stringify({ jsonrpc: "2.0", id, method, params }), inSession),
    execute: (code: string) =>
      rawPost(
        url,
        JSON.stringify({
          jsonrpc: "2.0",
          id: 2,
          method: "tools/call",
          params: { name: "execute", arguments: { code } },
        }),
        inSession,
      ),
  };
}

function textOf(result: unknown): string {
  return (result as CallToolResult).content
    .filter((block) => block.type === "text")
    .map((block) => (block as { text: string }).text)
    .join("\n");
}

async function sdkClient(url: string, token?: string): Promise<Client> {
  const client = new Client({ name: "limits-neighbour", version: "1.0.0" });
  await client.connect(
    new StreamableHTTPClientTransport(
      new URL(url),
      token === undefined ? {} : { requestInit: { headers: { authorization: `Bearer ${token}` } } },
    ),
  );
  return client;
}

interface ChildGateway {
  url: string;
  pid: number;
  stop(): Promise<void>;
}

/** `airlock serve --http 0` from its build, with `config`, until `stop()`. */
async function serveChild(config: unknown, flags: string[] = []): Promise<ChildGateway> {
  const folder = tempFolder();
  const file = join(folder.dir, "mcp.json");
  writeFileSync(file, JSON.stringify(config));
  const serving = await serveHttpCli(file, flags);
  expect(serving.url, serving.log()).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/mcp$/);
  return {
    url: serving.url,
    pid: serving.pid,
    async stop() {
      await serving.stop();
      folder.cleanup();
    },
  };
}

describe("request bodies", () => {
  let gateway: ChildGateway;
  let url = "";

  beforeAll(async () => {
    gateway = await serveChild({ mcpServers: { paged: paged("--tools", "2") } });
    url = gateway.url;
  }, 90_000);

  afterAll(() => gateway?.stop());

  it("takes at most a principal's share of 32 bodies of 30 MiB sent at once, refusing the rest with 429, while another client is served", async () => {
    const pid = gateway.pid;
    const neighbour = await sdkClient(url);
    try {
      expect(textOf(await neighbour.callTool({ name: "execute", arguments: { code: "return 6 * 7" } }))).toBe("42");
      const before = memoryOf(pid);
      // An initialize that carries 30 MiB besides its parameters, its id first as clients write it.
      const body = Buffer.from(
        JSON.stringify({ ...INITIALIZE, id: "flood", params: { ...INITIALIZE.params, pad: "x".repeat(30 * MiB) } }),
      );
      const flood = Promise.all(Array.from({ length: 32 }, () => rawPost(url, body)));
      // Served while the flood is read: its bodies hold the principal's share, and a small request still fits.
      const during = await neighbour.callTool({ name: "execute", arguments: { code: "return 6 * 7" } });
      expect(textOf(during)).toBe("42");
      const answers = await flood;
      const refused = answers.filter((answer) => answer.status === 429);
      // 960 MiB were sent: the gateway held at most its cap's worth, read and parsed (about three times the bytes).
      const after = memoryOf(pid);
      const grew = after.peak - before.rss;
      expect(grew, `${refused.length} refused; RSS ${before.rss} before, peak ${after.peak}`).toBeLessThan(400 * MiB);
      // Each taken body was answered (an initialize), and its share let go, before later ones arrived or not.
      expect(answers.every((answer) => answer.status === 200 || answer.status === 429)).toBe(true);
      expect(refused.length).toBeGreaterThan(0);
      for (const answer of refused) {
        expect(answer.headers["retry-after"]).toBe(String(HTTP_RETRY_AFTER_S));
        expect(messageOf(answer)).toEqual({
          jsonrpc: "2.0",
          id: "flood",
          error: {
            code: -32000,
            message: `Too busy: this client's requests in progress hold ${MAX_HTTP_BODY_BYTES_PER_PRINCIPAL} bytes of bodies, the most they may; try again in ${HTTP_RETRY_AFTER_S} s`,
          },
        });
      }
      expect(textOf(await neighbour.callTool({ name: "execute", arguments: { code: "return 6 * 7" } }))).toBe("42");
    } finally {
      await neighbour.close();
    }
  }, 120_000);

  it("refuses a body past the size cap with 413, by its declared length, before reading it", async () => {
    const body = Buffer.from(
      JSON.stringify({ jsonrpc: "2.0", id: 9, method: "tools/list", pad: "x".repeat(MAX_HTTP_BODY_BYTES) }),
    );
    const answer = await rawPost(url, body);
    expect(answer.status).toBe(413);
    expect(answer.headers.connection).toBe("close");
    expect(messageOf(answer)).toEqual({
      jsonrpc: "2.0",
      id: 9,
      error: {
        code: -32600,
        message: `The request body is larger than ${MAX_HTTP_BODY_BYTES} bytes, the most the gateway takes`,
      },
    });
  }, 60_000);
});

describe("several principals", () => {
  let as: AuthorizationServer;
  let gateway: McpGateway;
  let serving: Awaited<ReturnType<typeof serveGatewayHttp>>;

  beforeAll(async () => {
    as = await startAuthorizationServer();
    gateway = await McpGateway.start({ mcpServers: { paged: paged("--tools", "2") } }, { poolSize: 1 });
    serving = await serveGatewayHttp(gateway, { port: 0, oauth: { issuer: as.issuer } });
  });

  afterAll(async () => {
    await serving?.close();
    await gateway?.close();
    await as?.close();
  });

  const token = (sub: string) => as.sign({ iss: as.issuer, aud: serving.url, sub });

  /**
   * A POST whose body is declared at `bytes` and of which only the first KiB is sent: its answer, if the gateway
   * refuses it at once, and `abort` to go away.
   */
  function slowPost(bytes: number, headers: Record<string, string>) {
    const { req, answer } = openPost(serving.url, bytes, headers);
    // Going away later fails the answer of a request that was taken: nothing waits for it then.
    answer.catch(() => {});
    req.write(`{"jsonrpc":"2.0","id":"slow","method":"initialize",${" ".repeat(1000)}`);
    return { answer, abort: () => req.destroy() };
  }

  it("gives each principal its share and all of them the total, refusing past them with 429 and 503, while a quiet principal is served", async () => {
    const size = 30 * MiB;
    const perPrincipal = Math.floor(MAX_HTTP_BODY_BYTES_PER_PRINCIPAL / size);
    const total = Math.floor(MAX_HTTP_BODY_BYTES_TOTAL / size);
    const slow: ReturnType<typeof slowPost>[] = [];
    const outcomes: string[] = [];
    try {
      for (const subject of ["a", "b", "c"]) {
        const authorization = `Bearer ${await token(subject)}`;
        for (let i = 0; i <= perPrincipal; i++) {
          const heldBefore = serving.held().bodyBytes;
          const post = slowPost(size, { authorization });
          slow.push(post);
          // Held whole from its first chunk, or refused at once.
          const outcome = await Promise.race([
            post.answer.then((raw) => {
              expect(raw.headers["retry-after"]).toBe(String(HTTP_RETRY_AFTER_S));
              expect(messageOf(raw)).toMatchObject({ id: "slow", error: { code: -32000 } });
              return String(raw.status);
            }),
            waitFor(() => serving.held().bodyBytes === heldBefore + size, 30_000, "the body to be held").then(
              () => "held",
            ),
          ]);
          outcomes.push(`${subject}: ${outcome}`);
        }
      }
      // Two bodies of each principal's share are held, the third refused (429); past the total, all are (503).
      expect(perPrincipal).toBe(2);
      expect(total).toBe(4);
      expect(outcomes).toEqual([
        "a: held",
        "a: held",
        "a: 429",
        "b: held",
        "b: held",
        "b: 429",
        "c: 503",
        "c: 503",
        "c: 503",
      ]);
      expect(serving.held().bodyBytes).toBe(total * size);
      // Another principal's request, small, still fits.
      const quiet = await sdkClient(serving.url, await token("quiet"));
      try {
        expect(textOf(await quiet.callTool({ name: "execute", arguments: { code: "return 6 * 7" } }))).toBe("42");
      } finally {
        await quiet.close();
      }
    } finally {
      for (const post of slow) post.abort();
    }
    // A client that goes away lets go of what it held.
    await waitFor(() => serving.held().bodyBytes === 0, 10_000, "the bodies to be let go");
  }, 120_000);
  it("counts requests in progress: past a principal's cap 429, past the gateway's 503, and lets go of them as they end", async () => {
    const slow: ReturnType<typeof slowPost>[] = [];
    try {
      const principals = MAX_HTTP_REQUESTS_TOTAL / MAX_HTTP_REQUESTS_PER_PRINCIPAL;
      const tokens = await Promise.all(Array.from({ length: principals + 1 }, (_, i) => token(`busy-${i}`)));
      for (const t of tokens.slice(0, principals)) {
        for (let i = 0; i < MAX_HTTP_REQUESTS_PER_PRINCIPAL; i++)
          slow.push(slowPost(4096, { authorization: `Bearer ${t}` }));
      }
      await waitFor(() => serving.held().requests === MAX_HTTP_REQUESTS_TOTAL, 60_000, "every request to be taken");
      const more = slowPost(4096, { authorization: `Bearer ${tokens[0]}` });
      const other = slowPost(4096, { authorization: `Bearer ${tokens[principals]}` });
      slow.push(more, other);
      const [mine, theirs] = await Promise.all([more.answer, other.answer]);
      expect([mine.status, theirs.status]).toEqual([429, 503]);
      expect(messageOf(mine).error?.message).toBe(
        `Too busy: this client has ${MAX_HTTP_REQUESTS_PER_PRINCIPAL} requests in progress, the most it may; try again in ${HTTP_RETRY_AFTER_S} s`,
      );
      expect(messageOf(theirs).error?.message).toBe(
        `Too busy: the gateway has ${MAX_HTTP_REQUESTS_TOTAL} requests in progress, the most it takes; try again in ${HTTP_RETRY_AFTER_S} s`,
      );
    } finally {
      for (const post of slow) post.abort();
    }
    await waitFor(() => serving.held().requests === 0, 30_000, "the requests to be let go");
  }, 120_000);

  it("closes no busy session to open another: past a principal's cap 429, past the gateway's 503, another principal served", async () => {
    const small = await serveGatewayHttp(gateway, {
      port: 0,
      oauth: { issuer: as.issuer },
      maxSessionsPerPrincipal: 2,
      maxSessions: 3,
    });
    const clients: Client[] = [];
    try {
      const tokenFor = (sub: string) => as.sign({ iss: as.issuer, aud: small.url, sub });
      const alice = await tokenFor("alice");
      // Two sessions, each with its GET stream open as the SDK's client keeps one: neither is idle.
      for (let i = 0; i < 2; i++) clients.push(await sdkClient(small.url, alice));
      await waitFor(() => small.held(`${as.issuer}|alice`).requests === 2, 10_000, "both GET streams");
      const third = await rawPost(small.url, JSON.stringify(INITIALIZE), { authorization: `Bearer ${alice}` });
      expect(third.status).toBe(429);
      expect(third.headers["retry-after"]).toBe(String(HTTP_RETRY_AFTER_S));
      expect(messageOf(third)).toEqual({
        jsonrpc: "2.0",
        id: 1,
        error: {
          code: -32000,
          message: `Too busy: this client has 2 sessions, none idle for ${SESSION_EVICTION_GRACE_MS / 1000} s; close one (DELETE) or try again in ${HTTP_RETRY_AFTER_S} s`,
        },
      });
      // Another principal is not held to alice's cap, only to the gateway's.
      const bob = await tokenFor("bob");
      clients.push(await sdkClient(small.url, bob));
      expect(textOf(await clients[2]?.callTool({ name: "execute", arguments: { code: "return 6 * 7" } }))).toBe("42");
      const fourth = await rawPost(small.url, JSON.stringify({ ...INITIALIZE, id: "b2" }), {
        authorization: `Bearer ${bob}`,
      });
      expect(fourth.status).toBe(503);
      expect(fourth.headers["retry-after"]).toBe(String(HTTP_RETRY_AFTER_S));
      expect(messageOf(fourth)).toMatchObject({
        id: "b2",
        error: { message: expect.stringMatching(/has 3 sessions open/) },
      });
      expect(small.sessions).toBe(3);
      // The sessions that were open serve on.
      for (const client of clients) {
        expect(textOf(await client.callTool({ name: "execute", arguments: { code: "return 1 + 1" } }))).toBe("2");
      }
    } finally {
      await Promise.all(clients.map((client) => client.close()));
      await small.close();
    }
  }, 60_000);

  it("refuses session caps that are not positive integers", async () => {
    for (const [option, value] of [
      ["maxSessions", 0],
      ["maxSessionsPerPrincipal", 1.5],
      ["maxSessions", Number.POSITIVE_INFINITY],
    ] as const) {
      await expect(serveGatewayHttp(gateway, { port: 0, [option]: value })).rejects.toThrow(
        `${option} must be a positive integer, got ${value}`,
      );
    }
  });
});

describe("sessions", () => {
  let gateway: McpGateway;
  let serving: Awaited<ReturnType<typeof serveGatewayHttp>>;

  beforeAll(async () => {
    gateway = await McpGateway.start({ mcpServers: { paged: paged("--tools", "2") } }, { poolSize: 1 });
    serving = await serveGatewayHttp(gateway, { port: 0 });
  });

  afterAll(async () => {
    await serving?.close();
    await gateway?.close();
  });

  it("keeps at most its cap of one principal's sessions with full stores: of 128 opened, the idle longest are closed", async () => {
    const before = await liveHeap();
    const rssBefore = process.memoryUsage().rss;
    const opened: Awaited<ReturnType<typeof rawSession>>[] = [];
    for (let round = 0; round < 4; round++) {
      // Sessions used in the last seconds are not closed for a new one: the previous round's are idle past that now.
      if (round > 0) await new Promise((resolve) => setTimeout(resolve, SESSION_EVICTION_GRACE_MS + 500));
      for (let batch = 0; batch < DEFAULT_MAX_SESSIONS_PER_PRINCIPAL / 8; batch++) {
        const sessions = await Promise.all(Array.from({ length: 8 }, () => rawSession(serving.url)));
        for (const session of sessions) {
          expect(session.init.status).toBe(200);
          expect(textOf(messageOf(await session.execute(FILL_STORE)).result)).toBe("filled");
        }
        opened.push(...sessions);
        expect(serving.sessions).toBeLessThanOrEqual(DEFAULT_MAX_SESSIONS_PER_PRINCIPAL);
      }
    }
    const held = (await liveHeap()) - before;
    const rss = process.memoryUsage().rss - rssBefore;
    // 128 sessions with a full store each held 128 MiB and more; the cap's 32 hold about a quarter of that.
    expect(held, `heap held ${held} bytes, RSS grew ${rss} bytes`).toBeLessThan(64 * MiB);
    expect(serving.sessions).toBe(DEFAULT_MAX_SESSIONS_PER_PRINCIPAL);
    // The latest are kept; the first ones' clients are told to initialize again.
    expect((await opened.at(-1)?.call(3, "tools/list"))?.status).toBe(200);
    expect((await opened[0]?.call(3, "tools/list"))?.status).toBe(404);
  }, 180_000);
});

describe("upstream answers", () => {
  let upstream: HttpUpstream;
  let gateway: ChildGateway;

  beforeAll(async () => {
    upstream = await startHttpUpstream();
    gateway = await serveChild({
      mcpServers: { web: { url: upstream.url }, local: paged("--tools", "1", "--endless") },
    });
    // The pool's VMs boot at the first executions: they are not what an endless answer holds.
    const warm = await sdkClient(gateway.url);
    await Promise.all([1, 2].map(() => warm.callTool({ name: "execute", arguments: { code: "return 1" } })));
    await warm.close();
  }, 90_000);

  afterAll(async () => {
    await gateway?.stop();
    await upstream?.close();
  });

  /** Runs `code` in a client of its own; resolves to its structured answer. */
  async function execute(client: Client, code: string) {
    const result = await client.callTool({ name: "execute", arguments: { code } }, undefined, { timeout: 120_000 });
    return result.structuredContent as { ok: boolean; value?: unknown; error?: { kind: string; message: string } };
  }

  it.each([
    ["an event stream", "endless"],
    ["a JSON body", "endless_json"],
  ])(
    "cuts an HTTP server's endless answer in %s past 10 MiB: the call fails alone, the gateway holds little, another client is served",
    async (_, tool) => {
      const [caller, neighbour] = [await sdkClient(gateway.url), await sdkClient(gateway.url)];
      try {
        const before = memoryOf(gateway.pid);
        // Without a cap the call would go on to its deadline, reading what the server sends.
        const endless = execute(caller, `// @options: {"timeout_ms": 40000}\nreturn await tools.web__${tool}({});`);
        expect(await execute(neighbour, "return await tools.web__echo({})")).toMatchObject({ ok: true, value: "echo" });
        const answer = await endless;
        expect(answer.ok).toBe(false);
        expect(answer.error?.message).toBe(
          `server "web" answered the call of ${tool} with more than the gateway reads: the server sent a message longer than ${MAX_UPSTREAM_MESSAGE_BYTES} bytes (MAX_UPSTREAM_MESSAGE_BYTES); it was cut off there, and the call was not sent again`,
        );
        // The gateway stopped reading there and closed the response: the server could not send much more.
        await waitFor(() => (upstream.streamed[tool]?.length ?? 0) > 0, 30_000, "the response to close");
        expect(upstream.streamed[tool]).toEqual([expect.any(Number)]);
        expect(upstream.streamed[tool]?.[0]).toBeLessThan(ENDLESS_BYTES / 4);
        const after = memoryOf(gateway.pid);
        expect(after.peak - before.rss, `RSS ${before.rss} before, peak ${after.peak}`).toBeLessThan(128 * MiB);
        // The connection stays, for this call and the others.
        expect(await execute(caller, "return await tools.web__echo({})")).toMatchObject({ ok: true, value: "echo" });
      } finally {
        await caller.close();
        await neighbour.close();
      }
    },
    120_000,
  );

  it("cuts a stdio server's endless line at the same size, as the SDK does: the server is started again for the next call", async () => {
    const [caller, neighbour] = [await sdkClient(gateway.url), await sdkClient(gateway.url)];
    try {
      const before = memoryOf(gateway.pid);
      const endless = execute(caller, `// @options: {"timeout_ms": 40000}\nreturn await tools.local__endless({});`);
      expect(await execute(neighbour, "return await tools.web__echo({})")).toMatchObject({ ok: true, value: "echo" });
      const answer = await endless;
      expect(answer.ok).toBe(false);
      expect(answer.error?.message).toMatch(
        new RegExp(
          // A read-only call whose connection was lost is sent once more, and is cut there again.
          `^server "local" sent a message longer than ${MAX_UPSTREAM_MESSAGE_BYTES} bytes \\(MAX_UPSTREAM_MESSAGE_BYTES\\) and was disconnected again when the call was sent a second time`,
        ),
      );
      const after = memoryOf(gateway.pid);
      expect(after.peak - before.rss, `RSS ${before.rss} before, peak ${after.peak}`).toBeLessThan(128 * MiB);
      expect(await execute(caller, "return (await tools.local__item_0()).item")).toMatchObject({ ok: true, value: 0 });
    } finally {
      await caller.close();
      await neighbour.close();
    }
  }, 120_000);
});

describe("upstream lists and floods", () => {
  /** Runs `code` in `client`; resolves to its structured answer. */
  async function execute(client: Client, code: string) {
    const result = await client.callTool({ name: "execute", arguments: { code } }, undefined, { timeout: 120_000 });
    return result.structuredContent as { ok: boolean; value?: unknown; error?: { kind: string; message: string } };
  }

  it("takes no tool list past its caps: a server of 10,001 tools, or of 20 MiB of them, is down saying why, and the others serve", async () => {
    const gateway = await serveChild({
      mcpServers: {
        many: paged("--tools", "10001", "--page-size", "1000"),
        wordy: paged("--tools", "20", "--description-bytes", String(MiB)),
        small: paged("--tools", "2"),
      },
    });
    const client = await sdkClient(gateway.url);
    try {
      const description = (await client.listTools()).tools.find((tool) => tool.name === "execute")?.description ?? "";
      expect(description).toContain(`- many: lists more than ${MAX_UPSTREAM_TOOLS} tools (MAX_UPSTREAM_TOOLS)`);
      expect(description).toContain(
        `- wordy: lists more than ${MAX_UPSTREAM_LIST_BYTES} characters of JSON (MAX_UPSTREAM_LIST_BYTES)`,
      );
      expect(await execute(client, "return (await tools.small__item_1()).item")).toMatchObject({ ok: true, value: 1 });
      expect((await execute(client, "return await tools.many__item_0()")).error?.message).toMatch(
        /^tools\.many__item_0 does not exist/,
      );
    } finally {
      await client.close();
      await gateway.stop();
    }
  }, 120_000);

  it("lists a server's tools once at a time while it floods tools/list_changed, and serves another client meanwhile", async () => {
    const gateway = await serveChild({ mcpServers: { flood: paged("--tools", "600", "--page-size", "3", "--flood") } });
    const [flooding, neighbour] = [await sdkClient(gateway.url), await sdkClient(gateway.url)];
    try {
      const flood = execute(flooding, 'return await tools.flood__flood({ count: 100000, kind: "tools" })');
      let done = false;
      void flood.then(() => {
        done = true;
      });
      let served = 0;
      while (!done) {
        expect(await execute(neighbour, "return 6 * 7")).toMatchObject({ ok: true, value: 42 });
        served++;
      }
      expect(await flood).toMatchObject({ ok: true, value: "flooded" });
      expect(served).toBeGreaterThan(0);
      // Each listing of the server's tools began after the one before ended: never two lists held at once.
      const stats = (await execute(neighbour, "return await tools.flood__stats()")).value as { mostListings: number };
      expect(stats.mostListings).toBe(1);
    } finally {
      await flooding.close();
      await neighbour.close();
      await gateway.stop();
    }
  }, 120_000);

  it("holds nothing of a flood of 100,000 log notifications of 1 KiB, and serves another client meanwhile", async () => {
    const gateway = await McpGateway.start(
      { mcpServers: { flood: paged("--tools", "1", "--flood") } },
      { poolSize: 1 },
    );
    const serving = await serveGatewayHttp(gateway, { port: 0 });
    const [flooding, neighbour] = [await sdkClient(serving.url), await sdkClient(serving.url)];
    try {
      const before = await liveHeap();
      const flood = execute(flooding, 'return await tools.flood__flood({ count: 100000, kind: "log" })');
      let done = false;
      void flood.then(() => {
        done = true;
      });
      while (!done) expect(await execute(neighbour, "return 6 * 7")).toMatchObject({ ok: true, value: 42 });
      expect(await flood).toMatchObject({ ok: true, value: "flooded" });
      const held = (await liveHeap()) - before;
      expect(held, `heap held ${held} bytes after 100 MiB of notifications`).toBeLessThan(16 * MiB);
    } finally {
      await flooding.close();
      await neighbour.close();
      await serving.close();
      await gateway.close();
    }
  }, 120_000);

  it("disconnects a server that floods requests and reads none of the answers: its call fails saying why, the gateway holds little", async () => {
    const gateway = await serveChild({
      mcpServers: { deaf: paged("--tools", "1", "--flood"), other: paged("--tools", "1") },
    });
    const [flooding, neighbour] = [await sdkClient(gateway.url), await sdkClient(gateway.url)];
    try {
      // The pool's VMs boot at the first executions: they are not what the flood holds.
      await Promise.all([execute(neighbour, "return 1"), execute(flooding, "return 1")]);
      const before = memoryOf(gateway.pid);
      // It stops reading its stdin, then sends 400,000 pings: every answer would wait in the gateway.
      const flood = execute(flooding, 'return await tools.deaf__flood({ count: 400000, kind: "deaf" })');
      expect(await execute(neighbour, "return (await tools.other__item_0()).item")).toMatchObject({ value: 0 });
      const answer = await flood;
      expect(answer.ok).toBe(false);
      expect(answer.error?.message).toMatch(
        new RegExp(
          `^server "deaf" sent more than ${MAX_UPSTREAM_OWED_ANSWERS} requests whose answers it did not take \\(MAX_UPSTREAM_OWED_ANSWERS\\) and was disconnected`,
        ),
      );
      const after = memoryOf(gateway.pid);
      expect(after.peak - before.rss, `RSS ${before.rss} before, peak ${after.peak}`).toBeLessThan(128 * MiB);
      // Started again for the next call.
      expect(await execute(neighbour, "return (await tools.deaf__item_0()).item")).toMatchObject({ value: 0 });
    } finally {
      await flooding.close();
      await neighbour.close();
      await gateway.stop();
    }
  }, 120_000);
});

describe("upstream resources", () => {
  it("remembers only the latest list of a server whose resources are new at each listing", async () => {
    const gateway = await McpGateway.start(
      { mcpServers: { fresh: paged("--tools", "1", "--fresh-resources", "5000") } },
      { poolSize: 1 },
    );
    const serving = await serveGatewayHttp(gateway, { port: 0 });
    const client = await sdkClient(serving.url);
    try {
      await client.listResources();
      const before = await liveHeap();
      for (let i = 0; i < 40; i++) expect((await client.listResources()).resources).toHaveLength(5000);
      // 200,000 URIs were listed; the gateway routes reads by the latest 5,000 only.
      const held = (await liveHeap()) - before;
      expect(held, `heap held ${held} bytes`).toBeLessThan(8 * MiB);
      await expect(client.readResource({ uri: "fresh://1/0" })).rejects.toThrow(/Resource not found/);
    } finally {
      await client.close();
      await serving.close();
      await gateway.close();
    }
  }, 120_000);
});
