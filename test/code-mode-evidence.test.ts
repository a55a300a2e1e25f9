/** Receipts in code-mode outcomes: what each brokered call did, as far as anyone can know, and whether it was shown. */
import { Budget, defineTool, invokeTool, type Tool, z } from "airlock-codemode";
import { createQuickJsSandboxAdapter } from "airlock-codemode/adapter-code-quickjs";
import { createCodeMode, defineCodeProgram } from "airlock-codemode/code-mode";
import { afterAll, expect, it } from "vitest";
import { testLimits } from "./helpers/code-mode.ts";

const adapter = createQuickJsSandboxAdapter({ poolSize: 1 });
afterAll(() => adapter.close());

const tool = (id: string, effects: "read" | "write", execute: () => unknown, output: z.ZodType = z.unknown()) =>
  defineTool({
    id,
    version: "1",
    description: id,
    input: z.object({}),
    output,
    effects,
    capabilities: [],
    costMicros: 1,
    timeoutMillis: 200,
    execute,
  }) as Tool;

it("gives every brokered call a receipt: released, withheld, not started, failed or unknown", async () => {
  const tools = [
    tool("ok", "read", () => ({ fine: true })),
    tool("denied", "read", () => ({})),
    tool("throws", "read", () => {
      throw new Error("SECRET");
    }),
    tool("refused", "write", () => ({ n: "text" }), z.object({ n: z.number() })),
    tool("hangs", "write", () => new Promise(() => {})),
  ];
  const program = defineCodeProgram({
    id: "receipts",
    version: "1",
    intent: "Call each tool once.",
    language: "javascript",
    source: `async (input, tools) => {
      const seen = [];
      for (const id of ["ok", "denied", "throws", "refused", "hangs"]) seen.push((await tools.call(id, {})).status);
      await tools.call("missing", {});
      return seen;
    }`,
    input: z.object({}),
    output: z.array(z.string()),
    inputSchemaId: "none",
    outputSchemaId: "statuses",
    tools,
    limits: testLimits({ maxToolCalls: 10 }),
  });
  const budget = new Budget(100, 100);
  const mode = createCodeMode({
    adapter,
    invokeTool: (t, input, context) =>
      invokeTool(t, input, {
        ...context,
        permissions: { allow: ["tool:ok", "tool:throws", "tool:refused", "tool:hangs", "effect:read", "effect:write"] },
        budget,
      }),
  });
  const outcome = await mode.execute(
    program,
    {},
    { runId: "run-1", executionId: "exec-1", scope: { principalId: "p" }, signal: new AbortController().signal },
  );
  expect(outcome.status).toBe("outcome_unknown");
  expect(outcome.evidence.map((item) => item.runId)).toEqual(["run-1", "run-1", "run-1", "run-1", "run-1"]);
  expect(outcome.evidence.map((item) => item.receipt)).toEqual([
    { callId: "exec-1:code:1", toolId: "ok", execution: "succeeded", disclosure: "released" },
    { callId: "exec-1:code:2", toolId: "denied", execution: "not_started", disclosure: "withheld" },
    { callId: "exec-1:code:3", toolId: "throws", execution: "failed", disclosure: "withheld" },
    { callId: "exec-1:code:4", toolId: "refused", execution: "succeeded", disclosure: "withheld" },
    { callId: "exec-1:code:5", toolId: "hangs", execution: "unknown", disclosure: "withheld" },
  ]);
  expect(Object.isFrozen(outcome.evidence)).toBe(true);
  expect(JSON.stringify(outcome.evidence)).not.toContain("SECRET");
});
