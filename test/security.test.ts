/**
 * Hostile programs against the sandbox, in every launcher (docs/security.md, What every launcher keeps in the host):
 * ambient authority, time, memory and size, and tool calls that outlive their run. "Host survives" is checked by
 * running a plain execution after each one.
 */
import { type CodemodeSandboxBase, type CodemodeTool, MAX_VALUE_CHARS } from "airlock-codemode";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { launchers } from "./helpers/sandboxes.ts";

const calls: { name: string; args: unknown }[] = [];
const signals: AbortSignal[] = [];
const tools: CodemodeTool[] = [
  {
    name: "echo",
    execute: (args) => {
      calls.push({ name: "echo", args });
      return args;
    },
  },
  { name: "proto", execute: () => JSON.parse('{"__proto__": {"polluted": true}, "a": 1}') },
  {
    name: "hang",
    execute: (_args, { signal }) =>
      new Promise((resolve) => {
        signals.push(signal);
        signal.addEventListener("abort", () => resolve("aborted"));
      }),
  },
];

describe.each(launchers)("$name sandbox under hostile programs", ({ name, make }) => {
  let sandbox: ReturnType<typeof make>;
  beforeAll(async () => {
    sandbox = make({ tools, timeoutMs: 500, memoryLimitBytes: 48 * 1024 * 1024 });
    // The deadlines here are short; a loaded machine can take longer than one to boot the sandbox.
    await sandbox.warm();
  });
  afterAll(async () => {
    await sandbox.close();
  });
  const run = (code: string, options?: Parameters<CodemodeSandboxBase["execute"]>[1]) => sandbox.execute(code, options);
  // The check after a hostile run gets a deadline of its own: on a loaded machine the sandbox may boot a VM in place
  // of the one the hostile run broke, and that boot counts against the deadline (it runs from execute()).
  const hostSurvives = async () => {
    const next = await run("return [typeof leaked, 6 * 7];", { timeoutMs: 30_000 });
    expect(next.ok && next.value).toEqual(["undefined", 42]);
  };

  it("finds no ambient authority", async () => {
    const result = await run(`return [typeof process, typeof require, typeof module, typeof fetch, typeof setTimeout,
      typeof setInterval, typeof WebAssembly, typeof Buffer, typeof std, typeof os, typeof __airlock_host,
      Object.getOwnPropertyNames(globalThis).filter((n) => /airlock|host|bridge/i.test(n))];`);
    expect(result.ok && result.value).toEqual([...Array(11).fill("undefined"), []]);
    const meta = await run("return typeof import.meta;");
    expect(!meta.ok && meta.error).toMatchObject({ kind: "script", name: "SyntaxError" });
  });

  it("reaches only the VM's own objects through constructors, eval and import()", async () => {
    const result = await run(`
      const viaFunction = Function("return this")();
      const viaCtor = (() => {}).constructor.constructor("return this")();
      const viaTool = tools.echo.constructor("return this")();
      const viaEval = eval("this");
      return [viaFunction === globalThis, viaCtor === globalThis, viaTool === globalThis, viaEval === globalThis,
        typeof viaCtor.process, typeof viaTool.require];`);
    expect(result.ok && result.value).toEqual([true, true, true, true, "undefined", "undefined"]);
    const imported = await run("await import('node:fs');");
    expect(!imported.ok && imported.error.kind).toBe("script");
    expect(!imported.ok && imported.error.message).toMatch(/node:fs/);
  });

  it("overwritten intrinsics do not change what the bridge sends, and intrinsics stay frozen", async () => {
    calls.length = 0;
    const result = await run(`
      const attempts = [
        () => { "use strict"; JSON.stringify = () => '"evil"'; },
        () => { "use strict"; Promise.prototype.then = function () { return "evil"; }; },
        () => { "use strict"; Array.prototype.push = () => 0; },
        () => { "use strict"; Array.prototype.toJSON = () => "evil"; },
        () => { "use strict"; Map.prototype.get = () => undefined; },
        () => { "use strict"; Object.freeze = (o) => o; },
        () => { "use strict"; tools = {}; },
        () => { "use strict"; console = {}; },
        () => { "use strict"; tools.echo = () => "evil"; },
      ];
      let refused = 0;
      for (const attempt of attempts) { try { attempt(); } catch { refused++; } }
      globalThis.JSON = { stringify: () => "x", parse: () => "x" };
      const echoed = await tools.echo({ list: [1, 2], nested: { ok: true } });
      return [refused, echoed, Object.isFrozen(Array.prototype), Object.isFrozen(Promise.prototype),
        Object.isFrozen(Map.prototype), Object.isFrozen(Object), typeof console.log];`);
    expect(result.ok && result.value).toEqual([
      9,
      { list: [1, 2], nested: { ok: true } },
      true,
      true,
      true,
      true,
      "function",
    ]);
    expect(calls).toEqual([{ name: "echo", args: { list: [1, 2], nested: { ok: true } } }]);
  });

  it("__proto__, constructor and prototype keys stay plain data on the host", async () => {
    calls.length = 0;
    const result = await run(`
      const arg = JSON.parse('{"__proto__": {"polluted": 1}, "constructor": {"prototype": {"polluted": 2}}}');
      await tools.echo(arg);
      const fromTool = await tools.proto();
      let refused;
      try { store("__proto__", { polluted: 3 }); } catch (error) { refused = error.name; }
      store("constructor", 1);
      return [refused, JSON.parse('{"__proto__": {"polluted": 4}, "prototype": 5}')];`);
    expect(result.ok).toBe(true);
    if (!result.ok) return;
    const received = calls[0]?.args as Record<string, unknown>;
    expect(Object.getPrototypeOf(received)).toBe(Object.prototype);
    expect(Object.keys(received)).toEqual(["__proto__", "constructor"]);
    const [refused, value] = result.value as [string, object];
    expect(Object.getPrototypeOf(value)).toBe(Object.prototype);
    expect(Object.getOwnPropertyNames(value)).toEqual(["__proto__", "prototype"]);
    // A store key __proto__ would set the prototype of a host that applies the writes as docs/sandbox.md does: refused.
    expect(refused).toBe("TypeError");
    expect(Object.getPrototypeOf(result.storeWrites.set)).toBe(Object.prototype);
    expect(Object.getOwnPropertyNames(result.storeWrites.set)).toEqual(["constructor"]);
    const saved: Record<string, unknown> = {};
    Object.assign(saved, result.storeWrites.set);
    expect(Object.getPrototypeOf(saved)).toBe(Object.prototype);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    const seen = await run(
      "const v = await tools.proto(); return [Object.getPrototypeOf(v) === Object.prototype, Object.keys(v), ({}).polluted];",
    );
    expect(seen.ok && seen.value).toEqual([true, ["__proto__", "a"], null]);
  });

  it("mutations of globalThis, Object.prototype and Math.random do not reach the next execution", async () => {
    const first = await run(`
      globalThis.leaked = "secret";
      try { Object.prototype.leaked = 1; } catch {}
      try { Math.random = () => 0.5; } catch {}
      Object.defineProperty(globalThis, "sticky", { value: 1, configurable: false });
      return [Math.random(), Math.random()];`);
    const second = await run("return [typeof leaked, typeof sticky, ({}).leaked, Math.random(), Math.random()];");
    expect(first.ok && second.ok).toBe(true);
    if (!first.ok || !second.ok) return;
    const [leaked, sticky, inherited, r1, r2] = second.value as unknown[];
    expect([leaked, sticky, inherited]).toEqual(["undefined", "undefined", null]);
    expect(first.value).not.toContain(0.5);
    // Math.random is reseeded per execution: the image's frozen PRNG state does not repeat.
    expect([r1, r2]).not.toEqual(first.value);
  });

  it("while(true){} ends with timeout", async () => {
    const result = await run("while (true) {}", { timeoutMs: 200 });
    expect(!result.ok && result.error).toEqual({ kind: "timeout", message: "The execution timed out after 200 ms" });
    await hostSurvives();
  });

  it.each([
    [
      "catching the interrupt and looping in finally",
      "try { while (true) {} } catch { while (true) {} } finally { while (true) {} }",
    ],
    ["await null in a loop", "while (true) await null;"],
    ["an endless promise chain", "const f = () => Promise.resolve().then(f); f(); await new Promise(() => {});"],
  ])("%s is still stopped", async (_, code) => {
    const result = await run(code, { timeoutMs: 200 });
    expect(!result.ok && result.error.kind).toBe("timeout");
    await hostSurvives();
  });

  it("a promise nothing can settle fails at once, not at the deadline", async () => {
    const result = await run("await new Promise(() => {});", { timeoutMs: 60_000 });
    expect(!result.ok && result.error.message).toMatch(/can never settle/);
  });

  it("an abort during a tool call cancels it and aborts its signal", async () => {
    signals.length = 0;
    const controller = new AbortController();
    const pending = run("await tools.hang();", { signal: controller.signal, timeoutMs: 10_000 });
    // Abort once the call is under way (a fixed delay raced a busy machine's slower start).
    while (signals.length === 0) await new Promise((resolve) => setTimeout(resolve, 5));
    controller.abort();
    const result = await pending;
    expect(!result.ok && result.error.kind).toBe("aborted");
    expect(result.calls).toEqual([{ name: "hang", status: "cancelled", durationMs: expect.any(Number) }]);
    expect(signals[0]?.aborted).toBe(true);
    await hostSurvives();
  });

  it.runIf(name === "worker")("an abort during a CPU loop stops it", async () => {
    const controller = new AbortController();
    const pending = run("while (true) {}", { signal: controller.signal, timeoutMs: 10_000 });
    setTimeout(() => controller.abort(), 50);
    const result = await pending;
    expect(!result.ok && result.error.kind).toBe("aborted");
    await hostSurvives();
  });

  it.each([
    ["a growing array", "const a = []; while (true) a.push({ i: a.length, s: 'x'.repeat(64) });"],
    ["a huge string", `const s = "x".repeat(1e9); return s.length;`],
    ["millions of small objects", "const m = new Map(); for (let i = 0; ; i++) m.set(i, { i });"],
    ["a huge globalThis property", "globalThis.big = []; for (;;) globalThis.big.push(new Array(1e5).fill(1));"],
  ])("%s runs out of memory at the limit and the host survives", async (_, code) => {
    const rssBefore = process.memoryUsage().rss;
    const result = await run(code, { timeoutMs: 20_000 });
    expect(result.ok).toBe(false);
    expect(!result.ok && `${result.error.name}: ${result.error.message}`).toMatch(
      /out of memory|Invalid string length|RangeError/i,
    );
    // The guest asked for gigabytes; the host grew by about the VM's cap at most.
    expect(process.memoryUsage().rss - rssBefore).toBeLessThan(400 * 1024 * 1024);
    await hostSurvives();
  });

  it("catching the allocation failure gives no more than the limit", async () => {
    const result = await run(
      `
      const chunks = [];
      try { for (;;) chunks.push("y".repeat(1024 * 1024) + chunks.length); }
      catch (e) { return { caught: String(e), chunks: chunks.length }; }`,
      { timeoutMs: 20_000 },
    );
    if (result.ok) {
      const value = result.value as { chunks: number };
      expect(value.chunks).toBeLessThanOrEqual(48);
    } else {
      expect(result.error.message).toBe("out of memory");
    }
    await hostSurvives();
  });

  it.each([
    ["deep recursion", "function r(n) { return r(n + 1) + 1; } r(0);"],
    ["deeply nested arrays", "let a = []; for (let i = 0; i < 1.2e5; i++) a = [a]; return JSON.stringify(a).length;"],
    [
      "recursion through toJSON",
      "const o = { toJSON() { return { inner: JSON.stringify(o) }; } }; return JSON.stringify(o);",
    ],
    ["recursion through a getter", "const o = { get x() { return JSON.stringify(o); } }; return JSON.stringify(o);"],
  ])("%s gives a catchable RangeError/InternalError", async (_, code) => {
    const caught = await run(`try { ${code} } catch (e) { return [e instanceof Error, e.name]; }`, {
      timeoutMs: 30_000,
    });
    if ((name === "inline" || name === "durable-object") && !caught.ok) {
      // On the calling thread (and on a Durable Object's, which has the calling thread's stack guard), native recursion inside a built-in (JSON.stringify of deep nesting) can exhaust the
      // host's smaller stack before QuickJS's guard fires: the run then ends with an uncatchable RangeError and the
      // VM is replaced. The worker threads have the stack for the guard to fire first.
      expect(caught.error).toMatchObject({ kind: "script", name: "RangeError" });
    } else {
      expect(caught.ok && caught.value).toEqual([true, expect.stringMatching(/^(RangeError|InternalError)$/)]);
    }
    const uncaught = await run(code, { timeoutMs: 30_000 });
    expect(!uncaught.ok && uncaught.error.kind).toBe("script");
    await hostSurvives();
  });

  it("deeply nested JSON.parse input does not crash the host", async () => {
    const result = await run("return JSON.parse('['.repeat(1e6) + ']'.repeat(1e6));");
    expect(!result.ok && result.error).toMatchObject({ kind: "script", name: "RangeError" });
    await hostSurvives();
  });

  it("huge return values, tool arguments and store values fail cleanly", async () => {
    // Enough heap for a value past MAX_VALUE_CHARS, so that the value limit, not the memory limit, is what breaks.
    const roomy = make({ tools, timeoutMs: 20_000, memoryLimitBytes: 512 * 1024 * 1024 });
    const run = (code: string) => roomy.execute(code);
    const big = `"x".repeat(${MAX_VALUE_CHARS})`;
    const returned = await run(`return ${big};`);
    expect(!returned.ok && returned.error).toMatchObject({ kind: "script", name: "RangeError" });
    const passed = await run(`try { await tools.echo(${big}); } catch (e) { return e.name; }`);
    expect(passed.ok && passed.value).toBe("RangeError");
    const stored = await run(`try { store("k", ${big}); } catch (e) { return e.name; }`);
    expect(stored.ok && stored.value).toBe("RangeError");
    expect(stored.ok && stored.storeWrites).toEqual({ set: {}, delete: [] });
    const printed = await run("for (;;) { try { text('spam spam spam'); } catch {} }");
    expect(!printed.ok && printed.error.name).toBe("RangeError");
    await roomy.close();
    await hostSurvives();
  });

  it("odd return values give defined results", async () => {
    const results = await Promise.all([
      run("return undefined;"),
      run("return 10n;"),
      run("return () => 1;"),
      run("const a = {}; a.self = a; return a;"),
      run("let o = {}; for (let i = 0; i < 40; i++) o = { o }; return o;"),
    ]);
    expect(results[0]?.ok && results[0].value).toBeUndefined();
    expect(!results[1]?.ok && results[1]?.error).toMatchObject({ kind: "script", name: "TypeError" });
    expect(results[2]?.ok && results[2].value).toBeUndefined();
    expect(!results[3]?.ok && results[3]?.error).toMatchObject({ kind: "script", name: "TypeError" });
    let depth = 0;
    let value = results[4]?.ok ? (results[4].value as { o?: unknown }) : undefined;
    while (value?.o) {
      depth++;
      value = value.o as { o?: unknown };
    }
    expect(depth).toBe(40);
  });

  it("calls started and not awaited are cancelled, their signals abort, and the records say so", async () => {
    signals.length = 0;
    const result = await run("tools.hang(); tools.hang(); return 'done';");
    expect(result.ok && result.value).toBe("done");
    expect(result.calls.map((c) => c.status)).toEqual(["cancelled", "cancelled"]);
    expect(signals.map((s) => s.aborted)).toEqual([true, true]);
  });

  it("a tool reference used after the run ended reaches nothing", async () => {
    calls.length = 0;
    const result = await run(`
      const keep = tools.echo;
      globalThis.kept = keep;
      (async () => { await null; await null; keep("late"); })();
      return "ended";`);
    expect(result.ok && result.value).toBe("ended");
    const next = await run("return typeof kept;");
    expect(next.ok && next.value).toBe("undefined");
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(calls).toEqual([]);
  });
});
