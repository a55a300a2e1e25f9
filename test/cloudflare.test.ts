/**
 * Cloudflare in real workerd (miniflare): an agent Worker holds RemoteCodemodeSandbox and its tools, and the VMs run
 * in Durable Objects of a separate sandbox Worker; the sandbox on the calling thread runs inside a Worker too. Both
 * Workers are bundled with esbuild as Wrangler would, QuickJS handed over as a compiled wasm module.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import * as piPortable from "@earendil-works/pi-codemode/portable";
import type { CodemodeResult } from "airlock-codemode/portable";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MAX_EXCHANGE_BYTES, RPC_LIMIT_BYTES, rpcBytes } from "../dist/engine/rpc-bytes.js";
import { takeExchange } from "../dist/remote/vm-side.js";
import type { PiScenario } from "./fixtures/cloudflare/pi-worker.ts";
import {
  agentEntry,
  bundleWorker,
  platformImports,
  type SingleWorker,
  sandboxEntry,
  startSingleWorker,
  startWorkerd,
  type Workerd,
} from "./helpers/workerd.ts";

const dist = join(fileURLToPath(new URL("..", import.meta.url)), "dist");
const fixtures = join(fileURLToPath(new URL(".", import.meta.url)), "fixtures", "cloudflare");

describe("bundles for the Workers platform", () => {
  it("airlock-codemode/portable bundles with no node: import and no wasm", async () => {
    const bundle = await bundleWorker(join(dist, "portable.js"));
    expect(bundle).toMatch(/export \{[^}]*\bRemoteCodemodeSandbox\b/);
    expect(bundle).toMatch(/export \{[^}]*\bInlineCodemodeSandbox\b/);
    expect(platformImports(bundle)).toEqual([]);
  });

  it("the agent Worker bundles no QuickJS module; the sandbox Worker imports it as one wasm module", async () => {
    expect(platformImports(await bundleWorker(agentEntry))).toEqual([]);
    const sandbox = await bundleWorker(sandboxEntry);
    expect(platformImports(sandbox)).toEqual(['from "../engine/wasm/quickjs-tracked.wasm"']);
    // The module the build rewrote (catchable out-of-memory errors, tracked writes) is the one imported.
    const digests = JSON.parse(readFileSync(join(dist, "engine", "wasm", "quickjs-tracked.json"), "utf8")) as {
      module: string;
    };
    expect(digests.module).toMatch(/^[0-9a-f]{64}$/);
  });
});

describe("the size of one remote exchange", () => {
  it("counts a Latin-1 string one byte a character and any other two, and stays below one RPC", () => {
    const chars = 1024 * 1024;
    expect(rpcBytes("\\".repeat(chars))).toBeLessThan(chars + 16);
    expect(rpcBytes("\u00e9".repeat(chars))).toBeLessThan(chars + 16);
    expect(rpcBytes("\u5b57".repeat(chars))).toBeGreaterThanOrEqual(2 * chars);
    expect(rpcBytes(`${"a".repeat(chars)}\u5b57`)).toBeGreaterThanOrEqual(2 * chars);
    expect(MAX_EXCHANGE_BYTES).toBeLessThan(RPC_LIMIT_BYTES);
  });

  it("takes messages in order up to the limit, and at least one", () => {
    const big = { type: "call", args: "x".repeat(10 * 1024 * 1024) };
    const outbox = [1, 2, 3, 4, 5].map((id) => ({ ...big, id }));
    const taken: number[][] = [];
    while (outbox.length > 0) taken.push(takeExchange(outbox).map((m) => m.id));
    expect(taken).toEqual([[1, 2], [3, 4], [5]]);
    const huge = [{ args: "x".repeat(MAX_EXCHANGE_BYTES + 1) }, { args: "y" }];
    expect(takeExchange(huge)).toHaveLength(1);
    expect(huge).toHaveLength(1);
  });
});

describe("RemoteCodemodeSandbox through the Durable Object, from an agent Worker", () => {
  let workerd: Workerd;
  beforeAll(async () => {
    workerd = await startWorkerd();
  }, 120_000);
  afterAll(async () => {
    await workerd?.dispose();
  });

  it("runs a script whose tool calls travel back to the agent's tools", async () => {
    const outcome = await workerd.run({
      codes: ['text("start"); const s = await tools.add({ a: 2, b: 3 }); console.log("sum", s); return { s };'],
    });
    const [result] = outcome.results;
    expect(result).toMatchObject({
      ok: true,
      value: { s: 5 },
      output: [
        { type: "text", text: "start" },
        { type: "text", text: "sum 5" },
      ],
      calls: [{ name: "add", status: "ok" }],
    });
    expect(outcome.seen).toEqual(["add 2 3"]);
    expect(outcome.remotes).toBe(1);
  });

  it("a tool's error reaches the script by its message; the script's own errors are script errors", async () => {
    const outcome = await workerd.run({
      codes: [
        "try { await tools.fail({}); } catch (e) { return [e.message, e.code ?? null]; }",
        "null.x",
        "return await tools.echo({ deep: [1, { two: 'three' }], n: null })",
      ],
    });
    expect(outcome.results[0]).toMatchObject({ ok: true, value: ["the agent's tool failed", null] });
    expect(outcome.results[1]).toMatchObject({ ok: false, error: { kind: "script", name: "TypeError" } });
    expect(outcome.results[2]).toMatchObject({ ok: true, value: { deep: [1, { two: "three" }], n: null } });
  });

  it("batches output: thousands of lines cross in a few exchanges", async () => {
    const outcome = await workerd.run({ codes: ["for (let i = 0; i < 5000; i++) text('line ' + i); return 1;"] });
    const [result] = outcome.results;
    expect(result?.ok).toBe(true);
    expect(result?.output).toHaveLength(5000);
    expect(result?.output[4999]).toEqual({ type: "text", text: "line 4999" });
    // The handshake, the script's batch with its end, and nothing per line.
    expect(outcome.exchanges).toBeLessThanOrEqual(3);
  });

  it("many large calls and answers cross over several exchanges, whole and in order", async () => {
    // Six calls of 6 Mi characters each way, none awaited alone: 36 MiB, past one RPC's 32 MiB.
    const code = `
      const calls = [];
      for (let i = 0; i < 6; i++) calls.push(tools.echo({ i, s: String.fromCharCode(97 + i).repeat(6 * 1024 * 1024) }));
      const answers = await Promise.all(calls);
      return answers.map((a) => [a.i, a.s.length, a.s === String.fromCharCode(97 + a.i).repeat(a.s.length)]);
    `;
    const outcome = await workerd.run({ codes: [code], binding: "ROOMY", memoryLimitBytes: 256 * 1024 * 1024 });
    const [result] = outcome.results;
    expect(result).toMatchObject({
      ok: true,
      value: [0, 1, 2, 3, 4, 5].map((i) => [i, 6 * 1024 * 1024, true]),
    });
    expect(result?.calls.map((c) => c.status)).toEqual(Array(6).fill("ok"));
    // The handshake, and the calls in at least two exchanges (at most 24 MiB each, MAX_EXCHANGE_BYTES).
    expect(outcome.exchanges).toBeGreaterThanOrEqual(3);
  }, 120_000);

  it("refuses in the script a call or an answer that alone is more than one exchange carries; the run goes on", async () => {
    // 13 Mi characters outside Latin-1: within MAX_VALUE_CHARS, but 26 MiB over RPC.
    const code = `
      const out = [];
      try { await tools.echo("\\u5b57".repeat(13 * 1024 * 1024)); out.push("sent"); } catch (e) { out.push(e.name, e.message); }
      try { await tools.wide({ chars: 13 * 1024 * 1024 }); out.push("answered"); } catch (e) { out.push(e.message); }
      out.push(await tools.add({ a: 1, b: 2 }));
      return out;
    `;
    const outcome = await workerd.run({ codes: [code], binding: "ROOMY", memoryLimitBytes: 256 * 1024 * 1024 });
    const [result] = outcome.results;
    expect(result?.ok).toBe(true);
    const [name, callRefusal, answerRefusal, sum] = (result?.ok ? result.value : []) as unknown[];
    expect(name).toBe("RangeError");
    expect(callRefusal).toMatch(
      /^echo\(\): the call takes \d+ bytes to send, more than the limit of 25165824 bytes of one exchange with the host \(MAX_EXCHANGE_BYTES\)$/,
    );
    expect(answerRefusal).toMatch(/too large to send .*over the limit of 25165824 bytes of one exchange/);
    expect(sum).toBe(3);
    // The refused call never reached the agent; the answer that could not cross was the tool's.
    expect(result?.calls.map((c) => c.name)).toEqual(["wide", "add"]);
    expect(outcome.seen).toEqual(["add 1 2"]);
    // Output or a result that large ends the run with a RangeError naming the limit, as output past a limit does.
    const limit = /more than the limit of 25165824 bytes of one exchange with the host \(MAX_EXCHANGE_BYTES\)/;
    for (const code of [
      'text("\\u5b57".repeat(13 * 1024 * 1024)); return 1;',
      'return "\\u5b57".repeat(13 * 1024 * 1024);',
    ]) {
      const ended = await workerd.run({ codes: [code], binding: "ROOMY", memoryLimitBytes: 256 * 1024 * 1024 });
      expect(ended.results[0]).toMatchObject({ ok: false, error: { kind: "script", name: "RangeError" } });
      expect(ended.results[0]?.ok === false && ended.results[0].error.message).toMatch(limit);
    }
    const next = await workerd.run({ codes: ["return await tools.add({ a: 20, b: 22 })"], binding: "ROOMY" });
    expect(next.results[0]).toMatchObject({ ok: true, value: 42 });
  }, 120_000);

  it("many executions at once on one session's object, and on one object each, with a hostile one among them", async () => {
    const ordinary = (i: number) =>
      `let t = 0; for (let k = 0; k < 3; k++) t += await tools.add({ a: ${i}, b: k }); return t;`;
    const hostile = "const a = []; while (true) a.push('x'.repeat(1 << 16));";
    for (const placement of ["session", "execution"] as const) {
      const codes = [ordinary(1), hostile, ordinary(2), ordinary(3), ordinary(4)];
      const outcome = await workerd.run({ codes, placement });
      expect(outcome.results.map((r) => (r.ok ? r.value : r.error.message))).toEqual([6, "out of memory", 9, 12, 15]);
      expect(outcome.remotes).toBe(codes.length);
      const distinct = new Set(outcome.objects).size;
      expect(distinct).toBe(placement === "session" ? 1 : codes.length);
    }
  });

  it("no state crosses executions on the same object", async () => {
    const outcome = await workerd.run({
      codes: ["globalThis.leak = 'secret'; return 1;"],
    });
    expect(outcome.results[0]?.ok).toBe(true);
    const after = await workerd.run({ codes: ["return typeof globalThis.leak;", "return typeof leak;"] });
    expect(after.results.map((r) => r.ok && r.value)).toEqual(["undefined", "undefined"]);
  });

  it("caps a request's memory at the object's 32 MiB, and a subclass raises the cap", async () => {
    const code = "const b = new ArrayBuffer(40 * 1024 * 1024); return b.byteLength;";
    const capped = await workerd.run({ codes: [code], memoryLimitBytes: 256 * 1024 * 1024 });
    expect(capped.results[0]).toMatchObject({
      ok: false,
      error: { kind: "script", name: "InternalError", message: "out of memory" },
    });
    const raised = await workerd.run({ codes: [code], memoryLimitBytes: 60 * 1024 * 1024, binding: "RAISED" });
    expect(raised.results[0]).toMatchObject({ ok: true, value: 40 * 1024 * 1024 });
  });

  it("caps a request's interrupt budget at the object's, and a subclass raises it", async () => {
    // The message names the budget the run had: the request's, or the object's when the request asked for more.
    const small = await workerd.run({ codes: ["while (true) {}"], interruptBudget: 200 });
    expect(small.results[0]).toMatchObject({ ok: false, error: { kind: "timeout" } });
    expect(small.results[0]?.ok === false && small.results[0].error.message).toMatch(/interrupt budget of 200 polls/);
    const capped = await workerd.run({ codes: ["while (true) {}"], interruptBudget: 900_000_000 });
    expect(capped.results[0]?.ok === false && capped.results[0].error.message).toMatch(/budget of 100000 polls/);
    const raised = await workerd.run({ codes: ["while (true) {}"], interruptBudget: 150_000, binding: "RAISED" });
    expect(raised.results[0]?.ok === false && raised.results[0].error.message).toMatch(/budget of 150000 polls/);
  }, 120_000);

  it("the deadline ends the execution in the agent at once; the object stops the VM and serves the next", async () => {
    const outcome = await workerd.run({
      codes: ["await tools.wait({ ms: 5000 }); return 'late';"],
      timeoutMs: 300,
    });
    expect(outcome.results[0]).toMatchObject({
      ok: false,
      error: { kind: "timeout", message: "The execution timed out after 300 ms" },
    });
    expect(outcome.aborted).toBe(1);
    const computing = await workerd.run({ codes: ["while (true) {}"], timeoutMs: 200, interruptBudget: 20_000 });
    expect(computing.results[0]).toMatchObject({
      ok: false,
      error: { kind: "timeout", message: "The execution timed out after 200 ms" },
    });
    const next = await workerd.run({ codes: ["return await tools.add({ a: 20, b: 22 })"] });
    expect(next.results[0]).toMatchObject({ ok: true, value: 42 });
  });

  it("an abort ends the execution in the agent with 'aborted'", async () => {
    const outcome = await workerd.run({ codes: ["await tools.wait({ ms: 5000 }); return 1;"], abortAfterMs: 200 });
    expect(outcome.results[0]).toMatchObject({ ok: false, error: { kind: "aborted" } });
    expect(outcome.aborted).toBe(1);
  });

  it("a failing object is a sandbox error, and only that execution's", async () => {
    const failing = await workerd.run({ codes: ["return 1"], binding: "FAILING" });
    expect(failing.results[0]).toMatchObject({ ok: false, error: { kind: "sandbox" } });
    expect(failing.results[0]?.ok === false && failing.results[0].error.message).toMatch(
      /the remote sandbox failed: .*refuses every execution/,
    );
    const fine = await workerd.run({ codes: ["return 2"] });
    expect(fine.results[0]).toMatchObject({ ok: true, value: 2 });
  });

  it("start() is deterministic through the remote", async () => {
    const code =
      "const a = await tools.add({ a: 1, b: 2 }); const b = await tools.add({ a, b: Math.floor(Math.random() * 1000) }); return [a, b, Date.now(), Math.random()];";
    const first = await workerd.run({ codes: [code], deterministic: true });
    const second = await workerd.run({ codes: [code], deterministic: true, placement: "execution" });
    // Everything but the host's own timing of the calls.
    const untimed = (r: (typeof first.results)[number] | undefined) => ({
      ...r,
      calls: r?.calls.map(({ durationMs: _, ...call }) => call),
    });
    expect(first.results[0]).toMatchObject({
      ok: true,
      value: [3, expect.any(Number), expect.any(Number), expect.any(Number)],
    });
    expect(untimed(second.results[0])).toEqual(untimed(first.results[0]));
    expect(first.seen).toEqual(["deliver 1", "deliver 2"]);
  });

  it("createInlineCodemodeSandbox runs inside a Worker, and its interrupt budget stops a script that never yields", async () => {
    expect(await workerd.inline("return await tools.add({ a: 40, b: 2 })")).toMatchObject({ ok: true, value: 42 });
    const spinning = (await workerd.inline("while (true) {}", 200)) as { ok: boolean; error?: { kind: string } };
    expect(spinning).toMatchObject({ ok: false, error: { kind: "timeout" } });
  });
});

describe("a Worker written against pi-codemode's /cloudflare", () => {
  let worker: SingleWorker;
  const run = (scenario: PiScenario) =>
    worker.post("/", scenario) as Promise<{ result: CodemodeResult; served: number | null }>;
  const sum = "return await tools.add({ a: 40, b: 2 })";
  beforeAll(async () => {
    worker = await startSingleWorker(join(fixtures, "pi-worker.ts"), {
      SANDBOX: "CodemodeSandbox",
      AUDITED: "AuditedSandbox",
      OWN: "OwnSandbox",
    });
  }, 120_000);
  afterAll(async () => {
    await worker?.dispose();
  });

  it("finds every name pi's entry exports, the portable API among them", async () => {
    // pi's entry imports Workers' modules, so Node reads its names from its declarations: its own, and /portable's.
    const declarations = readFileSync(
      join(dist, "..", "node_modules", "@earendil-works", "pi-codemode", "dist", "cloudflare.d.ts"),
      "utf8",
    );
    expect(declarations).toContain('export * from "./portable.ts";');
    const own = [...declarations.matchAll(/^export declare (?:const|function|class) (\w+)/gm)].map(
      (m) => m[1] as string,
    );
    expect(own).toEqual([
      "DEFAULT_REMOTE_MEMORY_LIMIT_BYTES",
      "cloudflareQuickJSWasm",
      "createInlineCodemodeSandbox",
      "CodemodeSandboxDurableObject",
    ]);
    const { names, wasmIsModule } = (await worker.post("/exports")) as { names: string[]; wasmIsModule: boolean };
    expect([...own, ...Object.keys(piPortable)].filter((name) => !names.includes(name))).toEqual([]);
    expect(wasmIsModule).toBe(true);
  });

  it("pi's subclass that changes the caps serves RemoteCodemodeSandbox from the same entry", async () => {
    const { result } = await run({ binding: "SANDBOX", code: sum });
    expect(result).toMatchObject({ ok: true, value: 42, calls: [{ name: "add", status: "ok" }] });
    const capped = await run({ binding: "SANDBOX", code: "while (true) {}", interruptBudget: 150 });
    expect(capped.result).toMatchObject({ ok: false, error: { kind: "timeout" } });
    expect(!capped.result.ok && capped.result.error.message).toMatch(/interrupt budget of 150 polls/);
  });

  it("an override of pi's RPC execute is called for every execution, and the request it passes on applies", async () => {
    const { result, served } = await run({ binding: "AUDITED", code: sum });
    expect(result).toMatchObject({ ok: true, value: 42 });
    expect(served).toBe(1);
    // The override lowers the budget its request asks for (pi's CodemodeRemoteRequest.interruptBudget).
    const lowered = await run({ binding: "AUDITED", code: "while (true) {}", interruptBudget: 90_000 });
    expect(!lowered.result.ok && lowered.result.error.message).toMatch(/interrupt budget of 500 polls/);
    expect(lowered.served).toBe(1);
  });

  it("an object of its own serves with serveCodemodeRemote and the module Wrangler compiled", async () => {
    const { result } = await run({ binding: "OWN", code: sum });
    expect(result).toMatchObject({ ok: true, value: 42, calls: [{ name: "add", status: "ok" }] });
    const capped = await run({ binding: "OWN", code: "while (true) {}" });
    expect(!capped.result.ok && capped.result.error.message).toMatch(/interrupt budget of 300 polls/);
  });

  it("pi's InlineCodemodeSandbox without a budget stops a script that never yields, as pi's default budget does", async () => {
    const ran = (await worker.post("/inline", "return 6 * 7")) as { result: CodemodeResult };
    expect(ran.result).toMatchObject({ ok: true, value: 42 });
    const spinning = (await worker.post("/inline", "while (true) {}")) as { result: CodemodeResult };
    expect(!spinning.result.ok && spinning.result.error.message).toMatch(/interrupt budget of 100000 polls/);
  }, 120_000);
});

describe("examples/cloudflare, as their wrangler configs wire them", () => {
  const example = join(fileURLToPath(new URL("..", import.meta.url)), "examples", "cloudflare");
  const config = (worker: string) =>
    JSON.parse(readFileSync(join(example, worker, "wrangler.jsonc"), "utf8").replace(/^\s*\/\/.*$/gm, "")) as {
      name: string;
      main: string;
      compatibility_date: string;
      durable_objects?: { bindings: { name: string; class_name: string; script_name: string }[] };
      migrations?: { new_sqlite_classes: string[] }[];
    };

  it("the agent's script runs its tool, with the VM in the sandbox Worker's object", async () => {
    const agent = config("agent");
    const sandbox = config("sandbox");
    const [binding] = agent.durable_objects?.bindings ?? [];
    expect(binding?.script_name).toBe(sandbox.name);
    expect(sandbox.migrations?.[0]?.new_sqlite_classes).toEqual([binding?.class_name]);
    const root = "/airlock-example";
    const [agentCode, sandboxCode] = await Promise.all([
      bundleWorker(join(example, "agent", agent.main)),
      bundleWorker(join(example, "sandbox", sandbox.main)),
    ]);
    const { Miniflare } = await import("miniflare");
    const mf = new Miniflare({
      cf: false,
      workers: [
        {
          name: agent.name,
          compatibilityDate: agent.compatibility_date,
          modulesRoot: root,
          modules: [{ type: "ESModule", path: `${root}/agent.js`, contents: agentCode }],
          durableObjects: {
            [binding?.name as string]: { className: binding?.class_name as string, scriptName: sandbox.name },
          },
        },
        {
          name: sandbox.name,
          compatibilityDate: sandbox.compatibility_date,
          modulesRoot: root,
          modules: [
            { type: "ESModule", path: `${root}/cloudflare/sandbox.js`, contents: sandboxCode },
            {
              type: "CompiledWasm",
              path: `${root}/engine/wasm/quickjs-tracked.wasm`,
              contents: readFileSync(join(dist, "engine", "wasm", "quickjs-tracked.wasm")),
            },
          ],
          durableObjects: { [binding?.class_name as string]: binding?.class_name as string },
        },
      ],
    });
    try {
      const response = await mf.dispatchFetch("http://localhost:8787/?session=s1", {
        method: "POST",
        body: 'const w = await tools.getWeather({ city: "Oslo" }); return w.celsius;',
      });
      expect(await response.json()).toMatchObject({ ok: true, value: 21, calls: [{ name: "getWeather" }] });
    } finally {
      await mf.dispose();
    }
  }, 120_000);
});
