/**
 * Governed programs (docs/governed-programs.md): the page's first example, programs and digests, the executor's
 * outcomes (every status and code it can reach), limits, adapters and their qualification.
 */

import {
  AirlockError,
  Budget,
  createToolRegistry,
  defineTool,
  invokeTool,
  type JsonValue,
  type Outcome,
  z,
} from "airlock-codemode";
import { type ClosableSandboxAdapter, createQuickJsSandboxAdapter } from "airlock-codemode/adapter-code-quickjs";
import {
  CODE_PROGRAM_LIMITS,
  type CodeExecutionOutcome,
  type CodeModeInvokeTool,
  type CodeProgramLimits,
  createCodeMode,
  defineCodeProgram,
  defineSandboxAdapter,
  EXECUTION_ID_MEMORY,
  type SandboxResult,
} from "airlock-codemode/code-mode";
import { afterAll, describe, expect, it } from "vitest";
import { echoDefinition, echoTool } from "./helpers/code-mode.ts";

describe("the first example of docs/governed-programs.md", () => {
  // biome-ignore format: the page's example as the page lays it out, with assertions in place of its console.log.
  it("runs and gives the result its comment states", async () => {
    const price = defineTool({
      id: 'catalog.price', version: '1', description: 'Price of one product in cents.',
      input: z.object({ sku: z.string() }), output: z.object({ cents: z.number().int() }),
      effects: 'read', capabilities: [], costMicros: 0,
      execute: async ({ sku }) => ({ cents: sku.length * 100 }),
    });
    const program = defineCodeProgram({
      id: 'catalog.total', version: '1', intent: 'Add up the prices of several products.', language: 'javascript',
      source: `async (input, tools) => {
        let total = 0;
        for (const sku of input.skus) {
          const result = await tools.call('catalog.price', { sku });
          if (result.status !== 'succeeded') throw new Error('price lookup failed');
          total += result.output.cents;
        }
        return { totalCents: total };
      }`,
      input: z.object({ skus: z.array(z.string()).max(20) }), output: z.object({ totalCents: z.number().int() }),
      inputSchemaId: 'catalog.skus.v1', outputSchemaId: 'catalog.total.v1', tools: [price],
      limits: { ...CODE_PROGRAM_LIMITS, maxToolCalls: 20 },
    });
    const budget = new Budget(0, 20);
    const mode = createCodeMode({
      adapter: createQuickJsSandboxAdapter(),
      invokeTool: (tool, input, context) => invokeTool(tool, input, {
        runId: context.runId, callId: context.callId, scope: context.scope, signal: context.signal,
        permissions: { allow: [`tool:${tool.id}`, 'effect:read'] }, budget,
      }),
    });
    const outcome = await mode.execute(program, { skus: ['ab', 'cde'] }, {
      runId: 'run-1', executionId: 'run-1:total', scope: { principalId: 'local', projectId: 'demo' },
      signal: AbortSignal.timeout(10_000),
    });
    // outcome.status === 'succeeded', outcome.output => { totalCents: 500 }, outcome.usage => tool calls made, costs
    try {
      expect(outcome.status).toBe("succeeded");
      if (outcome.status !== "succeeded") return;
      const total: number = outcome.output.totalCents;
      expect(total).toBe(500);
      expect(outcome.usage).toEqual({
        toolCalls: 2,
        unknownCalls: 0,
        knownCostMicros: 0,
        unknownCostMicros: 0,
        maximumCostMicros: 0,
      });
      expect(budget.calls).toBe(2);
      // The same executionId again is refused.
      const again = await mode.execute(program, { skus: ["ab"] }, {
        runId: "run-1",
        executionId: "run-1:total",
        scope: { principalId: "local", projectId: "demo" },
        signal: AbortSignal.timeout(10_000),
      });
      expect(again.status).toBe("failed");
      if (again.status !== "succeeded") expect(again.error.code).toBe("CONFLICT");
    } finally {
      await mode.adapter.close();
    }
  });

  it("type-checks a broker that casts invokeTool's outcome, and a feedback function over outcomes", () => {
    const tool = defineTool({
      id: "t",
      version: "1",
      description: "",
      input: z.object({}),
      output: z.object({}),
      effects: "read",
      capabilities: [],
      costMicros: 0,
      execute: () => ({}),
    });
    const budget = new Budget(0, 1);
    const broker: CodeModeInvokeTool = (t, input, context) =>
      invokeTool(t, input, {
        runId: context.runId,
        callId: context.callId,
        scope: context.scope,
        signal: context.signal,
        permissions: { allow: [`tool:${t.id}`, "effect:read"] },
        budget,
      }) as Promise<Outcome<JsonValue>>;
    function feedback(outcome: CodeExecutionOutcome<unknown>): string {
      if (outcome.status === "succeeded") return "ok";
      if (outcome.programError)
        return `Your program threw ${outcome.programError.name}: ${outcome.programError.message}`;
      return `${outcome.error.code}: ${outcome.error.message}`;
    }
    const usage = { toolCalls: 0, unknownCalls: 0, knownCostMicros: 0, unknownCostMicros: 0, maximumCostMicros: 0 };
    expect(feedback({ status: "succeeded", output: 1, usage, evidence: [] })).toBe("ok");
    expect(
      feedback({
        status: "failed",
        error: { code: "TOOL_FAILED", message: "m" },
        programError: { name: "Error", message: "boom" },
        usage,
        evidence: [],
      }),
    ).toBe("Your program threw Error: boom");
    expect(typeof broker).toBe("function");
    expect(tool.id).toBe("t");
  });
});

// ---- shared fixtures for the rest of the file ----

const SCOPE = { principalId: "user-1", projectId: "demo" };
const LIMITS: CodeProgramLimits = { ...CODE_PROGRAM_LIMITS, maxToolCalls: 50, maxToolConcurrency: 4 };

let sequence = 0;
/** A signal that never aborts, for executions the test does not cancel (execute requires one). */
const NO_ABORT = new AbortController().signal;
const run = (extra: Partial<{ signal: AbortSignal; executionId: string }> = {}) => ({
  runId: "run",
  executionId: `exec-${++sequence}`,
  scope: SCOPE,
  signal: NO_ABORT,
  ...extra,
});

const echo = echoTool(10);

function makeProgram(
  source: string,
  options: { tools?: Parameters<typeof defineCodeProgram>[0]["tools"]; limits?: Partial<CodeProgramLimits> } = {},
) {
  return defineCodeProgram({
    id: "test.program",
    version: "1",
    intent: "A test.",
    language: "javascript",
    source,
    input: z.unknown(),
    output: z.unknown(),
    inputSchemaId: "any.v1",
    outputSchemaId: "any.v1",
    tools: options.tools ?? [echo],
    limits: { ...LIMITS, ...options.limits },
  });
}

const allowAll: CodeModeInvokeTool = (tool, input, context) =>
  invokeTool(tool, input, {
    runId: context.runId,
    callId: context.callId,
    scope: context.scope,
    signal: context.signal,
    permissions: { allow: [`tool:${tool.id}`, `effect:${tool.effects}`, ...tool.capabilities] },
    budget: new Budget(1_000_000, 1_000_000),
  });

const adapter: ClosableSandboxAdapter = createQuickJsSandboxAdapter({ poolSize: 2 });
const mode = createCodeMode({ adapter, invokeTool: allowAll });
afterAll(() => adapter.close());

/** A code mode that allows every call and keeps the context each call gave its broker. */
function spying() {
  const contexts: Parameters<CodeModeInvokeTool>[2][] = [];
  const spy = createCodeMode({
    adapter,
    invokeTool: (tool, input, context) => {
      contexts.push(context);
      return allowAll(tool, input, context);
    },
  });
  return { spy, contexts };
}

function codeOf(outcome: CodeExecutionOutcome<unknown>): string {
  return outcome.status === "succeeded" ? "OK" : outcome.error.code;
}

describe("programs", () => {
  it("are frozen, carry a SHA-256 digest over source, tools, limits and metadata, and require every limit", () => {
    const a = makeProgram("async () => 1");
    expect(Object.isFrozen(a)).toBe(true);
    expect(Object.isFrozen(a.limits)).toBe(true);
    expect(a.digest).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(makeProgram("async () => 1").digest).toBe(a.digest);
    expect(makeProgram("async () => 1\r\n").digest).toBe(makeProgram("async () => 1\n").digest);
    expect(makeProgram("async () => 2").digest).not.toBe(a.digest);
    expect(makeProgram("async () => 1", { limits: { cpuMillis: 999 } }).digest).not.toBe(a.digest);
    expect(makeProgram("async () => 1", { tools: [] }).digest).not.toBe(a.digest);
    const echo2 = defineTool({ ...echoDefinition(10), version: "2", execute: ({ value }) => ({ value }) });
    expect(makeProgram("async () => 1", { tools: [echo2] }).digest).not.toBe(a.digest);
    expect(a.maximumCostMicros).toBe(10 * LIMITS.maxToolCalls);

    const { maxToolConcurrency: _omitted, ...missing } = LIMITS;
    expect(() => makeProgram("async () => 1", { limits: { maxToolConcurrency: undefined } })).toThrow(AirlockError);
    expect(() =>
      defineCodeProgram({ ...definitionOf(a), limits: missing as unknown as CodeProgramLimits }),
    ).toThrowError(/maxToolConcurrency is required/);
    for (const bad of [{ cpuMillis: 0 }, { memoryBytes: 10 }, { maxToolConcurrency: 0 }, { wallTimeMillis: 1.5 }]) {
      try {
        makeProgram("async () => 1", { limits: bad });
        expect.unreachable();
      } catch (error) {
        expect(error).toBeInstanceOf(AirlockError);
        expect((error as AirlockError).code).toBe("INVALID_CONFIG");
      }
    }
    expect(() =>
      defineCodeProgram({ ...definitionOf(a), limits: { ...LIMITS, extra: 1 } as CodeProgramLimits }),
    ).toThrow(/program limits has no limit "extra"/);
    expect(() => defineCodeProgram({ ...definitionOf(a), language: "python" as "javascript" })).toThrow(AirlockError);
    expect(() => defineCodeProgram({ ...definitionOf(a), tools: [{ ...echo }] })).toThrow(/defineTool/);
    expect(() => defineCodeProgram({ ...definitionOf(a), tools: [echo, echo] })).toThrow(/distinct/);
  });

  it("refuses programs and adapters that Airlock did not make (INVALID_CONFIG)", async () => {
    const program = makeProgram("async () => 1");
    const copy = { ...program };
    const outcome = await mode.execute(copy as typeof program, {}, run());
    expect(outcome.status).toBe("failed");
    expect(codeOf(outcome)).toBe("INVALID_CONFIG");
    const fakeAdapter = { ...adapter };
    expect(() => createCodeMode({ adapter: fakeAdapter, invokeTool: allowAll })).toThrowError(
      expect.objectContaining({ code: "INVALID_CONFIG" }),
    );
    const bad = await mode.execute(
      program,
      {},
      { runId: "", executionId: "x-bad-run", scope: SCOPE, signal: NO_ABORT },
    );
    expect(codeOf(bad)).toBe("INVALID_CONFIG");
    const badScope = await mode.execute(
      program,
      {},
      {
        runId: "r",
        executionId: "x-bad-scope",
        scope: { projectId: "no principal" } as unknown as typeof SCOPE,
        signal: NO_ABORT,
      },
    );
    expect(codeOf(badScope)).toBe("INVALID_CONFIG");
  });

  it("refuses misspelt fields and options, naming them (INVALID_CONFIG)", async () => {
    const program = makeProgram("async () => 1");
    expect(() => defineCodeProgram({ ...definitionOf(program), limit: LIMITS } as never)).toThrow(
      /a program definition has no field "limit"/,
    );
    // A program's own fields are accepted: one derives from another by spreading it.
    expect(defineCodeProgram({ ...program, id: "derived" }).id).toBe("derived");
    expect(() => createCodeMode({ adapter, invokeTool: allowAll, maxToolResultByte: 10 } as never)).toThrowError(
      expect.objectContaining({ code: "INVALID_CONFIG", message: expect.stringMatching(/"maxToolResultByte"/) }),
    );
    expect(() => createQuickJsSandboxAdapter({ poolsize: 1 } as never)).toThrowError(
      expect.objectContaining({
        code: "INVALID_CONFIG",
        message:
          'createQuickJsSandboxAdapter has no option "poolsize" (it takes poolSize, maxPoolSize, maxVmsPerWorker, wasmPath)',
      }),
    );
    const misspelt = await mode.execute(program, {}, { ...run(), signa: AbortSignal.timeout(1) } as never);
    expect(misspelt).toMatchObject({
      status: "failed",
      error: { code: "INVALID_CONFIG", message: expect.stringMatching(/^execute has no option "signa"/) },
    });
  });
});

function definitionOf(program: ReturnType<typeof makeProgram>) {
  return {
    id: program.id,
    version: program.version,
    intent: program.intent,
    language: program.language,
    source: program.source,
    input: program.input,
    output: program.output,
    inputSchemaId: program.inputSchemaId,
    outputSchemaId: program.outputSchemaId,
    tools: program.tools,
    limits: program.limits,
  };
}

describe("execution outcomes", () => {
  it("refuses input that is not JSON within maxInputBytes or does not match the schema (INVALID_INPUT)", async () => {
    const typed = defineCodeProgram({
      ...definitionOf(makeProgram("async (input) => input.n * 2")),
      input: z.object({ n: z.number() }),
      output: z.number(),
    });
    const ok = await mode.execute(typed, { n: 21 }, run());
    expect(ok).toMatchObject({ status: "succeeded", output: 42 });
    expect(codeOf(await mode.execute(typed, { n: "21" }, run()))).toBe("INVALID_INPUT");
    expect(codeOf(await mode.execute(typed, { n: 1n }, run()))).toBe("INVALID_INPUT");
    expect(codeOf(await mode.execute(typed, JSON.parse('{"n": 1, "__proto__": {"x": 1}}'), run()))).toBe(
      "INVALID_INPUT",
    );
    expect(codeOf(await mode.execute(typed, { n: 1, at: new Date() }, run()))).toBe("INVALID_INPUT");
    const big = await mode.execute(typed, { n: 1, pad: "x".repeat(LIMITS.maxInputBytes) }, run());
    expect(codeOf(big)).toBe("INVALID_INPUT");
    if (big.status !== "succeeded") expect(big.error.message).toContain("maxInputBytes");
  });

  it("refuses output that does not match the schema or is not JSON within maxOutputBytes (INVALID_OUTPUT)", async () => {
    const typed = defineCodeProgram({
      ...definitionOf(makeProgram("async (input) => input.value")),
      input: z.object({ value: z.unknown() }),
      output: z.object({ total: z.number() }),
      limits: { ...LIMITS, maxOutputBytes: 1_000 },
    });
    expect(await mode.execute(typed, { value: { total: 3 } }, run())).toMatchObject({
      status: "succeeded",
      output: { total: 3 },
    });
    expect(codeOf(await mode.execute(typed, { value: { total: "3" } }, run()))).toBe("INVALID_OUTPUT");
    const big = await mode.execute(typed, { value: { total: 1, pad: "y".repeat(990) } }, run());
    expect(codeOf(big)).toBe("INVALID_OUTPUT");
    if (big.status !== "succeeded") expect(big.error.message).toContain("maxOutputBytes");
    const huge = makeProgram(`async () => ({ total: 1, pad: "z".repeat(3000000) })`, {
      limits: { maxOutputBytes: 1_000 },
    });
    expect(codeOf(await mode.execute(huge, {}, run()))).toBe("INVALID_OUTPUT");
  });

  it("reports a program's own error as programError, cut to 128 and 1,024 characters, never in error.message", async () => {
    const program = makeProgram(
      `async () => { const e = new Error("secret-in-program " + "m".repeat(5000)); Object.defineProperty(e, "name", { value: "N".repeat(500) }); throw e; }`,
    );
    const outcome = await mode.execute(program, {}, run());
    expect(outcome.status).toBe("failed");
    if (outcome.status === "succeeded") return;
    expect(outcome.error.code).toBe("TOOL_FAILED");
    expect(outcome.programError?.name).toBe("N".repeat(128));
    expect(outcome.programError?.message.length).toBe(1_024);
    expect(outcome.programError?.message.startsWith("secret-in-program")).toBe(true);
    expect(outcome.error.message).not.toContain("secret");
    // A source that does not parse, or is not a function, is refused when defined (test/code-program-source.test.ts).
    for (const source of ["async () => { return ( }", "42"]) {
      expect(() => makeProgram(source)).toThrow(expect.objectContaining({ code: "INVALID_CONFIG" }));
    }
  });

  it("stops a program at its CPU limit and its memory limit (LIMIT_EXCEEDED), and the next one runs", async () => {
    const spin = await mode.execute(
      makeProgram("async () => { while (true) {} }", { limits: { cpuMillis: 50 } }),
      {},
      run(),
    );
    expect(codeOf(spin)).toBe("LIMIT_EXCEEDED");
    if (spin.status !== "succeeded") expect(spin.error.message).toContain("cpuMillis");
    const hog = await mode.execute(
      makeProgram("async () => { const a = []; while (true) a.push(new Array(100000).fill(1)); }", {
        limits: { memoryBytes: 8 * 1024 * 1024 },
      }),
      {},
      run(),
    );
    expect(codeOf(hog)).toBe("LIMIT_EXCEEDED");
    if (hog.status !== "succeeded") expect(hog.error.message).toContain("memoryBytes");
    expect(await mode.execute(makeProgram("async () => 7"), {}, run())).toMatchObject({ output: 7 });
  });

  it("turns deep recursion into a catchable error inside the program", async () => {
    const outcome = await mode.execute(
      makeProgram(
        `async () => { let n = 0; const f = () => { n++; f(); }; try { f(); } catch (e) { return { n, name: e.name }; } }`,
      ),
      {},
      run(),
    );
    expect(outcome.status).toBe("succeeded");
    if (outcome.status !== "succeeded") return;
    const { n, name } = outcome.output as { n: number; name: string };
    expect(n).toBeGreaterThan(500);
    expect(["RangeError", "InternalError"]).toContain(name);
  });

  it("ends at the wall clock with TIMEOUT, and the caller's signal with CANCELLED, after open calls settled", async () => {
    let settledAt = 0;
    const slow = defineTool({
      ...echoDefinition(10),
      id: "slow",
      costMicros: 0,
      execute: (_input, { signal }) =>
        new Promise<{ value: unknown }>((_resolve, reject) =>
          signal.addEventListener("abort", () =>
            setTimeout(() => {
              settledAt = Date.now();
              reject(new Error("aborted"));
            }, 150),
          ),
        ),
    });
    const program = makeProgram(`async (input, tools) => tools.call("slow", { value: 1 })`, {
      tools: [slow],
      limits: { wallTimeMillis: 200 },
    });
    const timedOut = await mode.execute(program, {}, run());
    expect(timedOut.status).toBe("failed");
    expect(codeOf(timedOut)).toBe("TIMEOUT");
    expect(settledAt).toBeGreaterThan(0);
    expect(Date.now()).toBeGreaterThanOrEqual(settledAt);

    settledAt = 0;
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 100);
    const cancelled = await mode.execute(
      makeProgram(`async (input, tools) => tools.call("slow", { value: 1 })`, { tools: [slow] }),
      {},
      run({ signal: controller.signal }),
    );
    expect(cancelled.status).toBe("cancelled");
    expect(codeOf(cancelled)).toBe("CANCELLED");
    expect(settledAt).toBeGreaterThan(0);

    const spin = new AbortController();
    setTimeout(() => spin.abort(), 100);
    const spinning = await mode.execute(
      makeProgram("async () => { while (true) {} }"),
      {},
      run({ signal: spin.signal }),
    );
    expect(spinning.status).toBe("cancelled");
    const before = new AbortController();
    before.abort();
    expect((await mode.execute(makeProgram("async () => 1"), {}, run({ signal: before.signal }))).status).toBe(
      "cancelled",
    );
  });

  it("bounds calls in flight with maxToolConcurrency and queues the rest", async () => {
    let inFlight = 0;
    let most = 0;
    const counted = defineTool({
      ...echoDefinition(10),
      id: "counted",
      execute: async ({ value }) => {
        inFlight++;
        most = Math.max(most, inFlight);
        await new Promise((resolve) => setTimeout(resolve, 10));
        inFlight--;
        return { value };
      },
    });
    const program = makeProgram(
      `async (input, tools) => {
        const results = await Promise.all(Array.from({ length: 20 }, (_, i) => tools.call("counted", { value: i })));
        return results.map((r) => r.status === "succeeded" ? r.output.value : r.error.code);
      }`,
      { tools: [counted], limits: { maxToolConcurrency: 3 } },
    );
    const outcome = await mode.execute(program, {}, run());
    expect(outcome).toMatchObject({ status: "succeeded", output: Array.from({ length: 20 }, (_, i) => i) });
    expect(most).toBe(3);
    expect(outcome.usage.toolCalls).toBe(20);
    expect(outcome.usage.knownCostMicros).toBe(200);
  });

  it("hands the program call results with public codes, never throwing for a tool failure", async () => {
    const failing = defineTool({
      ...echoDefinition(10),
      id: "failing",
      costMicros: 0,
      execute: () => {
        throw new Error("db password is hunter2");
      },
    });
    const writer = defineTool({
      ...echoDefinition(10),
      id: "writer",
      effects: "write",
      costMicros: 0,
      execute: ({ value }) => ({ value }),
    });
    const budget = new Budget(15, 100);
    const strict = createCodeMode({
      adapter,
      invokeTool: (tool, input, context) =>
        invokeTool(tool, input, {
          ...context,
          permissions: { allow: ["tool:echo", "effect:read", "tool:failing", "tool:writer"] },
          budget,
        }),
    });
    const program = makeProgram(
      `async (input, tools) => {
        const seen = [];
        for (const [id, arg] of [["echo", { value: 1 }], ["echo", { value: 2 }], ["failing", { value: 1 }],
                                 ["writer", { value: 1 }], ["nope", {}], ["echo", { wrong: true }]]) {
          const r = await tools.call(id, arg);
          seen.push(r.status === "succeeded" ? "ok" : r.status + ":" + r.error.code + ":" + r.error.message);
        }
        try { await tools.call("echo", { value: 10n }); } catch (e) { seen.push("threw:" + e.name); }
        return seen;
      }`,
      { tools: [echo, failing, writer] },
    );
    const outcome = await strict.execute(program, {}, run());
    expect(outcome.status).toBe("succeeded");
    if (outcome.status !== "succeeded") return;
    const seen = outcome.output as string[];
    expect(seen[0]).toBe("ok");
    expect(seen[1]).toMatch(/^blocked:BUDGET_EXCEEDED:/);
    expect(seen[2]).toBe("failed:TOOL_FAILED:the tool failed");
    expect(seen[3]).toMatch(/^blocked:PERMISSION_DENIED:.*effect:write/);
    expect(seen[4]).toMatch(/^blocked:PERMISSION_DENIED:/);
    expect(seen[5]).toMatch(/^failed:INVALID_INPUT:/);
    expect(seen[6]).toBe("threw:TypeError");
    expect(JSON.stringify(seen)).not.toContain("hunter2");
  });

  it("gives the broker the trusted context: run, call id, scope, signal and the program digest", async () => {
    const { spy, contexts } = spying();
    const program = makeProgram(`async (input, tools) => (await tools.call("echo", { value: 5 })).output.value`);
    const outcome = await spy.execute(
      program,
      {},
      { runId: "r-ctx", executionId: "e-ctx", scope: SCOPE, signal: NO_ABORT },
    );
    expect(outcome).toMatchObject({ status: "succeeded", output: 5 });
    expect(contexts).toHaveLength(1);
    const [context] = contexts;
    expect(context?.runId).toBe("r-ctx");
    expect(context?.callId).toBe("e-ctx:code:1");
    expect(context?.programDigest).toBe(program.digest);
    expect(context?.scope).toEqual(SCOPE);
    expect(Object.isFrozen(context?.scope)).toBe(true);
    expect(context?.signal.aborted).toBe(true);
  });
});

describe("hostile brokers, callers and programs", () => {
  it("makes a call OUTCOME_UNKNOWN when the broker's outcome throws as it is read, keeping its text from the program", async () => {
    const leaky = createCodeMode({
      adapter,
      invokeTool: () => ({
        status: "succeeded",
        get output(): never {
          throw new Error("db password=hunter2");
        },
      }),
    });
    const program = makeProgram(
      `async (input, tools) => { try { const r = await tools.call("echo", { value: 1 }); return r.status + ":" + r.error.code; } catch (e) { return "caught:" + e.message; } }`,
    );
    const outcome = await leaky.execute(program, {}, run());
    // Before, the getter's error reached the program, which caught it, and the run succeeded with no unknown call.
    // Now it is what a broker that throws gives: the call's outcome, and so the execution's, is unknown.
    expect(outcome).toMatchObject({ status: "outcome_unknown", error: { code: "OUTCOME_UNKNOWN" } });
    expect(outcome.usage).toMatchObject({ toolCalls: 1, unknownCalls: 1, unknownCostMicros: echo.costMicros });
    expect(JSON.stringify(outcome)).not.toContain("hunter2");
  });

  it("refuses an executionId whose call ids would be too long, instead of failing every call", async () => {
    const program = makeProgram(`async (input, tools) => (await tools.call("echo", { value: 1 })).status`);
    const longest = 256 - ":code:".length - String(LIMITS.maxToolCalls).length;
    const refused = await mode.execute(program, {}, run({ executionId: "x".repeat(longest + 1) }));
    expect(refused).toMatchObject({ status: "failed", error: { code: "INVALID_CONFIG" } });
    if (refused.status !== "succeeded") expect(refused.error.message).toContain(`1-${longest} characters`);
    const fits = await mode.execute(program, {}, run({ executionId: "y".repeat(longest) }));
    expect(fits).toMatchObject({ status: "succeeded", output: "succeeded" });
  });

  it("reads the caller's options once: changing them while the run goes on changes nothing", async () => {
    const { spy, contexts } = spying();
    const program = makeProgram(`async (input, tools) => (await tools.call("echo", { value: 1 })).status`);
    const options = { runId: "r-once", executionId: `once-${++sequence}`, scope: SCOPE, signal: NO_ABORT };
    const pending = spy.execute(program, {}, options);
    Object.assign(options, { runId: 42, executionId: { not: "a string" } });
    expect(await pending).toMatchObject({ status: "succeeded", output: "succeeded" });
    expect(contexts[0]).toMatchObject({ runId: "r-once", callId: `${`once-${sequence}`}:code:1` });
  });

  it("fails a program that overran cpuMillis inside one long built-in, even if it then finished", async () => {
    const program = makeProgram(
      `async () => { let a = []; for (let i = 0; i < 100000; i++) a = [a]; try { JSON.stringify(a); } catch (e) { return "caught " + e.name; } return "done"; }`,
      { limits: { cpuMillis: 100, wallTimeMillis: 60_000 } },
    );
    const outcome = await mode.execute(program, {}, run());
    expect(outcome).toMatchObject({ status: "failed", error: { code: "LIMIT_EXCEEDED" } });
    if (outcome.status !== "succeeded") expect(outcome.error.message).toContain("cpuMillis");
  });

  it.each([
    ["NaN", "0 / 0"],
    ["Infinity", "1 / 0"],
    ["a Set", "new Set([1, 2])"],
    ["a Map inside an object", "({ m: new Map([[1, 2]]) })"],
    ["undefined in an array", "[1, undefined]"],
    ["a function in an array", "[() => 1]"],
    ["an instance of a class", "new (class Point { constructor() { this.x = 1; } })()"],
  ])(
    "refuses a program output holding %s as INVALID_OUTPUT, instead of turning it into other data",
    async (_, value) => {
      const outcome = await mode.execute(makeProgram(`async () => ({ average: ${value} })`), {}, run());
      expect(codeOf(outcome)).toBe("INVALID_OUTPUT");
    },
  );

  it("gives a program standard JavaScript and its tools argument, and no script globals", async () => {
    const outcome = await mode.execute(
      makeProgram(
        `async (input, t) => [typeof tools, typeof ALL_TOOLS, typeof text, typeof console, typeof store, typeof t.call]`,
      ),
      {},
      run(),
    );
    // Before, the script environment's ALL_TOOLS was still there, and `tools` named the wrapper's own parameter.
    expect(outcome).toMatchObject({
      status: "succeeded",
      output: ["undefined", "undefined", "undefined", "undefined", "undefined", "function"],
    });
  });

  it("keeps JSON's own rules for undefined object members and toJSON", async () => {
    const outcome = await mode.execute(
      makeProgram(`async () => ({ a: 1, gone: undefined, at: new Date(0), nested: Object.create(null) })`),
      {},
      run(),
    );
    expect(outcome).toMatchObject({
      status: "succeeded",
      output: { a: 1, at: "1970-01-01T00:00:00.000Z", nested: {} },
    });
  });
});

describe("per-caller tool sets", () => {
  it("lets a program reach only the tools of the caller it runs for; the broker gets the caller's set", async () => {
    let salaryRuns = 0;
    const salaries = defineTool({
      ...echoDefinition(10),
      id: "hr.salaries",
      roles: ["hr"],
      execute: ({ value }) => {
        salaryRuns++;
        return { value };
      },
    });
    const registry = createToolRegistry([echo, salaries]);
    const viewer = registry.for({ roles: ["viewer"], permissions: ["tool:echo", "effect:read", "tool:hr.salaries"] });
    const hr = registry.for({ roles: ["hr"], permissions: ["tool:echo", "effect:read", "tool:hr.salaries"] });
    expect(viewer.tools.map((t) => t.id)).toEqual(["echo"]);
    const callers: unknown[] = [];
    const scoped = createCodeMode({
      adapter,
      invokeTool: (tool, input, context) => {
        callers.push(context.caller);
        const caller = context.caller;
        if (caller === undefined)
          return { status: "blocked", error: { code: "PERMISSION_DENIED", message: "no caller" } };
        return caller.invoke(tool, input, { ...context, budget: new Budget(1_000, 10) });
      },
    });
    const program = makeProgram(
      `async (input, tools) => [
        (await tools.call("echo", { value: 1 })).status,
        (await tools.call("hr.salaries", { value: 2 })).error?.code ?? "ok",
      ]`,
      { tools: [echo, salaries] },
    );
    expect(await scoped.execute(program, {}, { ...run(), caller: viewer })).toMatchObject({
      status: "succeeded",
      output: ["succeeded", "PERMISSION_DENIED"],
    });
    expect(salaryRuns).toBe(0);
    expect(callers).toEqual([viewer]);
    expect(await scoped.execute(program, {}, { ...run(), caller: hr })).toMatchObject({
      output: ["succeeded", "ok"],
    });
    expect(salaryRuns).toBe(1);
    const forged = { ...viewer, has: () => true };
    expect(codeOf(await scoped.execute(program, {}, { ...run(), caller: forged }))).toBe("INVALID_CONFIG");
  });
});

describe("adapters", () => {
  const answer = (result: SandboxResult) =>
    defineSandboxAdapter({
      id: "fixture",
      version: "1",
      qualification: "test",
      isAvailable: () => true,
      execute: async () => result,
    });

  it("refuses a test-qualified adapter with UNSUPPORTED_PROFILE unless allowTestAdapter", () => {
    const fixture = answer({ status: "succeeded", output: 1 });
    try {
      createCodeMode({ adapter: fixture, invokeTool: allowAll });
      expect.unreachable();
    } catch (error) {
      expect(error).toBeInstanceOf(AirlockError);
      expect((error as AirlockError).code).toBe("UNSUPPORTED_PROFILE");
    }
    expect(createCodeMode({ adapter: fixture, invokeTool: allowAll, allowTestAdapter: true }).adapter).toBe(fixture);
  });

  it("never falls back to the host when the adapter is unavailable", async () => {
    let ran = false;
    const unavailable = defineSandboxAdapter({
      id: "down",
      version: "1",
      qualification: "production",
      isAvailable: async () => false,
      execute: async () => {
        ran = true;
        return { status: "succeeded", output: 1 };
      },
    });
    const outcome = await createCodeMode({ adapter: unavailable, invokeTool: allowAll }).execute(
      makeProgram("async () => 1"),
      {},
      run(),
    );
    expect(codeOf(outcome)).toBe("UNSUPPORTED_PROFILE");
    expect(ran).toBe(false);
    const throwing = defineSandboxAdapter({
      id: "throws",
      version: "1",
      qualification: "production",
      isAvailable: () => {
        throw new Error("probe failed");
      },
      execute: async () => ({ status: "succeeded", output: 1 }),
    });
    expect(
      codeOf(
        await createCodeMode({ adapter: throwing, invokeTool: allowAll }).execute(
          makeProgram("async () => 1"),
          {},
          run(),
        ),
      ),
    ).toBe("UNSUPPORTED_PROFILE");
    const closed = createQuickJsSandboxAdapter({ poolSize: 1 });
    await closed.close();
    expect(
      codeOf(
        await createCodeMode({ adapter: closed, invokeTool: allowAll }).execute(
          makeProgram("async () => 1"),
          {},
          run(),
        ),
      ),
    ).toBe("UNSUPPORTED_PROFILE");
  });

  // Each failure reason's code is a Mayura case (test/compat/mayura/code-mode.test.ts); these are Airlock's outputJson.
  it("takes a sandbox's output as JSON text too, checked before it is parsed", async () => {
    const cases: [SandboxResult, string][] = [
      [{ status: "succeeded", output: { a: 1 } }, "OK"],
      [{ status: "succeeded", outputJson: '{"a":1}' }, "OK"],
      [{ status: "succeeded", outputJson: "{not json" }, "INVALID_OUTPUT"],
      [{ status: "succeeded", outputJson: JSON.stringify("x".repeat(LIMITS.maxOutputBytes)) }, "INVALID_OUTPUT"],
      [{ status: "succeeded", outputJson: 42 } as unknown as SandboxResult, "TOOL_FAILED"],
      [{ status: "weird" } as unknown as SandboxResult, "TOOL_FAILED"],
    ];
    for (const [result, code] of cases) {
      const fixtureMode = createCodeMode({ adapter: answer(result), invokeTool: allowAll, allowTestAdapter: true });
      const outcome = await fixtureMode.execute(makeProgram("async () => 1"), {}, run());
      expect(codeOf(outcome), JSON.stringify(result)).toBe(code);
    }
  });

  it("stops waiting for an adapter that ignores its signal", async () => {
    const stuck = defineSandboxAdapter({
      id: "stuck",
      version: "1",
      qualification: "test",
      isAvailable: () => true,
      execute: () => new Promise<SandboxResult>(() => {}),
    });
    const stuckMode = createCodeMode({ adapter: stuck, invokeTool: allowAll, allowTestAdapter: true });
    const outcome = await stuckMode.execute(
      makeProgram("async () => 1", { limits: { wallTimeMillis: 50 } }),
      {},
      run(),
    );
    expect(codeOf(outcome)).toBe("TIMEOUT");
  });

  it(`remembers the last ${EXECUTION_ID_MEMORY} execution ids (CONFLICT) and forgets older ones`, async () => {
    const instant = defineSandboxAdapter({
      id: "instant",
      version: "1",
      qualification: "test",
      isAvailable: () => true,
      execute: async () => ({ status: "succeeded", output: null }),
    });
    const fast = createCodeMode({ adapter: instant, invokeTool: allowAll, allowTestAdapter: true });
    const program = makeProgram("async () => null");
    const options = (executionId: string) => ({ runId: "r", executionId, scope: SCOPE, signal: NO_ABORT });
    // Running: a second execution with the same id while the first runs.
    const first = fast.execute(program, null, options("id-0"));
    expect(codeOf(await fast.execute(program, null, options("id-0")))).toBe("CONFLICT");
    expect(codeOf(await first)).toBe("OK");
    for (let i = 1; i < EXECUTION_ID_MEMORY; i++) {
      const outcome = await fast.execute(program, null, options(`id-${i}`));
      if (outcome.status !== "succeeded") throw new Error(`execution ${i} failed`);
    }
    expect(codeOf(await fast.execute(program, null, options("id-0")))).toBe("CONFLICT");
    expect(codeOf(await fast.execute(program, null, options("id-new")))).toBe("OK");
    // id-0 was the oldest of the last 100,000 and has now been forgotten; id-1 is still remembered.
    expect(codeOf(await fast.execute(program, null, options("id-0")))).toBe("OK");
    expect(codeOf(await fast.execute(program, null, options("id-2")))).toBe("CONFLICT");
  }, 60_000);
});
