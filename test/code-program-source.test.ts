/**
 * A governed program's source is one function expression, `async (input, tools) => ...`, which the VM calls with the
 * input and the tools: `defineCodeProgram` refuses anything else (a script body, a statement, a call, a value) with
 * INVALID_CONFIG when it is defined, instead of failing each run with TOOL_FAILED. Every shape it accepts runs.
 */
import { Budget, defineTool, invokeTool, z } from "airlock-codemode";
import { createQuickJsSandboxAdapter } from "airlock-codemode/adapter-code-quickjs";
import { createCodeMode, defineCodeProgram, MAX_SOURCE_CHARS } from "airlock-codemode/code-mode";
import { afterAll, describe, expect, it } from "vitest";
import { refusalOf, testLimits } from "./helpers/code-mode.ts";

const double = defineTool({
  id: "math.double",
  version: "1",
  description: "Twice a number.",
  input: z.object({ n: z.number() }),
  output: z.object({ n: z.number() }),
  effects: "read",
  capabilities: [],
  costMicros: 0,
  execute: ({ n }) => ({ n: n * 2 }),
});

const define = (source: string) =>
  defineCodeProgram({
    id: "test.source",
    version: "1",
    intent: "Doubles a number through a tool.",
    language: "javascript",
    source,
    input: z.object({ n: z.number() }),
    output: z.number(),
    inputSchemaId: "n.v1",
    outputSchemaId: "number.v1",
    tools: [double],
    limits: testLimits(),
  });

/** The error `define(source)` throws, or undefined. */
const refusal = (source: string) => refusalOf(() => define(source));

const mode = createCodeMode({
  adapter: createQuickJsSandboxAdapter({ poolSize: 1 }),
  invokeTool: (tool, input, context) =>
    invokeTool(tool, input, {
      ...context,
      permissions: { allow: [`tool:${tool.id}`, "effect:read"] },
      budget: new Budget(0, 4),
    }),
});
let runs = 0;
const run = () => ({
  runId: "run",
  executionId: `run:${++runs}`,
  scope: { principalId: "test" },
  signal: AbortSignal.timeout(30_000),
});
afterAll(() => mode.adapter.close());

describe("defineCodeProgram's source", () => {
  const accepted = [
    "async (input, tools) => (await tools.call('math.double', { n: input.n })).output.n",
    "async (input, tools) => { const r = await tools.call('math.double', input); return r.output.n; }",
    "async ({ n }, { call }) => (await call('math.double', { n })).output.n",
    "async (input, tools = {}) => (await tools.call('math.double', input)).output.n",
    "async function (input, tools) { return (await tools.call('math.double', input)).output.n; }",
    "async function double(input, tools) { return (await tools.call('math.double', input)).output.n; }",
    "function (input, tools) { return tools.call('math.double', input).then((r) => r.output.n); }",
    "(input, tools) => tools.call('math.double', input).then((r) => r.output.n)",
    "async (input, tools) => { const close = ')'; return (await tools.call('math.double', input)).output.n; }",
    "(async (input, tools) => (await tools.call('math.double', input)).output.n)",
    "// Doubles n.\nasync /* the input */ (input, tools) /* and the tools */ =>\n  (await tools.call('math.double', input)).output.n // done",
    "async (input, tools, step = (r) => r.output.n) => step(await tools.call('math.double', input))",
  ];
  it.each(accepted)("accepts and runs %s", async (source) => {
    const outcome = await mode.execute(define(source), { n: 21 }, run());
    expect(outcome).toMatchObject({ status: "succeeded", output: 42 });
  });

  it("accepts a single parameter without parentheses", () => {
    expect(refusal("input => input.n")).toBeUndefined();
    expect(refusal("async input => input.n")).toBeUndefined();
    expect(refusal("async => 1")).toBeUndefined();
  });

  const refused: [string, string, string][] = [
    [
      "a script body",
      "const r = await tools.call('math.double', input); return r.output.n;",
      "one JavaScript expression",
    ],
    ["a return statement", "return 1", "one JavaScript expression"],
    ["a syntax error", "async () => { return ( }", "one JavaScript expression"],
    [
      "a declaration and its call",
      "async function main(input, tools) { return 1; }\nmain()",
      "one JavaScript expression",
    ],
    ["a sequence", "(input) => 1, 2", "one JavaScript expression"],
    ["a number", "42", "not a function"],
    ["a tool call", "tools.call('math.double', { n: 1 })", "not a function"],
    ["an immediately called function", "(async (input, tools) => 1)()", "not a function"],
    ["a called function expression", "function () { return async () => 1; }()", "not a function"],
    ["a function in a larger expression", "function () {} + 1", "not a function"],
    ["an assignment of a function", "(f) = (input) => 1", "not a function"],
    ["a class", "class { }", "not a function"],
    ["an identifier", "main", "not a function"],
    ["a member of a name like function", "functions.main", "not a function"],
    ["a source that closes the check's brackets", "1]: 0 }); ({ [2", "not a function"],
  ];
  it.each(refused)("refuses %s with INVALID_CONFIG at definition", (_what, source, reason) => {
    const error = refusal(source);
    expect(error?.code).toBe("INVALID_CONFIG");
    expect(error?.message).toMatch(
      /^program source must be a function expression like async \(input, tools\) => \{ \.\.\. \}: it /,
    );
    expect(error?.message).toContain(reason);
    // Airlock's words only: nothing of the source comes back in the message.
    expect(error?.message).not.toContain(source.slice(0, 12));
  });

  it("checks a source of the largest size, and one with a thousand arrows", () => {
    const body = `${"x = x + 1;\n".repeat(Math.floor((MAX_SOURCE_CHARS - 100) / 11))}`;
    expect(refusal(`async (input, tools) => { let x = 0;\n${body} return x; }`)).toBeUndefined();
    expect(refusal(`(${"(a) => ".repeat(1_000)}1)(${"0)(".repeat(999)}0)`)?.code).toBe("INVALID_CONFIG");
  });
});
