/**
 * A hostile execution harms only itself in the gateway too (docs/security.md, Executions beside each other), with
 * several executions at once: nothing waits behind a spinning program, a loop of slow built-ins is stopped near its
 * deadline while a neighbour parked on a slow upstream call finishes (that call sent once), a flood of huge unawaited
 * calls fails its own execution at its memory limit, a call too large for a stdio server to read fails alone before it
 * is sent (the server would close its connection, and every execution's calls to it would fail), and the calls of one
 * execution are bounded. Real parts only: `airlock serve` from its build, over Streamable HTTP (one client session
 * each) and over stdio (one client, whose requests run at once: a stdio gateway serves one client), the official SDK
 * client, and a real upstream server (paged-server.mjs --hold) that counts the calls it gets. Assertions are about
 * order and counts; the one bound in time is a wide margin.
 */
import { writeFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { DEFAULT_MAX_TOOL_CALLS, MAX_POOL_SIZE_PER_CORE } from "airlock-codemode";
import {
  DEFAULT_MAX_SESSIONS_PER_PRINCIPAL,
  type ExecuteStructuredResult,
  MAX_STDIO_CALL_ARGUMENT_BYTES,
} from "airlock-codemode/mcp";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { isAlive, paged, tempFolder } from "./fixtures/mcp/servers.ts";
import { assertCliBuilt, CLI, type HttpGatewayProcess, serveHttpCli } from "./helpers/cli.ts";

/**
 * Heap cap of one execution (`--memory`, MiB) of the gateway the flood runs on: small, so that a flood of calls of 4
 * million bytes of JSON passes it within a few calls (larger calls take the upstream server seconds to read). The other tests run at the default (256 MiB), which a loop filling an array of ten
 * million elements needs.
 */
const FLOOD_MEMORY_MIB = 16;
/** Deadline of a spinning program: the neighbours must finish well before it. */
const SPIN_TIMEOUT_MS = 10_000;
/** Deadline of a loop of slow built-ins; it must end well before three times this. */
const LOOP_TIMEOUT_MS = 2_000;
/** As many parked executions as the gateway can have workers: whichever worker a culprit lands on holds one. */
const PARKED = MAX_POOL_SIZE_PER_CORE * Math.max(1, availableParallelism());
/** Longest an execution of these tests may take, as the client waits for it. */
const REQUEST_TIMEOUT_MS = 120_000;

type Answer = ExecuteStructuredResult & { error?: { kind: string; message: string } };

async function execute(client: Client, code: string): Promise<Answer> {
  const result = await client.callTool({ name: "execute", arguments: { code } }, undefined, {
    timeout: REQUEST_TIMEOUT_MS,
  });
  return result.structuredContent as Answer;
}

/** The upstream server's process id and the calls it got so far, by tool name (read through the gateway). */
async function upstreamState(client: Client): Promise<{ pid: number; calls: Record<string, number> }> {
  const answer = await execute(client, "return await tools.paged__call_counts();");
  expect(answer.ok).toBe(true);
  return answer.value as { pid: number; calls: Record<string, number> };
}

/** The calls the upstream server got so far, by tool name. */
async function callCounts(client: Client): Promise<Record<string, number>> {
  return (await upstreamState(client)).calls;
}

/** Resolves once the upstream server got `count` calls of `tool` in all, or fails after 30 s. */
async function untilCalls(client: Client, tool: string, count: number): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (((await callCounts(client))[tool] ?? 0) < count) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${count} calls of ${tool}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/**
 * Parks one execution of each of `neighbours` on the upstream's `hold`, and resolves once every call reached the
 * server; `parked` resolves to their answers, `before` is the server's state before.
 */
async function park(watcher: Client, neighbours: Client[]) {
  const before = await upstreamState(watcher);
  const parked = Promise.all(neighbours.map((c) => execute(c, "return await tools.paged__hold();")));
  await untilCalls(watcher, "hold", (before.calls.hold ?? 0) + neighbours.length);
  return { before, parked, count: neighbours.length };
}

/**
 * Releases the parked executions: each must finish as if nothing had happened, its call sent once, to the same server
 * process.
 */
async function release(watcher: Client, { before, parked, count }: Awaited<ReturnType<typeof park>>): Promise<void> {
  const released = await execute(watcher, "return await tools.paged__release();");
  expect(released).toMatchObject({ ok: true, value: { released: count } });
  for (const answer of await parked) expect(answer).toMatchObject({ ok: true, value: { released: true } });
  const after = await upstreamState(watcher);
  expect(after.pid).toBe(before.pid);
  expect(after.calls.hold).toBe((before.calls.hold ?? 0) + count);
}

/** One way to reach the gateway. */
interface Gateway {
  name: string;
  /** Starts `airlock serve --config <config> ...flags`. */
  start(config: string, flags?: string[]): Promise<void>;
  /**
   * Clients for executions at once: over HTTP, `n` sessions; over stdio, the one client `n` times (the gateway serves
   * one client there, and runs its requests at once).
   */
  clients(n: number): Promise<Client[]>;
  /** Ends the sessions of the clients made so far (over HTTP: each client's DELETE), as clients that are done. */
  release(): Promise<void>;
  /** The gateway's process id. */
  pid(): number;
  stop(): Promise<void>;
}

function client(): Client {
  return new Client({ name: "isolation-test", version: "1.0.0" });
}

function overHttp(): Gateway {
  let serving: HttpGatewayProcess | undefined;
  let url = "";
  const opened: Client[] = [];
  return {
    name: "Streamable HTTP",
    async start(config, flags = []) {
      // Each client a session of its own, and all of one principal (no token): as many as a test opens.
      const sessions = String(Math.max(DEFAULT_MAX_SESSIONS_PER_PRINCIPAL, 2 + PARKED));
      serving = await serveHttpCli(config, ["--max-sessions-per-principal", sessions, ...flags]);
      url = serving.url;
      expect(url, serving.log()).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/mcp$/);
    },
    async clients(n) {
      const made = Array.from({ length: n }, client);
      await Promise.all(made.map((c) => c.connect(new StreamableHTTPClientTransport(new URL(url)))));
      opened.push(...made);
      return made;
    },
    async release() {
      await Promise.all(
        opened.splice(0).map(async (c) => {
          await (c.transport as StreamableHTTPClientTransport | undefined)?.terminateSession();
          await c.close();
        }),
      );
    },
    pid: () => serving?.pid ?? 0,
    async stop() {
      await Promise.all(opened.splice(0).map((c) => c.close()));
      await serving?.stop();
    },
  };
}

function overStdio(): Gateway {
  let transport: StdioClientTransport | undefined;
  let only: Client | undefined;
  return {
    name: "stdio",
    async start(config, flags = []) {
      only = client();
      transport = new StdioClientTransport({
        command: process.execPath,
        args: [CLI, "serve", "--config", config, ...flags],
        env: { ...process.env, NODE_OPTIONS: "" } as Record<string, string>,
        stderr: "pipe",
      });
      await only.connect(transport);
    },
    async clients(n) {
      return Array.from({ length: n }, () => only as Client);
    },
    async release() {},
    pid: () => transport?.pid ?? 0,
    async stop() {
      await only?.close();
    },
  };
}

const SPIN = (timeoutMs: number, loop: string) => `// @options: {"timeout_ms": ${timeoutMs}}\n${loop}`;

describe.each([
  { name: "Streamable HTTP", make: overHttp },
  { name: "stdio", make: overStdio },
])("airlock serve over $name, with a hostile execution among others", ({ make }) => {
  const folder = tempFolder();
  const config = join(folder.dir, "mcp.json");
  const gateway = make();
  beforeAll(async () => {
    assertCliBuilt();
    writeFileSync(config, JSON.stringify({ mcpServers: { paged: paged("--tools", "8", "--hold") } }));
    await gateway.start(config);
  }, 90_000);
  afterEach(() => gateway.release());
  afterAll(async () => {
    await gateway.stop();
    folder.cleanup();
  });

  it.each([1, 2])(
    "runs 8 executions that call an upstream tool while %i client(s)' programs spin, and the spinners end at their deadline",
    async (n) => {
      const spinning = await gateway.clients(n);
      const others = await gateway.clients(4);
      let spinnersEnded = false;
      const spinners = Promise.all(spinning.map((c) => execute(c, SPIN(SPIN_TIMEOUT_MS, "while (true) {}"))));
      void spinners.then(() => {
        spinnersEnded = true;
      });
      const answers = await Promise.all(
        Array.from({ length: 8 }, (_, i) =>
          execute(others[i % others.length] as Client, `return (await tools.paged__item_${i}()).item;`),
        ),
      );
      // Every neighbour finished while the spinners still computed: none waited for a spinner's deadline.
      expect(spinnersEnded).toBe(false);
      expect(answers.map((a) => a.ok && a.value)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
      for (const answer of await spinners) {
        expect(answer).toMatchObject({ ok: false, error: { kind: "timeout" } });
      }
    },
    60_000,
  );

  it.each([
    ["a loop of Array.fill", "const a = new Array(1e7); for (;;) a.fill(1);"],
    ["a loop of lastIndexOf over 1 MiB", 'const s = "a".repeat(1 << 20); for (;;) s.lastIndexOf("b");'],
  ])(
    "stops %s, which polls the interrupt rarely, near its deadline; neighbours parked on a slow upstream call finish, each call sent once",
    async (_, loop) => {
      const [watcher, culprit, ...neighbours] = await gateway.clients(2 + PARKED);
      const parking = await park(watcher as Client, neighbours);
      let parkedEnded = false;
      void parking.parked.then(() => {
        parkedEnded = true;
      });
      const started = Date.now();
      const stopped = await execute(culprit as Client, SPIN(LOOP_TIMEOUT_MS, loop));
      const tookMs = Date.now() - started;
      expect(stopped).toMatchObject({ ok: false, error: { kind: "timeout" } });
      // Near its deadline: its worker is killed if it does not stop within the grace, not left to compute.
      expect(tookMs).toBeLessThan(3 * LOOP_TIMEOUT_MS);
      expect(parkedEnded).toBe(false);
      // No parked call was sent again, wherever its execution went on.
      await release(watcher as Client, parking);
    },
    60_000,
  );

  it("fails a flood of unawaited calls with huge arguments at its own memory limit; another client's execution succeeds, and the gateway goes on", async () => {
    // A gateway of its own, whose executions have 16 MiB each.
    const small = make();
    try {
      await small.start(config, ["--memory", String(FLOOD_MEMORY_MIB)]);
      const [flooding, neighbour, watcher] = await small.clients(3);
      const parking = await park(watcher as Client, [neighbour as Client]);
      // 12 calls of 4 million bytes of JSON each, none awaited: together far past the 16 MiB limit.
      const flood = await execute(
        flooding as Client,
        `const s = "\\\\".repeat(2e6);
         const calls = [];
         for (let i = 0; i < 12; i++) calls.push(tools.paged__item_0({ s }));
         await Promise.all(calls);
         return "all sent";`,
      );
      expect(flood).toMatchObject({ ok: false, error: { kind: "script", name: "RangeError" } });
      expect(flood.error?.message).toMatch(new RegExp(`memory limit of ${FLOOD_MEMORY_MIB * 1024 * 1024} bytes`));
      expect(isAlive(small.pid())).toBe(true);
      // The calls that fit were sent to the same server process, which went on.
      await release(watcher as Client, parking);
      expect(await execute(watcher as Client, "return 6 * 7;")).toMatchObject({ ok: true, value: 42 });
    } finally {
      await small.stop();
    }
  }, 120_000);

  it("refuses a call whose arguments a stdio server could not read, before sending it: the server, and another client's call to it, go on", async () => {
    const [sending, neighbour, watcher] = await gateway.clients(3);
    const parking = await park(watcher as Client, [neighbour as Client]);
    // 9 MiB of arguments, well within the execution's memory: past what the SDK's stdio transport reads (10 MiB per
    // message) less the margin, the server would close its connection, failing the parked call.
    const big = await execute(
      sending as Client,
      'const s = "x".repeat(9 * 1024 * 1024); return await tools.paged__item_0({ s });',
    );
    expect(big).toMatchObject({ ok: false, error: { kind: "script" } });
    expect(big.error?.message).toBe(
      `tools.paged__item_0: its arguments are ${9 * 1024 * 1024 + 8} bytes of JSON, more than a call to a stdio server may carry (${MAX_STDIO_CALL_ARGUMENT_BYTES}, MAX_STDIO_CALL_ARGUMENT_BYTES); it was not sent`,
    );
    // The same server process, and the refused call never reached it.
    await release(watcher as Client, parking);
    expect((await callCounts(watcher as Client))["item-0"] ?? 0).toBe(parking.before.calls["item-0"] ?? 0);
  }, 60_000);

  it(`stops one execution's calls at its limit of ${DEFAULT_MAX_TOOL_CALLS} with an error the script catches, among 200,000`, async () => {
    const [calling, watcher] = await gateway.clients(2);
    const before = (await callCounts(watcher as Client))["item-0"] ?? 0;
    const answer = await execute(
      calling as Client,
      `let answered = 0, refused = 0, first;
       let finish;
       const all = new Promise((resolve) => { finish = resolve; });
       const settled = () => { if (answered + refused === 200000) finish(); };
       // In rounds: the refused calls' promises are settled and freed as it goes.
       for (let round = 0; round < 20; round++) {
         for (let i = 0; i < 10000; i++) {
           tools.paged__item_0().then(
             () => { answered++; settled(); },
             (e) => { refused++; first ??= e.message; settled(); },
           );
         }
         await null;
       }
       await all;
       return [answered, refused, first];`,
    );
    expect(answer.ok && answer.value).toEqual([
      DEFAULT_MAX_TOOL_CALLS,
      200_000 - DEFAULT_MAX_TOOL_CALLS,
      `paged__item_0(): this execution has made its limit of ${DEFAULT_MAX_TOOL_CALLS} calls (maxToolCalls)`,
    ]);
    // The calls past the limit never left the sandbox; the run keeps a record of the others only.
    expect(answer.calls.total).toBe(DEFAULT_MAX_TOOL_CALLS);
    expect((await callCounts(watcher as Client))["item-0"]).toBe(before + DEFAULT_MAX_TOOL_CALLS);
  }, 120_000);
});
