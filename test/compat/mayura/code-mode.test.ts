/**
 * Mayura's code-mode suite (packages/code-mode/test/code-mode.test.ts), ported: programs as frozen, content-addressed
 * artifacts, the executor's containment (no host fallback, a test adapter only on request, the bridge), its limits
 * and configuration errors, and how it reads an adapter's answer. The adapters here are written by the test with
 * `defineSandboxAdapter`, as Mayura's are.
 */
import { Budget, defineTool, invokeTool, type JsonValue, type Outcome, z } from "airlock-codemode";
import {
  type CodeModeInvokeTool,
  createCodeMode,
  defineCodeProgram,
  defineSandboxAdapter,
  type SandboxExecuteRequest,
  type SandboxToolsBridge,
} from "airlock-codemode/code-mode";
import { describe, expect, it } from "vitest";
import { codeOf, double, LIMITS, options, SCOPE } from "./fixtures.ts";

const limits = {
  ...LIMITS,
  cpuMillis: 100,
  wallTimeMillis: 1_000,
  memoryBytes: 32 * 1024 * 1024,
  maxToolInputBytes: 2_048,
};

function program(overrides: Partial<Parameters<typeof defineCodeProgram>[0]> = {}) {
  return defineCodeProgram({
    id: "calculate",
    version: "1.0.0",
    intent: "Calculate a bounded result.",
    language: "javascript",
    source: `async (input, tools) => (await tools.call("number.double", input)).output`,
    input: z.object({ value: z.number() }),
    output: z.object({ value: z.number() }),
    inputSchemaId: "calculate.input.v1",
    outputSchemaId: "calculate.output.v1",
    tools: [double],
    limits,
    ...overrides,
  });
}

type Answer = Awaited<ReturnType<Parameters<typeof defineSandboxAdapter>[0]["execute"]>>;

/** A test-qualified adapter whose `execute` the test writes. */
function adapter(
  execute: (request: SandboxExecuteRequest) => Promise<Answer>,
  overrides: Partial<Parameters<typeof defineSandboxAdapter>[0]> = {},
) {
  return defineSandboxAdapter({
    id: "sandbox.test",
    version: "1.0.0",
    qualification: "test",
    isAvailable: () => true,
    execute,
    ...overrides,
  });
}

const unused: CodeModeInvokeTool = () => {
  throw new Error("the broker must not be called");
};

/** A code mode over a test adapter that answers `answer` whatever the program. */
const answering = (answer: unknown, invokeTool: CodeModeInvokeTool = unused) =>
  createCodeMode({ adapter: adapter(async () => answer as Answer), allowTestAdapter: true, invokeTool });

describe("programs are immutable, content-addressed artifacts", () => {
  it("are frozen, digest their content, and forgeries are refused", async () => {
    const definition = program();
    expect(definition.digest).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(Object.isFrozen(definition)).toBe(true);
    expect(Object.isFrozen(definition.tools)).toBe(true);
    expect(Object.isFrozen(definition.limits)).toBe(true);
    expect(program().digest).toBe(definition.digest);
    expect(program({ source: "async () => ({ value: 3 })" }).digest).not.toBe(definition.digest);
    expect(program({ language: "typescript" }).digest).not.toBe(definition.digest);
    expect(program({ approvedImports: ["left-pad"] }).digest).not.toBe(definition.digest);

    const mode = answering({ status: "succeeded", output: { value: 2 } });
    const forged = await mode.execute({ ...definition } as typeof definition, { value: 1 }, options());
    expect(forged).toMatchObject({ status: "failed", error: { code: "INVALID_CONFIG" } });
  });

  it("have upper bounds on their limits, and ids that start with a letter", () => {
    const refused = (overrides: Partial<Parameters<typeof defineCodeProgram>[0]>, code = "INVALID_CONFIG") =>
      expect(() => program(overrides)).toThrowError(expect.objectContaining({ code }));
    refused({ limits: { ...limits, memoryBytes: 2 * 1024 * 1024 * 1024 + 1 } });
    refused({ limits: { ...limits, maxToolConcurrency: 129, maxToolCalls: 129 } });
    refused({ limits: { ...limits, wallTimeMillis: 60 * 60 * 1000 + 1 } });
    refused({ limits: { ...limits, cpuMillis: 0 } });
    refused({ id: "1-bad" });
    refused({ approvedImports: ["node:fs"] });
    refused({ approvedImports: ["/etc/passwd"] });
    refused({ approvedImports: ["a", "a"] });
    expect(() => program({ limits: { ...limits, wallTimeMillis: 60 * 60 * 1000 } })).not.toThrow();
    expect(() => program({ limits: { ...limits, cpuMillis: 0 } })).toThrowError(/limits\.cpuMillis/);
    expect(() => program({ extra: true } as never)).toThrowError(/"extra"/);
    const { source: _source, ...withoutSource } = { ...program(), source: "" };
    expect(() => defineCodeProgram(withoutSource as never)).toThrowError(
      expect.objectContaining({ code: "INVALID_CONFIG" }),
    );
  });

  it("refuse a maximum cost past Number.MAX_SAFE_INTEGER with LIMIT_EXCEEDED", () => {
    const costly = defineTool({
      id: "costly",
      version: "1",
      description: "A tool whose cost cannot be multiplied.",
      effects: "none",
      capabilities: [],
      input: z.object({ value: z.number() }),
      output: z.object({ value: z.number() }),
      costMicros: Number.MAX_SAFE_INTEGER,
      execute: (input) => input,
    });
    expect(() => program({ tools: [costly], limits: { ...limits, maxToolCalls: 2 } })).toThrowError(
      expect.objectContaining({ code: "LIMIT_EXCEEDED" }),
    );
    expect(program({ tools: [costly], limits: { ...limits, maxToolCalls: 1 } }).maximumCostMicros).toBe(
      Number.MAX_SAFE_INTEGER,
    );
  });
});

describe("the executor", () => {
  it("never falls back to the host, and takes a test adapter only when asked", async () => {
    let runs = 0;
    const execute = async () => {
      runs++;
      return { status: "succeeded" as const, output: { value: 2 } };
    };
    expect(() => createCodeMode({ adapter: adapter(execute), invokeTool: unused })).toThrowError(
      expect.objectContaining({ code: "UNSUPPORTED_PROFILE" }),
    );
    const production = adapter(execute, { id: "sandbox.production", qualification: "production" });
    expect(() => createCodeMode({ adapter: production, invokeTool: unused })).not.toThrow();
    expect(() => createCodeMode({ adapter: production, allowTestAdapter: true, invokeTool: unused })).not.toThrow();
    expect(() =>
      createCodeMode({ adapter: production, allowTestAdapter: "yes" as unknown as boolean, invokeTool: unused }),
    ).toThrowError(expect.objectContaining({ code: "INVALID_CONFIG" }));
    expect(() => adapter(execute, { id: "1bad" })).toThrowError(expect.objectContaining({ code: "INVALID_CONFIG" }));

    const unavailable = adapter(execute, { id: "sandbox.unavailable", isAvailable: () => false });
    const outcome = await createCodeMode({ adapter: unavailable, allowTestAdapter: true, invokeTool: unused }).execute(
      program(),
      { value: 1 },
      options(),
    );
    expect(outcome).toMatchObject({ status: "failed", error: { code: "UNSUPPORTED_PROFILE" } });
    expect(runs).toBe(0);
  });

  it("sends a permitted call through the ordinary broker, with the identity and context the host owns", async () => {
    const budget = new Budget(10, 4);
    const contexts: Parameters<CodeModeInvokeTool>[2][] = [];
    const broker: CodeModeInvokeTool = (tool, input, context) => {
      contexts.push(context);
      return invokeTool(tool, input, { ...context, permissions: { allow: [`tool:${tool.id}`] }, budget });
    };
    const sandbox = adapter(async (request) => {
      const result = await request.tools.call("number.double", request.input);
      return result.status === "succeeded" ? { status: "succeeded", output: result.output } : { status: "failed" };
    });
    const definition = program();
    const outcome = await createCodeMode({ adapter: sandbox, allowTestAdapter: true, invokeTool: broker }).execute(
      definition,
      { value: 6 },
      options(undefined, "execution-1"),
    );
    expect(outcome).toEqual({
      status: "succeeded",
      output: { value: 12 },
      usage: { toolCalls: 1, unknownCalls: 0, knownCostMicros: 1, unknownCostMicros: 0, maximumCostMicros: 4 },
      evidence: [
        {
          runId: "run-1",
          receipt: {
            callId: "execution-1:code:1",
            toolId: "number.double",
            execution: "succeeded",
            disclosure: "released",
          },
        },
      ],
    });
    expect(contexts).toHaveLength(1);
    expect(contexts[0]).toMatchObject({
      runId: "run-1",
      executionId: "execution-1",
      callId: "execution-1:code:1",
      programDigest: definition.digest,
      scope: SCOPE,
    });
    expect(budget.spentMicros).toBe(1);
    expect(budget.calls).toBe(1);
  });

  it("denies unknown tools before the broker, and a bridge kept after the run answers CONFLICT", async () => {
    let retained: SandboxToolsBridge | undefined;
    let brokered = 0;
    const sandbox = adapter(async (request) => {
      retained = request.tools;
      const denied = await request.tools.call("admin.secret", {});
      expect(denied).toMatchObject({ status: "blocked", error: { code: "PERMISSION_DENIED" } });
      return { status: "succeeded", output: { value: 1 } };
    });
    const mode = createCodeMode({
      adapter: sandbox,
      allowTestAdapter: true,
      invokeTool: () => {
        brokered++;
        return { status: "succeeded", output: { value: 1 } };
      },
    });
    expect(await mode.execute(program(), { value: 1 }, options())).toMatchObject({ status: "succeeded" });
    expect(await retained?.call("number.double", { value: 1 })).toMatchObject({
      status: "failed",
      error: { code: "CONFLICT" },
    });
    expect(brokered).toBe(0);
  });

  it("bounds the calls a program makes before they reach the host", async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    let brokered = 0;
    const broker: CodeModeInvokeTool = async () => {
      brokered++;
      await gate;
      return { status: "succeeded", output: { value: 2 } };
    };
    const sandbox = adapter(async (request) => {
      const first = request.tools.call("number.double", { value: 1 });
      const second = await request.tools.call("number.double", { value: 2 });
      expect(second).toMatchObject({ status: "failed", error: { code: "LIMIT_EXCEEDED" } });
      release();
      await first;
      return { status: "succeeded", output: { value: 2 } };
    });
    const constrained = program({ limits: { ...limits, maxToolCalls: 1, maxToolConcurrency: 1 } });
    const outcome = await createCodeMode({ adapter: sandbox, allowTestAdapter: true, invokeTool: broker }).execute(
      constrained,
      { value: 1 },
      options(),
    );
    expect(outcome).toMatchObject({ status: "succeeded", usage: { toolCalls: 1, maximumCostMicros: 1 } });
    expect(brokered).toBe(1);
  });

  it("copies the caller's input before its first wait, and hands the adapter a frozen copy", async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    let observed: JsonValue | undefined;
    const sandbox = adapter(
      async (request) => {
        observed = request.input;
        return { status: "succeeded", output: request.input };
      },
      {
        id: "sandbox.delayed",
        isAvailable: async () => {
          await gate;
          return true;
        },
      },
    );
    const input = { value: 7 };
    const pending = createCodeMode({ adapter: sandbox, allowTestAdapter: true, invokeTool: unused }).execute(
      program(),
      input,
      options(),
    );
    input.value = 99;
    release();
    expect(await pending).toMatchObject({ status: "succeeded", output: { value: 7 } });
    expect(observed).toEqual({ value: 7 });
    expect(Object.isFrozen(observed)).toBe(true);
  });

  it("closes the bridge at the deadline (TIMEOUT) and waits for a call the broker already took", async () => {
    let release!: () => void;
    let started!: () => void;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    const admitted = new Promise<void>((resolve) => {
      started = resolve;
    });
    const broker: CodeModeInvokeTool = async () => {
      started();
      await gate;
      return { status: "succeeded", output: { value: 2 } };
    };
    let retained: SandboxToolsBridge | undefined;
    const sandbox = adapter(async (request) => {
      retained = request.tools;
      await request.tools.call("number.double", { value: 1 });
      return { status: "succeeded", output: { value: 2 } };
    });
    const pending = createCodeMode({ adapter: sandbox, allowTestAdapter: true, invokeTool: broker }).execute(
      program({ limits: { ...limits, wallTimeMillis: 15 } }),
      { value: 1 },
      options(),
    );
    await admitted;
    await new Promise((resolve) => setTimeout(resolve, 30));
    let settled = false;
    void pending.then(() => {
      settled = true;
    });
    await Promise.resolve();
    expect(settled).toBe(false);
    expect(await retained?.call("number.double", { value: 2 })).toMatchObject({
      status: "failed",
      error: { code: "TIMEOUT" },
    });
    release();
    expect(await pending).toMatchObject({ status: "failed", error: { code: "TIMEOUT" } });
  });

  it("withholds what a failing adapter, a hostile answer or an invalid output carries", async () => {
    const throwing = createCodeMode({
      adapter: adapter(async () => {
        throw new Error("SECRET");
      }),
      allowTestAdapter: true,
      invokeTool: unused,
    });
    const thrown = await throwing.execute(program(), { value: 1 }, options());
    expect(thrown).toMatchObject({
      status: "failed",
      error: { code: "TOOL_FAILED" },
      usage: { toolCalls: 0, unknownCalls: 0, knownCostMicros: 0, unknownCostMicros: 0, maximumCostMicros: 4 },
    });
    // No call reached the broker: no receipt, and nothing of the adapter's error.
    expect(thrown.evidence).toEqual([]);
    expect(Object.keys(thrown).sort()).toEqual(["error", "evidence", "status", "usage"]);
    expect(JSON.stringify(thrown)).not.toContain("SECRET");

    const hostile = Object.defineProperty({}, "status", {
      enumerable: true,
      get: () => {
        throw new Error("SECRET");
      },
    });
    const read = await answering(hostile).execute(program(), { value: 1 }, options());
    expect(read).toMatchObject({ status: "failed", error: { code: "TOOL_FAILED" } });
    expect(JSON.stringify(read)).not.toContain("SECRET");

    const invalid = await answering({ status: "succeeded", output: { value: "SECRET" } }).execute(
      program(),
      { value: 1 },
      options(),
    );
    expect(invalid).toMatchObject({ status: "failed", error: { code: "INVALID_OUTPUT" } });
    expect(JSON.stringify(invalid)).not.toContain("SECRET");
  });

  it("maps each failure reason to a public code, and keeps only a bounded programError of a program_error", async () => {
    const run = (answer: unknown) => answering(answer).execute(program(), { value: 1 }, options());
    const expectations: [unknown, string][] = [
      [{ status: "failed", reason: "cpu_limit" }, "LIMIT_EXCEEDED"],
      [{ status: "failed", reason: "memory_limit" }, "LIMIT_EXCEEDED"],
      [{ status: "failed", reason: "invalid_output" }, "INVALID_OUTPUT"],
      [{ status: "failed", reason: "unsupported_program" }, "UNSUPPORTED_PROFILE"],
      [{ status: "failed", reason: "sandbox_error" }, "TOOL_FAILED"],
      [{ status: "failed" }, "TOOL_FAILED"],
    ];
    for (const [answer, code] of expectations) {
      expect(codeOf(await run(answer)), JSON.stringify(answer)).toBe(code);
    }
    const thrown = await run({
      status: "failed",
      reason: "program_error",
      programError: { name: "N".repeat(500), message: "M".repeat(5_000) },
    });
    expect(thrown).toMatchObject({ status: "failed", error: { code: "TOOL_FAILED" } });
    if (thrown.status !== "succeeded") {
      expect(thrown.programError).toEqual({ name: "N".repeat(128), message: "M".repeat(1_024) });
      expect(Object.isFrozen(thrown.programError)).toBe(true);
    }
    // A programError is kept only for a program's own failure, and only as exactly two plain strings.
    const dropped = [
      { status: "failed", reason: "cpu_limit", programError: { name: "E", message: "m" } },
      { status: "failed", programError: { name: "E", message: "m" } },
      { status: "failed", reason: "program_error", programError: { name: "E", message: 1 } },
      { status: "failed", reason: "program_error", programError: { name: "E", message: "m", stack: "s" } },
      {
        status: "failed",
        reason: "program_error",
        programError: Object.defineProperty({ name: "E" }, "message", { enumerable: true, get: () => "SECRET" }),
      },
    ];
    for (const answer of dropped) {
      const outcome = await run(answer);
      expect(outcome, JSON.stringify(answer)).not.toHaveProperty("programError");
      expect(JSON.stringify(outcome)).not.toContain("SECRET");
    }
    // Answers that are not exactly one of the shapes: an unknown reason, another field, a success with a reason.
    for (const answer of [
      { status: "failed", reason: "root" },
      { status: "failed", reason: "cpu_limit", extra: 1 },
      { status: "succeeded", output: 1, reason: "cpu_limit" },
      { status: "succeeded" },
      new (class Answer {
        status = "succeeded";
        output = { value: 1 };
      })(),
    ]) {
      const outcome = await run(answer);
      expect(outcome, JSON.stringify(answer)).toMatchObject({ status: "failed", error: { code: "TOOL_FAILED" } });
      expect(outcome).not.toHaveProperty("programError");
    }
  });

  it("refuses a result that is not plain JSON within maxOutputBytes, or does not match the schema (INVALID_OUTPUT)", async () => {
    const run = (output: unknown) =>
      answering({ status: "succeeded", output }).execute(program(), { value: 1 }, options());
    for (const output of [{ value: "x".repeat(10_000) }, { value: 1n }, { value: "wrong type" }]) {
      expect(codeOf(await run(output))).toBe("INVALID_OUTPUT");
    }
    const large = await run({ value: "x".repeat(10_000) });
    if (large.status !== "succeeded") expect(large.error.message).toContain("maxOutputBytes");
  });

  it("says precisely what is wrong with execute's options and the input", async () => {
    const mode = answering({ status: "succeeded", output: { value: 1 } });
    const noSignal = await mode.execute(program(), { value: 1 }, {
      ...options(),
      signal: undefined,
    } as unknown as ReturnType<typeof options>);
    expect(noSignal).toMatchObject({ status: "failed", error: { code: "INVALID_CONFIG" } });
    if (noSignal.status !== "succeeded") expect(noSignal.error.message).toContain("signal");
    const big = await mode.execute(program(), { value: "x".repeat(10_000) } as never, options());
    expect(big).toMatchObject({ status: "failed", error: { code: "INVALID_INPUT" } });
    if (big.status !== "succeeded") expect(big.error.message).toContain("maxInputBytes");
    expect(await mode.execute(program(), { value: "x" } as never, options())).toMatchObject({
      status: "failed",
      error: { code: "INVALID_INPUT" },
    });
    const proto = await mode.execute(program(), JSON.parse('{"value":1,"__proto__":{"admin":true}}'), options());
    expect(proto).toMatchObject({ status: "failed", error: { code: "INVALID_INPUT" } });
  });

  it("refuses an execution id that is running or was used, in one executor", async () => {
    const echo = createCodeMode({
      adapter: adapter(async (request) => ({ status: "succeeded", output: request.input })),
      allowTestAdapter: true,
      invokeTool: unused,
    });
    expect((await echo.execute(program(), { value: 1 }, options(undefined, "same"))).status).toBe("succeeded");
    expect(await echo.execute(program(), { value: 2 }, options(undefined, "same"))).toMatchObject({
      status: "failed",
      error: { code: "CONFLICT" },
    });
    let release!: () => void;
    const slow = createCodeMode({
      adapter: adapter(async (request) => {
        await new Promise<void>((resolve) => {
          release = resolve;
        });
        return { status: "succeeded", output: request.input };
      }),
      allowTestAdapter: true,
      invokeTool: unused,
    });
    const running = slow.execute(program(), { value: 1 }, options(undefined, "running"));
    expect(await slow.execute(program(), { value: 1 }, options(undefined, "running"))).toMatchObject({
      status: "failed",
      error: { code: "CONFLICT" },
    });
    await new Promise((resolve) => setTimeout(resolve, 0));
    release();
    expect(await running).toMatchObject({ status: "succeeded" });
  });

  it("makes an execution outcome_unknown when the broker cannot say whether a write happened", async () => {
    const write = defineTool({
      id: "external.write",
      version: "1",
      description: "A write whose outcome the broker may not know.",
      effects: "write",
      capabilities: [],
      input: z.object({ value: z.number() }),
      output: z.object({ value: z.number() }),
      costMicros: 3,
      execute: (input) => input,
    });
    const sandbox = adapter(async (request) => {
      await request.tools.call("external.write", request.input);
      return { status: "succeeded", output: request.input };
    });
    const outcome = await createCodeMode({
      adapter: sandbox,
      allowTestAdapter: true,
      invokeTool: (): Outcome<unknown> => ({
        status: "outcome_unknown",
        error: { code: "OUTCOME_UNKNOWN", message: "private provider detail" },
      }),
    }).execute(program({ tools: [write] }), { value: 1 }, options());
    expect(outcome).toMatchObject({
      status: "outcome_unknown",
      error: { code: "OUTCOME_UNKNOWN" },
      usage: { toolCalls: 1, unknownCalls: 1, knownCostMicros: 0, unknownCostMicros: 3, maximumCostMicros: 12 },
    });
    expect(JSON.stringify(outcome)).not.toContain("private provider detail");
  });
});
