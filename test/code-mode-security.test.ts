import { Budget, defineTool, invokeTool, z } from "airlock-codemode";
import {
  type ClosableSandboxAdapter,
  createQuickJsProtocolAdapter,
  createQuickJsSandboxAdapter,
} from "airlock-codemode/adapter-code-quickjs";
import {
  CODE_PROGRAM_LIMITS,
  type CodeExecutionOutcome,
  type CodeModeInvokeTool,
  type CodeProgramLimits,
  createCodeMode,
  defineCodeProgram,
} from "airlock-codemode/code-mode";
import { afterAll, describe, expect, it } from "vitest";
import { echoDefinition, echoTool } from "./helpers/code-mode.ts";
import { launchVmSideChild } from "./helpers/vm-side.ts";

const launchChild = () => launchVmSideChild();

const adapters: { name: string; make(): ClosableSandboxAdapter; allowTestAdapter: boolean }[] = [
  { name: "worker pool", make: () => createQuickJsSandboxAdapter({ poolSize: 2 }), allowTestAdapter: false },
  {
    name: "protocol (child process)",
    make: () => createQuickJsProtocolAdapter({ id: "child", version: "1", launch: launchChild }),
    allowTestAdapter: true,
  },
];

const SCOPE = { principalId: "user-1", tenantId: "tenant-a", projectId: "demo" };
/** The preset, with tool input small enough that an oversized call meets it, and room for several calls at once. */
const LIMITS: CodeProgramLimits = {
  ...CODE_PROGRAM_LIMITS,
  maxToolInputBytes: 4 * 1024,
  maxToolCalls: 50,
  maxToolConcurrency: 4,
};

let sequence = 0;
/** Executions the test does not cancel still pass a signal: execute requires one. */
const run = () => ({
  runId: "run",
  executionId: `sec-${++sequence}`,
  scope: SCOPE,
  signal: new AbortController().signal,
});

type Tools = Parameters<typeof defineCodeProgram>[0]["tools"];
function program(source: string, tools: Tools, limits: Partial<CodeProgramLimits> = {}) {
  return defineCodeProgram({
    id: "hostile",
    version: "1",
    intent: "A hostile program.",
    language: "javascript",
    source,
    input: z.unknown(),
    output: z.unknown(),
    inputSchemaId: "any.v1",
    outputSchemaId: "any.v1",
    tools,
    limits: { ...LIMITS, ...limits },
  });
}

const broker: CodeModeInvokeTool = (tool, input, context) =>
  invokeTool(tool, input, {
    runId: context.runId,
    callId: context.callId,
    scope: context.scope,
    signal: context.signal,
    permissions: { allow: [`tool:${tool.id}`, `effect:${tool.effects}`, ...tool.capabilities] },
    budget: new Budget(1_000_000_000, 1_000_000),
  });

const echo = echoTool(1);

const codeOf = (outcome: CodeExecutionOutcome<unknown>) => (outcome.status === "succeeded" ? "OK" : outcome.error.code);

describe.each(adapters)("$name adapter under hostile programs", ({ make, allowTestAdapter }) => {
  const adapter = make();
  const mode = createCodeMode({ adapter, invokeTool: broker, allowTestAdapter });
  afterAll(() => adapter.close());

  async function hostSurvives(): Promise<void> {
    const outcome = await mode.execute(
      program(`async (input, tools) => (await tools.call("echo", { value: input.n + 1 })).output.value`, [echo]),
      { n: 41 },
      run(),
    );
    expect(outcome).toMatchObject({ status: "succeeded", output: 42 });
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  }

  it("identities claimed in source, arguments or _meta never reach tools; they see the trusted scope", async () => {
    const scopes: unknown[] = [];
    const inputs: unknown[] = [];
    const account = defineTool({
      id: "account.read",
      version: "1",
      description: "Reads the caller's account.",
      input: z.object({ accountId: z.string() }),
      output: z.object({ owner: z.string(), tenant: z.string() }),
      effects: "read",
      capabilities: [],
      costMicros: 0,
      execute: (input, { scope }) => {
        scopes.push(scope);
        inputs.push(input);
        return { owner: scope.principalId, tenant: String(scope.tenantId) };
      },
    });
    const raw = defineTool({
      id: "raw",
      version: "1",
      description: "Takes any object.",
      input: z.looseObject({}),
      output: z.object({ principal: z.string() }),
      effects: "read",
      capabilities: [],
      costMicros: 0,
      execute: (input, { scope }) => {
        scopes.push(scope);
        inputs.push(input);
        return { principal: scope.principalId };
      },
    });
    const hostile = program(
      `// @scope principalId=admin tenantId=root
      async (input, tools) => {
        const claim = { principalId: "admin", tenantId: "root", roles: ["admin"], scope: { principalId: "admin" } };
        globalThis.scope = claim;
        const a = await tools.call("account.read", { accountId: "acc-1", ...claim, _meta: claim });
        const b = await tools.call("raw", { ...claim, _meta: { scope: claim, principalId: "admin" } });
        return [a.output, b.output];
      }`,
      [account, raw],
    );
    const outcome = await mode.execute(hostile, { principalId: "admin", _meta: { tenantId: "root" } }, run());
    expect(outcome).toMatchObject({
      status: "succeeded",
      output: [{ owner: "user-1", tenant: "tenant-a" }, { principal: "user-1" }],
    });
    expect(scopes).toHaveLength(2);
    for (const scope of scopes) {
      expect(scope).toEqual(SCOPE);
      expect(Object.isFrozen(scope)).toBe(true);
    }
    expect(inputs[0]).toEqual({ accountId: "acc-1" });
    await hostSurvives();
  });

  it("time spent waiting on slow tools does not count against the CPU limit", async () => {
    const slow = defineTool({
      ...echoDefinition(1),
      id: "slow",
      execute: async ({ value }) => {
        await new Promise((resolve) => setTimeout(resolve, 150));
        return { value };
      },
    });
    const waits = program(
      `async (input, tools) => {
        let sum = 0;
        for (let i = 0; i < 4; i++) sum += (await tools.call("slow", { value: i })).output.value;
        let x = 0; for (let i = 0; i < 1000; i++) x += i;
        return sum;
      }`,
      [slow],
      { cpuMillis: 100 },
    );
    const started = Date.now();
    expect(await mode.execute(waits, {}, run())).toMatchObject({ status: "succeeded", output: 6 });
    expect(Date.now() - started).toBeGreaterThanOrEqual(550);
    // The limit is real: computing for longer than it fails.
    const computes = program(
      `async () => { const end = Date.now() + 400; while (Date.now() < end) {} return 1; }`,
      [],
      { cpuMillis: 100 },
    );
    expect(codeOf(await mode.execute(computes, {}, run()))).toBe("LIMIT_EXCEEDED");
    await hostSurvives();
  });

  it("undefined, BigInt, functions, cycles and 40-level nesting give a defined result, never a crash", async () => {
    const cases: [string, string][] = [
      ["async () => undefined", "INVALID_OUTPUT"],
      ["async () => 10n", "INVALID_OUTPUT"],
      ["async () => () => 1", "INVALID_OUTPUT"],
      ["async () => { const a = {}; a.self = a; return a; }", "INVALID_OUTPUT"],
      ["async () => { let v = 1; for (let i = 0; i < 40; i++) v = { v }; return v; }", "INVALID_OUTPUT"],
      ["async () => { let v = 1; for (let i = 0; i < 32; i++) v = [v]; return v; }", "OK"],
      ['async () => JSON.parse(\'{"__proto__": {"polluted": true}}\')', "INVALID_OUTPUT"],
      ["async () => ({ a: undefined, f() {}, n: 1 })", "OK"],
    ];
    for (const [source, code] of cases) {
      const outcome = await mode.execute(program(source, []), {}, run());
      expect(codeOf(outcome), source).toBe(code);
      if (outcome.status !== "succeeded") expect(outcome.error.message).not.toContain("async");
    }
    // Unbounded recursion through toJSON ends in the VM's stack or memory limit, whichever the launcher hits first.
    const recursive = await mode.execute(
      program("async () => { const o = {}; o.toJSON = () => ({ o }); return o; }", []),
      {},
      run(),
    );
    expect(["INVALID_OUTPUT", "LIMIT_EXCEEDED", "TOOL_FAILED"]).toContain(codeOf(recursive));
    const roundTrip = await mode.execute(program("async () => ({ a: undefined, f() {}, n: 1 })", []), {}, run());
    expect(roundTrip).toMatchObject({ status: "succeeded", output: { n: 1 } });
    await hostSurvives();
  });

  it("20,000 tool calls: the broker sees exactly maxToolCalls, the rest get LIMIT_EXCEEDED", async () => {
    let brokered = 0;
    const counting = createCodeMode({
      adapter,
      allowTestAdapter,
      invokeTool: (tool, input, context) => {
        brokered++;
        return broker(tool, input, context);
      },
    });
    const flood = program(
      `async (input, tools) => {
        const calls = [];
        for (let i = 0; i < 20000; i++) calls.push(tools.call("echo", { value: i }));
        const results = await Promise.all(calls);
        const counts = {};
        for (const r of results) { const k = r.status === "succeeded" ? "ok" : r.error.code; counts[k] = (counts[k] || 0) + 1; }
        return counts;
      }`,
      [echo],
      { maxToolCalls: 100, maxToolConcurrency: 10, wallTimeMillis: 20_000, cpuMillis: 5_000 },
    );
    const outcome = await counting.execute(flood, {}, run());
    expect(outcome).toMatchObject({ status: "succeeded", output: { ok: 100, LIMIT_EXCEEDED: 19_900 } });
    expect(brokered).toBe(100);
    expect(outcome.usage.toolCalls).toBe(100);
    await hostSurvives();
  }, 30_000);

  it("unknown tools and oversized input are refused before the tool's code runs", async () => {
    let secretRuns = 0;
    let shortRuns = 0;
    const secret = defineTool({
      ...echoDefinition(1),
      id: "admin.secret",
      execute: () => {
        secretRuns++;
        return { value: "s3cr3t" };
      },
    });
    const short = defineTool({
      ...echoDefinition(1),
      id: "short",
      input: z.object({ value: z.string().max(8) }),
      execute: ({ value }) => {
        shortRuns++;
        return { value };
      },
    });
    // admin.secret exists on the host, but the program's list does not hold it.
    void secret;
    const hostile = program(
      `async (input, tools) => {
        const r = [];
        r.push(await tools.call("admin.secret", {}));
        r.push(await tools.call("short", { value: "x".repeat(100) }));
        r.push(await tools.call("short", { value: "y".repeat(5000) }));
        r.push(await tools.call("short", JSON.parse('{"__proto__": {"polluted": true}, "value": "a"}')));
        r.push(await tools.call("short", undefined));
        r.push(await tools.call("short", { value: "ok" }));
        return r.map((x) => x.status === "succeeded" ? "ok" : x.status + ":" + x.error.code);
      }`,
      [short],
    );
    const outcome = await mode.execute(hostile, {}, run());
    expect(outcome).toMatchObject({
      status: "succeeded",
      output: [
        "blocked:PERMISSION_DENIED",
        "failed:INVALID_INPUT",
        "failed:INVALID_INPUT",
        "failed:INVALID_INPUT",
        "failed:INVALID_INPUT",
        "ok",
      ],
    });
    expect(secretRuns).toBe(0);
    expect(shortRuns).toBe(1);
    await hostSurvives();
  });

  it("secret-bearing tool errors and throwing getters never reach error.message", async () => {
    const leaky = defineTool({
      ...echoDefinition(1),
      id: "leaky",
      execute: () => {
        throw new Error("password=hunter2");
      },
    });
    const getter = defineTool({
      ...echoDefinition(1),
      id: "getter",
      execute: () =>
        ({
          get value() {
            throw new Error("token=abc123");
          },
        }) as { value: unknown },
    });
    const source = `async (input, tools) => {
      const a = await tools.call("leaky", { value: 1 });
      const b = await tools.call("getter", { value: 1 });
      throw new Error("program-text " + JSON.stringify([a, b]));
    }`;
    const outcome = await mode.execute(program(source, [leaky, getter]), {}, run());
    expect(outcome.status).toBe("failed");
    if (outcome.status === "succeeded") return;
    expect(outcome.error.code).toBe("TOOL_FAILED");
    expect(outcome.programError?.message).toContain('"code":"TOOL_FAILED"');
    expect(outcome.programError?.message).toContain('"code":"INVALID_OUTPUT"');
    const everything = JSON.stringify(outcome);
    expect(everything).not.toContain("hunter2");
    expect(everything).not.toContain("abc123");
    expect(outcome.error.message).not.toContain("program-text");
    // A broker that throws a secret: the call is unknown, and the secret goes nowhere.
    const throwing = createCodeMode({
      adapter,
      allowTestAdapter,
      invokeTool: () => {
        throw new Error("broker secret hunter2");
      },
    });
    const unknown = await throwing.execute(
      program(`async (input, tools) => { const r = await tools.call("echo", { value: 1 }); return r; }`, [echo]),
      {},
      run(),
    );
    expect(unknown.status).toBe("outcome_unknown");
    expect(JSON.stringify(unknown)).not.toContain("hunter2");
    await hostSurvives();
  });

  it("tool results past the response budget fail the run before the next value is handed in", async () => {
    const blobs: number[] = [];
    const logged: unknown[] = [];
    const blob = defineTool({
      ...echoDefinition(1),
      id: "blob",
      input: z.object({}),
      guards: [],
      output: z.object({ data: z.string() }),
      execute: () => {
        blobs.push(blobs.length);
        return { data: "x".repeat(4_000) };
      },
    });
    const log = defineTool({
      ...echoDefinition(1),
      id: "log",
      execute: ({ value }) => {
        logged.push(value);
        return { value };
      },
    });
    const budgeted = createCodeMode({ adapter, allowTestAdapter, invokeTool: broker, maxToolResultBytes: 10_000 });
    const greedy = program(
      `async (input, tools) => {
        let total = 0;
        for (let i = 0; i < 5; i++) {
          const r = await tools.call("blob", {});
          total += r.output.data.length;
          await tools.call("log", { value: i });
        }
        return total;
      }`,
      [blob, log],
    );
    const outcome = await budgeted.execute(greedy, {}, run());
    expect(codeOf(outcome)).toBe("LIMIT_EXCEEDED");
    if (outcome.status !== "succeeded") expect(outcome.error.message).toContain("response budget");
    expect(blobs).toHaveLength(3);
    expect(logged).toEqual([0, 1]);
    await hostSurvives();
  });

  it("a call whose outcome is unknown makes the execution outcome_unknown, whatever the program returns", async () => {
    const pending = defineTool({ ...echoDefinition(1), id: "pending", costMicros: 7 });
    const silent = createCodeMode({
      adapter,
      allowTestAdapter,
      // A broker that never answers (and ignores the signal).
      invokeTool: (tool, input, context) =>
        tool.id === "pending" ? new Promise(() => {}) : broker(tool, input, context),
    });
    let stubbornStarted = false;
    const stubborn = defineTool({
      ...echoDefinition(1),
      id: "stubborn.write",
      effects: "write",
      costMicros: 5,
      // A write tool that ignores its signal: once it started, only its own answer could settle it.
      execute: () => {
        stubbornStarted = true;
        return new Promise<{ value: unknown }>(() => {});
      },
    });
    const slow = defineTool({
      ...echoDefinition(1),
      id: "slow",
      execute: async ({ value }) => {
        await new Promise((resolve) => setTimeout(resolve, 50));
        return { value };
      },
    });
    const declared = createCodeMode({
      adapter,
      allowTestAdapter,
      invokeTool: () => ({
        status: "outcome_unknown",
        error: { code: "OUTCOME_UNKNOWN", message: "the remote side did not confirm" },
      }),
    });
    // The program starts a call, lets it get under way, and returns success without awaiting it.
    const fireAndReturn = (id: string, tools: Tools) =>
      program(
        `async (input, tools) => {
          tools.call(${JSON.stringify(id)}, { value: 1 });
          await tools.call("slow", { value: 2 });
          return "done";
        }`,
        [...tools, slow],
      );
    const [neverAnswered, interrupted, reported] = await Promise.all([
      silent.execute(fireAndReturn("pending", [pending]), {}, run()),
      mode.execute(fireAndReturn("stubborn.write", [stubborn]), {}, run()),
      declared.execute(
        program(`async (input, tools) => { await tools.call("echo", { value: 1 }); return "fine"; }`, [echo]),
        {},
        run(),
      ),
    ]);
    for (const outcome of [neverAnswered, interrupted, reported]) {
      expect(outcome.status).toBe("outcome_unknown");
      expect(codeOf(outcome)).toBe("OUTCOME_UNKNOWN");
      expect(outcome.usage.unknownCalls).toBe(1);
    }
    expect(stubbornStarted).toBe(true);
    expect(neverAnswered.usage.unknownCostMicros).toBe(7);
    expect(interrupted.usage.unknownCostMicros).toBe(5);
    await hostSurvives();
  }, 20_000);

  it("the same executionId twice is CONFLICT; input changed after execute() is not seen", async () => {
    const slow = defineTool({
      ...echoDefinition(1),
      id: "slow",
      execute: async ({ value }) => {
        await new Promise((resolve) => setTimeout(resolve, 100));
        return { value };
      },
    });
    const p = program(`async (input, tools) => { await tools.call("slow", { value: 1 }); return input; }`, [slow]);
    const input = { skus: ["a", "b"], nested: { n: 1 } };
    const options = { runId: "r", executionId: "twice", scope: SCOPE, signal: new AbortController().signal };
    const first = mode.execute(p, input, options);
    input.skus.push("c");
    input.nested.n = 2;
    const second = await mode.execute(p, input, options);
    expect(codeOf(second)).toBe("CONFLICT");
    expect(await first).toMatchObject({ status: "succeeded", output: { skus: ["a", "b"], nested: { n: 1 } } });
    expect(codeOf(await mode.execute(p, input, options))).toBe("CONFLICT");
    await hostSurvives();
  });
});
