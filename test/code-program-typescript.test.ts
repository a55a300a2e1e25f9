/**
 * Governed programs written in TypeScript. `defineCodeProgram` erases the types once, when the program is defined
 * (the digest is over the source as written), and refuses a source it cannot strip with INVALID_CONFIG in Airlock's
 * words. Airlock's adapters (the worker pool, the protocol adapter, the Docker adapter) run the erased JavaScript,
 * whose lines and columns are those of the source as written; an adapter of your own is handed TypeScript programs
 * only if it declares them among its `languages` (UNSUPPORTED_PROFILE otherwise). Single-call approvals and durable
 * code phases take TypeScript programs as they take JavaScript ones.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Budget, defineTool, invokeTool, type Tool, z } from "airlock-codemode";
import { createDockerQuickJsSandboxAdapter } from "airlock-codemode/adapter-code-docker";
import {
  type ClosableSandboxAdapter,
  createQuickJsProtocolAdapter,
  createQuickJsSandboxAdapter,
} from "airlock-codemode/adapter-code-quickjs";
import {
  type CodeLanguage,
  type CodeModeInvokeTool,
  createCodeMode,
  defineCodeProgram,
  defineSandboxAdapter,
  type SandboxProgram,
} from "airlock-codemode/code-mode";
import { createDurableCodeAudit, defineDurableCodeWorkflow } from "airlock-codemode/code-mode-workflows";
import { createScheduledWorkflowRuntime } from "airlock-codemode/workflows";
import { createSqliteStore } from "airlock-codemode/workflows/sqlite";
import { afterAll, describe, expect, it } from "vitest";
import { refusalOf, testLimits } from "./helpers/code-mode.ts";
import { GOOD_IMAGE, STAND_IN_IMAGE, STAND_IN_PROVENANCE, standInFolder } from "./helpers/docker-stand-in.ts";
import { launchVmSideChild } from "./helpers/vm-side.ts";

const value = z.object({ value: z.number() });
const scope = { principalId: "alice", projectId: "project" };

function doubler(effects: "read" | "write" = "read", approval: "never" | "always" = "never") {
  const counts = { calls: 0 };
  const tool = defineTool({
    id: "number.double",
    version: "1",
    description: "Twice a number.",
    input: value,
    output: value,
    effects,
    capabilities: [],
    costMicros: 1,
    approval,
    execute: ({ value: n }: { value: number }) => {
      counts.calls++;
      return { value: n * 2 };
    },
  }) as Tool;
  return { counts, tool };
}
const double = doubler().tool;

/** Types in the parameters, the return type, a type alias, `as` and a generic call: all erased. */
const TYPED = `async (input: { value: number }, tools: Tools): Promise<{ value: number }> => {
  type Doubled = { status: string; output: { value: number } };
  const doubled = (await tools.call<Doubled>("number.double", input)) as Doubled;
  if (doubled.status !== "succeeded") throw new Error("the call failed");
  return { value: doubled.output.value + 1 };
}`;
/** Throws an error whose message is its own stack, to see where the engine says the program's line 3 is. */
const THROWS_ITS_STACK = `(input: { value: number }): never => {
  const label: string = "where";
  const error: Error = new Error(label);
  throw new Error(String(error.stack));
}`;
/** The same program in JavaScript, each type replaced by a comment as long: the same code in the same columns. */
const THROWS_ITS_STACK_JS = THROWS_ITS_STACK.replace(
  /: \{ value: number \}|: never|: string|: Error/g,
  (type) => `/*${" ".repeat(type.length - 4)}*/`,
);

function define(source: string, language: CodeLanguage = "typescript", tools: readonly Tool[] = [double]) {
  return defineCodeProgram({
    id: "typed.double",
    version: "1",
    intent: "Doubles a number through a tool and adds one.",
    language,
    source,
    input: value,
    output: z.unknown(),
    inputSchemaId: "value.v1",
    outputSchemaId: "any.v1",
    tools,
    limits: testLimits({ maxToolCalls: 2 }),
  });
}

/** The error `define(source)` throws, or undefined. */
const refusal = (source: string) => refusalOf(() => define(source));

const broker =
  (budget = new Budget(100, 10)): CodeModeInvokeTool =>
  (tool, input, context) =>
    invokeTool(tool, input, {
      ...context,
      permissions: { allow: [`tool:${tool.id}`, `effect:${tool.effects}`] },
      budget,
    });
let executions = 0;
const run = () => ({
  runId: "run",
  executionId: `typed-${++executions}`,
  scope,
  signal: AbortSignal.timeout(30_000),
});

describe("defining a TypeScript program", () => {
  it("keeps the source as written in the digest and erases the types in place for what runs", () => {
    const program = define(TYPED);
    expect(program.language).toBe("typescript");
    expect(program.source).toBe(TYPED);
    expect(program.javascript).not.toMatch(/: \{ value: number \}|Promise<|as Doubled|type Doubled|<Doubled>/);
    // Spaces for types: every line keeps its length, so lines and columns are where they were written.
    const lengths = (text: string) => text.split("\n").map((line) => line.length);
    expect(lengths(program.javascript)).toEqual(lengths(TYPED));
    expect(program.javascript).toContain('await tools.call         ("number.double", input)');

    // Another type is another program, although its JavaScript is the same.
    const retyped = define(TYPED.replace("Promise<{ value: number }>", "Promise<{ value: bigint }>"));
    expect(retyped.javascript).toBe(program.javascript);
    expect(retyped.digest).not.toBe(program.digest);
    expect(define(TYPED).digest).toBe(program.digest);

    // A JavaScript program runs as written; TypeScript labelled JavaScript is still refused.
    const plain = define("async (input, tools) => input", "javascript");
    expect(plain.javascript).toBe(plain.source);
    expect(() => define(TYPED, "javascript")).toThrowError(expect.objectContaining({ code: "INVALID_CONFIG" }));

    // A program's own fields are accepted and `javascript` is made anew from the source.
    const derived = defineCodeProgram({ ...program, source: "(input: { value: number }) => input" });
    expect(derived.javascript).toBe("(input                   ) => input");
    expect(defineCodeProgram({ ...program, id: "typed.other" }).javascript).toBe(program.javascript);
  });

  it("accepts every function shape a JavaScript program may have", () => {
    for (const source of [
      "(input: { value: number }) => input",
      "input => input as unknown",
      "async function (input: { value: number }, tools: unknown): Promise<number> { return input.value; }",
      "function named<T>(input: T): T { return input; }",
      "<T,>(input: T): T => input",
      "((input: number) => input)",
      "(input: number)\n  : number => input",
      "(input: number) => input\n// a comment on the last line",
    ]) {
      expect(refusal(source), source).toBeUndefined();
    }
  });

  it("refuses a source it cannot strip with INVALID_CONFIG, saying where, with no text of the source", () => {
    const cases: [string, RegExp][] = [
      ["async (input: { value: number }) => {\n  const SECRET: = 1;\n}", /a syntax error at line 2, column 17$/],
      // On the first line too the column is the one as written.
      ["(x: number) => { enum SECRET { Red } return x; }", /needs code generation.*, at line 1, column 18$/],
      ["(x: number) => SECRET +", /a syntax error at the end of the source$/],
      // A source that would close the parentheses it is stripped in.
      ["SECRET) }; (function () {", /a syntax error at the end of the source$/],
      // Strict-mode code, as any TypeScript.
      ["(SECRET: unknown) => { with (SECRET) {} }", /a syntax error at line 1, column \d+$/],
    ];
    for (const [source, message] of cases) {
      const error = refusal(source);
      expect(error, source).toMatchObject({ code: "INVALID_CONFIG" });
      expect(error?.message, source).toMatch(/^program source is TypeScript that Airlock cannot strip of its types: /);
      expect(error?.message, source).toMatch(message);
      expect(error?.message, source).not.toContain("SECRET");
    }
    // Stripped, it must still be one function expression.
    expect(refusal("(1 as number)")?.message).toMatch(/must be a function expression/);
    expect(refusal("(x: number) => x, (y: number) => y")?.message).toMatch(/must be a function expression/);
  });
});

const standIns = standInFolder();
afterAll(() => standIns.remove());

const adapters: [string, () => ClosableSandboxAdapter][] = [
  ["the worker pool", () => createQuickJsSandboxAdapter({ poolSize: 1 })],
  [
    "the protocol adapter (a VM side in a child process)",
    () => createQuickJsProtocolAdapter({ id: "child-process", version: "1", launch: () => launchVmSideChild() }),
  ],
  [
    "the Docker adapter (a stand-in for the CLI serves the container entry)",
    () =>
      createDockerQuickJsSandboxAdapter({
        dockerPath: standIns.make(GOOD_IMAGE).path,
        image: STAND_IN_IMAGE,
        provenance: STAND_IN_PROVENANCE,
      }),
  ],
];

describe.each(adapters)("a TypeScript program on %s", (_name, make) => {
  const adapter = make();
  afterAll(() => adapter.close());
  const mode = createCodeMode({ adapter, invokeTool: broker(), allowTestAdapter: true });

  it("runs with its types erased, and the engine's lines and columns are those of the source as written", async () => {
    expect(adapter.languages).toEqual(["javascript", "typescript"]);
    const done = await mode.execute(define(TYPED), { value: 20 }, run());
    expect(done, JSON.stringify(done)).toMatchObject({ status: "succeeded", output: { value: 41 } });
    expect(done.usage.toolCalls).toBe(1);

    // The engine says where the program's own frame is: in TypeScript as in JavaScript with the same columns.
    const frame = async (language: CodeLanguage, source: string) => {
      const thrown = await mode.execute(define(source, language, []), { value: 1 }, run());
      expect(thrown).toMatchObject({ status: "failed", error: { code: "TOOL_FAILED" } });
      if (thrown.status === "succeeded") throw new Error("the program threw");
      return thrown.programError?.message.split("\n")[0];
    };
    const typed = await frame("typescript", THROWS_ITS_STACK);
    expect(typed).toMatch(/:3:\d+\)$/);
    expect(typed).toBe(await frame("javascript", THROWS_ITS_STACK_JS));
  });
});

describe("an adapter of your own", () => {
  /** A JavaScript sandbox stand-in: it answers what it was handed, so the test sees the program as it arrives. */
  const recording = (languages?: readonly CodeLanguage[]) => {
    const seen: SandboxProgram[] = [];
    const adapter = defineSandboxAdapter({
      id: "own.sandbox",
      version: "1",
      qualification: "production",
      ...(languages === undefined ? {} : { languages }),
      isAvailable: () => true,
      execute: async ({ program }) => {
        seen.push(program);
        return { status: "succeeded", output: { value: 0 } };
      },
    });
    return { seen, mode: createCodeMode({ adapter, invokeTool: broker() }), adapter };
  };

  it("runs JavaScript only unless it declares typescript: a TypeScript program is UNSUPPORTED_PROFILE and never reaches it", async () => {
    const { seen, mode, adapter } = recording();
    expect(adapter.languages).toEqual(["javascript"]);
    const refused = await mode.execute(define(TYPED), { value: 1 }, run());
    expect(refused).toMatchObject({
      status: "failed",
      error: {
        code: "UNSUPPORTED_PROFILE",
        message:
          "the sandbox adapter does not run typescript programs (its languages are javascript); Airlock never runs a program outside its sandbox",
      },
      usage: { toolCalls: 0 },
    });
    expect(seen).toHaveLength(0);
    expect(await mode.execute(define("async (input) => input", "javascript"), { value: 1 }, run())).toMatchObject({
      status: "succeeded",
    });
    expect(seen).toHaveLength(1);
  });

  it("declaring typescript, gets the source as written and its JavaScript", async () => {
    const { seen, mode, adapter } = recording(["javascript", "typescript"]);
    expect(adapter.languages).toEqual(["javascript", "typescript"]);
    const program = define(TYPED);
    expect(await mode.execute(program, { value: 1 }, run())).toMatchObject({ status: "succeeded" });
    expect(seen).toEqual([
      expect.objectContaining({
        language: "typescript",
        source: TYPED,
        javascript: program.javascript,
        digest: program.digest,
      }),
    ]);
  });

  it("declares languages from the two there are, each once", () => {
    for (const languages of [[], ["python"], ["javascript", "javascript"], "typescript", [undefined]]) {
      expect(() => recording(languages as never), JSON.stringify(languages)).toThrowError(
        expect.objectContaining({
          code: "INVALID_CONFIG",
          message: "adapter languages must list 'javascript', 'typescript' or both, each once",
        }),
      );
    }
    const sparse = Object.assign([], { length: 1e9 });
    expect(() => recording(sparse as never)).toThrowError(expect.objectContaining({ code: "INVALID_CONFIG" }));
    expect(recording(["typescript"]).adapter.languages).toEqual(["typescript"]);
  });
});

describe("durable TypeScript programs", () => {
  const adapter = createQuickJsSandboxAdapter({ poolSize: 1 });
  afterAll(() => adapter.close());
  const verifyHuman = async (credential: unknown) => {
    if (credential !== "approved") throw new Error("denied");
    return { id: "reviewer", projectId: "project", canApprove: true };
  };
  const temporary = async () => {
    const directory = await mkdtemp(join(tmpdir(), "airlock-typed-"));
    return {
      filename: join(directory, "state.sqlite"),
      cleanup: () => rm(directory, { recursive: true, force: true }),
    };
  };

  it("pause at a call that needs approval and resume after it (single-call approvals)", async () => {
    const { filename, cleanup } = await temporary();
    const store = createSqliteStore({ filename });
    try {
      await store.initialize();
      const { counts, tool } = doubler("write", "always");
      const program = define(TYPED, "typescript", [tool]);
      const mode = createCodeMode({ adapter, invokeTool: broker(), approvals: { store, verifyHuman } });
      const options = { ...run(), executionId: "typed-approval" };
      const waiting = await mode.execute(program, { value: 4 }, options);
      expect(waiting, JSON.stringify(waiting)).toMatchObject({
        status: "waiting",
        approval: { tool: "number.double" },
      });
      if (waiting.status !== "waiting") throw new Error("not waiting");
      expect(counts.calls).toBe(0);
      await mode.approve({
        scope,
        executionId: "typed-approval",
        digest: waiting.approval.digest,
        credential: "approved",
      });
      expect(await mode.resume(program, { value: 4 }, options)).toMatchObject({
        status: "succeeded",
        output: { value: 9 },
      });
      expect(counts.calls).toBe(1);

      // The adapter the approvals wrap keeps its languages: one without TypeScript refuses the program.
      const javascriptOnly = defineSandboxAdapter({
        id: "own.deterministic",
        version: "1",
        qualification: "production",
        deterministic: true,
        isAvailable: () => true,
        execute: async () => ({ status: "succeeded", output: { value: 0 } }),
      });
      const refusing = createCodeMode({
        adapter: javascriptOnly,
        invokeTool: broker(),
        approvals: { store, verifyHuman },
      });
      const refused = await refusing.execute(program, { value: 4 }, { ...run(), executionId: "typed-refused" });
      expect(refused).toMatchObject({ status: "failed", error: { code: "UNSUPPORTED_PROFILE" } });
      expect(counts.calls).toBe(1);
    } finally {
      await store.close();
      await cleanup();
    }
  });

  it("run as an approved code phase, audited under the digest of the source as written", async () => {
    const { filename, cleanup } = await temporary();
    const store = createSqliteStore({ filename });
    try {
      await store.initialize();
      const { counts, tool } = doubler("write");
      const program = define(TYPED, "typescript", [tool]);
      const definition = defineDurableCodeWorkflow({
        id: "typed.phase",
        version: "1",
        input: value,
        output: z.unknown(),
        codeMode: createCodeMode({ adapter, invokeTool: broker() }),
        audit: createDurableCodeAudit({ store, scope }),
        phases: [{ id: "double", program, input: { kind: "input", path: [] } }],
        result: { kind: "step", stepId: "double", path: [] },
      });
      const phase = definition.nodes[0];
      if (phase?.kind !== "tool") throw new Error("a phase is a tool node");
      const runtime = createScheduledWorkflowRuntime({
        scope,
        permissions: { allow: [`tool:${phase.tool.id}`, "effect:write", ...phase.tool.capabilities] },
        policyVersion: "1",
        maxCostMicros: 100,
        verifyHuman,
        store,
        workerId: "worker",
      });
      try {
        const submitted = await runtime.submit(definition, { input: { value: 10 }, idempotencyKey: "typed-1" });
        const waiting = await runtime.runUntilSettled(definition, submitted.id);
        expect(waiting.status).toBe("waiting");
        await runtime.approve({
          id: submitted.id,
          nodeId: "double",
          digest: waiting.steps.double?.approval?.digest as string,
          credential: "approved",
        });
        const done = await runtime.runUntilSettled(definition, submitted.id);
        expect(done, JSON.stringify(done)).toMatchObject({ status: "succeeded", output: { value: 21 } });
        expect(counts.calls).toBe(1);
        const record = await createDurableCodeAudit({ store, scope }).inspect(submitted.id, "double");
        expect(record).toMatchObject({ programDigest: program.digest, outcome: "succeeded" });
      } finally {
        await runtime.close();
      }
    } finally {
      await store.close();
      await cleanup();
    }
  });
});

describe("a hostile TypeScript source", () => {
  it("refuses a source nested too deeply for the type stripper with INVALID_CONFIG in Airlock's words, and the next defines", () => {
    for (const hostile of [
      `(input: unknown) => ${"[".repeat(5_000)}${"]".repeat(5_000)}`,
      `(input: unknown) => { type T = ${"A<".repeat(5_000)}0${">".repeat(5_000)}; return 1; }`,
    ]) {
      const error = refusal(hostile);
      expect(error).toMatchObject({ code: "INVALID_CONFIG" });
      expect(error?.message).toMatch(/^program source is TypeScript that Airlock cannot strip of its types: /);
      expect(error?.message).not.toContain("[");
      // The stripper is not left broken for the definitions after it.
      expect(define("(input: { value: number }) => input.value + 1").javascript).toContain("input.value + 1");
    }
  });
});
