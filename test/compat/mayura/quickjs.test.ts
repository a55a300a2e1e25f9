/**
 * Mayura's QuickJS adapter suite (packages/adapter-code-quickjs/test/quickjs.test.ts), ported: programs, their tool
 * calls through the host's broker, and hostile programs, on every adapter that runs Airlock's VM side (see
 * fixtures.ts). Cases that depend on how the engine reports a run's end are in engine-endings.test.ts.
 */
import { Budget, invokeTool, type JsonValue, type Outcome } from "airlock-codemode";
import type { ClosableSandboxAdapter } from "airlock-codemode/adapter-code-quickjs";
import { type CodeModeInvokeTool, createCodeMode } from "airlock-codemode/code-mode";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ADAPTERS, cleanUp, codeOf, double, execute, options, program } from "./fixtures.ts";

afterAll(cleanUp);

/** A broker that answers every call with its input, counting the calls it saw. */
function echoing() {
  const seen: JsonValue[] = [];
  const broker: CodeModeInvokeTool = (_tool, input) => {
    seen.push(input);
    return { status: "succeeded", output: input };
  };
  return { seen, broker };
}

const refusing: CodeModeInvokeTool = () => ({
  status: "failed",
  error: { code: "TOOL_FAILED", message: "this broker runs nothing" },
});

describe.each(ADAPTERS)("$name", (compat) => {
  let adapter: ClosableSandboxAdapter;
  const modeWith = (invokeTool: CodeModeInvokeTool) =>
    createCodeMode({ adapter, invokeTool, allowTestAdapter: !compat.production });
  beforeAll(() => {
    adapter = compat.make();
  });
  afterAll(() => adapter.close());

  it("runs a program and returns its output with its usage", async () => {
    expect(adapter.qualification).toBe(compat.production ? "production" : "test");
    const outcome = await execute(modeWith(refusing), "(input) => ({ value: input.value + 4 })");
    expect(outcome).toEqual({
      status: "succeeded",
      output: { value: 7 },
      usage: { toolCalls: 0, unknownCalls: 0, knownCostMicros: 0, unknownCostMicros: 0, maximumCostMicros: 0 },
      evidence: [],
    });
  });

  it("sends tool calls through the ordinary broker, and a pure tool needs only its tool permission", async () => {
    const budget = new Budget(10, 4);
    let brokered = 0;
    const mode = modeWith((tool, input, context) => {
      brokered++;
      return invokeTool(tool, input, { ...context, permissions: { allow: [`tool:${tool.id}`] }, budget });
    });
    const outcome = await execute(mode, `async (input, tools) => (await tools.call("number.double", input)).output`, {
      tools: [double],
    });
    expect(outcome).toMatchObject({ status: "succeeded", output: { value: 6 } });
    expect(outcome.usage).toMatchObject({ toolCalls: 1, knownCostMicros: 1, maximumCostMicros: 4 });
    expect(brokered).toBe(1);
    expect(budget.spentMicros).toBe(1);
  });

  it("runs calls in parallel, each through the host", async () => {
    let brokered = 0;
    const mode = modeWith(async (_tool, input) => {
      brokered++;
      await new Promise((resolve) => setTimeout(resolve, 5));
      return { status: "succeeded", output: { value: (input as { value: number }).value * 2 } };
    });
    const outcome = await execute(
      mode,
      `async (input, tools) => {
        const [a, b] = await Promise.all([tools.call("number.double", input), tools.call("number.double", { value: input.value + 1 })]);
        return { value: a.output.value + b.output.value };
      }`,
      { tools: [double] },
    );
    expect(outcome).toMatchObject({ status: "succeeded", output: { value: 14 } });
    expect(outcome.usage).toMatchObject({ toolCalls: 2, knownCostMicros: 2, maximumCostMicros: 4 });
    expect(brokered).toBe(2);
  });

  describe("hostile programs", () => {
    it("reach no host API: globals, Function, eval and dynamic import stay inside QuickJS", async () => {
      const outcome = await execute(
        modeWith(refusing),
        `async () => {
          const names = ["process", "require", "module", "fetch", "console", "setTimeout", "setInterval", "XMLHttpRequest",
            "WebAssembly", "Buffer", "global", "std", "os", "Deno", "Bun"];
          const found = names.filter((name) => typeof globalThis[name] !== "undefined");
          let imported = "loaded";
          try { await import("node:fs"); } catch (error) { imported = error.name; }
          return {
            found,
            viaFunction: Function("return typeof process")(),
            viaConstructor: (() => {}).constructor.constructor("return typeof require")(),
            viaEval: eval("typeof fetch"),
            imported,
          };
        }`,
      );
      expect(outcome).toMatchObject({
        status: "succeeded",
        output: { found: [], viaFunction: "undefined", viaConstructor: "undefined", viaEval: "undefined" },
      });
      expect(outcome.status === "succeeded" && (outcome.output as { imported: string }).imported).not.toBe("loaded");
    });

    it("are stopped at cpuMillis, before the wall clock, without a programError", async () => {
      const outcome = await execute(modeWith(refusing), "() => { while (true) {} }", {
        limits: { cpuMillis: 50, wallTimeMillis: 8_000 },
      });
      expect(outcome).toMatchObject({ status: "failed", error: { code: "LIMIT_EXCEEDED" } });
      if (outcome.status !== "succeeded") expect(outcome.error.message).toContain("cpuMillis");
      expect(outcome).not.toHaveProperty("programError");
    });

    it("cannot catch the CPU interrupt, loop on in a finally block, or in a microtask loop", async () => {
      const mode = modeWith(refusing);
      const tight = { limits: { cpuMillis: 50 } };
      for (const source of [
        "() => { try { while (true) {} } catch { return { value: 1 }; } }",
        "() => { try { while (true) {} } finally { while (true) {} } }",
        "async () => { for (;;) await null; }",
      ]) {
        expect(codeOf(await execute(mode, source, tight)), source).toBe("LIMIT_EXCEEDED");
      }
    });

    it("spend no CPU time while they wait for tools", async () => {
      const mode = modeWith(async (_tool, input) => {
        await new Promise((resolve) => setTimeout(resolve, 300));
        return { status: "succeeded", output: input };
      });
      // Two 300 ms waits would pass a 400 ms CPU limit if waiting counted; the light work after them does not.
      const outcome = await execute(
        mode,
        `async (input, tools) => {
          const first = await tools.call("number.double", input);
          const second = await tools.call("number.double", first.output);
          let sum = 0; for (let i = 0; i < 10000; i++) sum += i % 7;
          return { value: second.output.value, sum };
        }`,
        { tools: [double], limits: { cpuMillis: 400 } },
      );
      expect(outcome).toMatchObject({ status: "succeeded", output: { value: 3 } });
    });

    it("meet a hard memory limit, whether they keep what they allocate locally or globally", async () => {
      const mode = modeWith(refusing);
      const memory = { limits: { cpuMillis: 5_000 } };
      for (const source of [
        `() => { const values = []; for (;;) values.push("x".repeat(65536) + values.length); }`,
        "() => { globalThis.hog = []; for (;;) globalThis.hog.push(new Array(10000).fill(1)); }",
        `() => "x".repeat(1e9)`,
        "() => { const values = []; for (;;) values.push({}); }",
      ]) {
        const outcome = await execute(mode, source, memory);
        expect(outcome, source).toMatchObject({ status: "failed", error: { code: "LIMIT_EXCEEDED" } });
        if (outcome.status !== "succeeded") expect(outcome.error.message).toContain("memoryBytes");
      }
    });

    it("see deep recursion as a catchable stack overflow, in their own code and in built-ins", async () => {
      const mode = modeWith(refusing);
      const overflow = {
        status: "failed",
        error: { code: "TOOL_FAILED" },
        programError: { name: "InternalError", message: "stack overflow" },
      };
      for (const source of [
        "() => { const down = (n) => down(n + 1) + 1; return down(0); }",
        // Native recursion: join() of an array that holds itself, and toJSON that stringifies again.
        "() => { const a = []; a[0] = a; return a.join(); }",
        "() => { const o = { toJSON() { return JSON.stringify(o); } }; return JSON.stringify(o); }",
        // A return value whose toJSON recurses overflows in the output's own serialization.
        "() => { const o = { toJSON() { return JSON.stringify(o); } }; return o; }",
      ]) {
        expect(await execute(mode, source, { limits: { cpuMillis: 5_000 } }), source).toMatchObject(overflow);
      }
      const caught = await execute(
        mode,
        "() => { const down = (n) => { try { return down(n + 1); } catch { return n; } }; return down(0) > 100; }",
      );
      expect(caught).toMatchObject({ status: "succeeded", output: true });
    });

    it("return a result that is not plain JSON within maxOutputBytes as INVALID_OUTPUT, before copying it out", async () => {
      const mode = modeWith(refusing);
      for (const [source, limits] of [
        // Ten million characters take a while to build and serialize: give it the CPU time for that.
        [`() => "x".repeat(10_000_000)`, { memoryBytes: 64 * 1024 * 1024, cpuMillis: 5_000 }],
        ["() => undefined", {}],
        ["() => 1n", {}],
        ["() => { const loop = {}; loop.self = loop; return loop; }", {}],
      ] as const) {
        const outcome = await execute(mode, source, { limits });
        expect(outcome, source).toMatchObject({ status: "failed", error: { code: "INVALID_OUTPUT" } });
        if (outcome.status !== "succeeded") expect(outcome.error.message, source).toContain("maxOutputBytes");
      }
    });

    it("have what they threw reported as programError, cut to its limits and never in error.message", async () => {
      const mode = modeWith(refusing);
      const thrown = await execute(mode, `() => { throw new TypeError("secret tool data " + "y".repeat(5000)); }`);
      expect(thrown).toMatchObject({
        status: "failed",
        error: { code: "TOOL_FAILED" },
        programError: { name: "TypeError" },
      });
      if (thrown.status !== "succeeded") {
        expect(thrown.programError?.message).toHaveLength(1_024);
        expect(thrown.error.message).not.toContain("secret");
      }
      // Only plain strings count: a thrown string is the message; a name getter that throws gives Error, a
      // message that is not a string an empty one.
      expect(await execute(mode, `() => { throw "plain"; }`)).toMatchObject({
        programError: { name: "Error", message: "plain" },
      });
      expect(await execute(mode, "() => { throw { get name() { throw 1; }, message: 7 }; }")).toMatchObject({
        programError: { name: "Error", message: "" },
      });
      expect(await execute(mode, `() => { throw { name: "Custom", message: "m" }; }`)).toMatchObject({
        programError: { name: "Custom", message: "m" },
      });
    });

    it("flood the bridge with calls: the broker sees at most maxToolCalls, the rest are LIMIT_EXCEEDED inside", async () => {
      const { seen, broker } = echoing();
      const outcome = await execute(
        modeWith(broker),
        `async (input, tools) => {
          const calls = [];
          for (let i = 0; i < 20000; i++) calls.push(tools.call("number.double", { value: i }));
          const outcomes = await Promise.all(calls);
          return {
            value: outcomes.filter((outcome) => outcome.status === "succeeded").length,
            limited: outcomes.filter((outcome) => outcome.error && outcome.error.code === "LIMIT_EXCEEDED").length,
          };
        }`,
        // 20,000 calls are real work for the VM and the host: limits that let them finish on a busy machine.
        {
          tools: [double],
          limits: { cpuMillis: 5_000, wallTimeMillis: 20_000, memoryBytes: 64 * 1024 * 1024, maxToolConcurrency: 4 },
        },
      );
      expect(outcome).toMatchObject({ status: "succeeded", output: { value: 4, limited: 19_996 } });
      expect(seen).toHaveLength(4);
    });

    it("have oversized input, a __proto__ key and unknown tools refused before the broker", async () => {
      const { seen, broker } = echoing();
      const outcome = await execute(
        modeWith(broker),
        `async (input, tools) => {
          const big = await tools.call("number.double", { value: 1, pad: "x".repeat(10000) });
          const proto = await tools.call("number.double", JSON.parse('{"value":1,"__proto__":{"polluted":true}}'));
          const unknown = await tools.call("admin.secret", { value: 1 });
          return { big: big.error.code, proto: proto.error.code, unknown: [unknown.status, unknown.error.code] };
        }`,
        { tools: [double] },
      );
      expect(outcome).toMatchObject({
        status: "succeeded",
        output: { big: "INVALID_INPUT", proto: "INVALID_INPUT", unknown: ["blocked", "PERMISSION_DENIED"] },
      });
      expect(seen).toHaveLength(0);
    });

    it("cannot change what the bridge sends by replacing JSON, Promise, Object and Array intrinsics", async () => {
      const { seen, broker } = echoing();
      const outcome = await execute(
        modeWith(broker),
        `async (input, tools) => {
          const tryTo = (f) => { try { f(); } catch {} };
          tryTo(() => { JSON.stringify = () => '{"toolId":"number.double","input":{"value":999}}'; });
          tryTo(() => { JSON.parse = () => ({ status: "succeeded", output: { value: -1 } }); });
          tryTo(() => { Array.prototype.push = () => { throw new Error("no"); }; });
          tryTo(() => { Promise.prototype.then = function () { throw new Error("no"); }; });
          tryTo(() => { Object.freeze = (value) => value; });
          tryTo(() => { tools.call = async () => ({ status: "succeeded", output: { value: -2 } }); });
          return await tools.call("number.double", { value: 5 });
        }`,
        { tools: [double] },
      );
      expect(outcome).toMatchObject({ status: "succeeded", output: { status: "succeeded", output: { value: 5 } } });
      expect(seen).toEqual([{ value: 5 }]);
    });

    it("cannot pollute host prototypes through a result", async () => {
      const outcome = await execute(
        modeWith(refusing),
        `() => JSON.parse('{"__proto__":{"polluted":true},"constructor":{"prototype":{"polluted":true}}}')`,
      );
      expect(outcome).toMatchObject({ status: "failed", error: { code: "INVALID_OUTPUT" } });
      expect(({} as Record<string, unknown>).polluted).toBeUndefined();
      expect(Object.prototype).not.toHaveProperty("polluted");
    });

    it("leave nothing behind for the next execution", async () => {
      const mode = modeWith(refusing);
      const first = await mode.execute(
        program(
          "() => { globalThis.leak = 1; try { Object.prototype.leak = 2; } catch {} try { Math.random = () => 4; } catch {} return 1; }",
        ),
        { value: 1 },
        options(),
      );
      expect(first).toMatchObject({ status: "succeeded" });
      const second = await mode.execute(
        program("() => [typeof globalThis.leak, typeof ({}).leak, Math.random() === 4]"),
        { value: 1 },
        options(),
      );
      expect(second).toMatchObject({ status: "succeeded", output: ["undefined", "undefined", false] });
    });
  });

  it("reports approved imports as UNSUPPORTED_PROFILE instead of running them", async () => {
    let brokered = 0;
    const mode = modeWith(() => {
      brokered++;
      return { status: "succeeded", output: null };
    });
    const outcome = await execute(
      mode,
      `async (input, tools) => { await tools.call("number.double", input); return input; }`,
      { approvedImports: ["safe-package"], tools: [double] },
    );
    expect(outcome).toMatchObject({ status: "failed", error: { code: "UNSUPPORTED_PROFILE" } });
    if (outcome.status !== "succeeded") expect(outcome.error.message).toContain("language or imports");
    expect(brokered).toBe(0);
  });

  // Mayura's adapter answers a TypeScript program UNSUPPORTED_PROFILE; Airlock's run it with the types erased.
  it("runs a TypeScript program, its types erased", async () => {
    const outcome = await execute(modeWith(refusing), "(input: { value: number }) => input", {
      language: "typescript",
    });
    expect(outcome).toMatchObject({ status: "succeeded", output: { value: 3 } });
  });

  it("stops a program on cancellation (CANCELLED) and at the wall clock (TIMEOUT)", async () => {
    const mode = modeWith(refusing);
    const controller = new AbortController();
    const pending = execute(mode, "() => { while (true) {} }", { limits: { cpuMillis: 5_000 } }, controller.signal);
    setTimeout(() => controller.abort(), 300);
    expect(await pending).toMatchObject({ status: "cancelled", error: { code: "CANCELLED" } });
    // A broker that honours its signal, and says nothing started, lets the deadline be the outcome.
    const waiting = modeWith(
      (_tool, _input, context) =>
        new Promise<Outcome<unknown>>((resolve) =>
          context.signal.addEventListener("abort", () =>
            resolve({ status: "cancelled", error: { code: "CANCELLED", message: "cancelled" } }),
          ),
        ),
    );
    const timedOut = await execute(waiting, `async (input, tools) => tools.call("number.double", input)`, {
      tools: [double],
      limits: { wallTimeMillis: 1_500 },
    });
    expect(timedOut).toMatchObject({ status: "failed", error: { code: "TIMEOUT" } });
  });

  it("still runs programs after all of the above", async () => {
    const outcome = await execute(modeWith(refusing), "(input) => input.value * 2");
    expect(outcome).toMatchObject({ status: "succeeded", output: 6 });
  });
});
