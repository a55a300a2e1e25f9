/**
 * The codes a durable phase's tool refuses with. The broker keeps a thrown error's code from the run (a write tool
 * that throws is OUTCOME_UNKNOWN whatever it said, as in Mayura), so these are read from the phase tool's own handler:
 * this file imports the source tree, whose `handlerOf` knows the tools its own modules made. What the run shows of the
 * same two cases is in code-mode-workflows.test.ts.
 */
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { defineSandboxAdapter } from "../src/code-mode/adapter.ts";
import { createCodeMode } from "../src/code-mode/executor.ts";
import { defineCodeProgram } from "../src/code-mode/program.ts";
import { defineTool, handlerOf, type ToolContext } from "../src/tools/define.ts";
import { createDurableCodeAudit, defineDurableCodeWorkflow } from "../src/workflows/code-phases.ts";
import { createSqliteStore } from "../src/workflows/sqlite.ts";
import type { WorkflowStore } from "../src/workflows/store.ts";
import { testLimits } from "./helpers/code-mode.ts";

const value = z.object({ value: z.number() });
const alice = { principalId: "alice", projectId: "project" };
const runId = "c".repeat(64);
let store: WorkflowStore;
let executions: number;

beforeEach(async () => {
  store = createSqliteStore({ filename: ":memory:" });
  await store.initialize();
  executions = 0;
});
afterEach(() => store.close());

/** A phase whose audit is kept for `auditScope`, on a code mode whose adapter counts the programs it runs. */
function phaseFor(auditScope: { principalId: string; projectId: string }) {
  const adapter = defineSandboxAdapter({
    id: "test.counting",
    version: "1",
    qualification: "test",
    isAvailable: () => true,
    execute: async (request) => {
      executions++;
      return { status: "succeeded", output: request.input };
    },
  });
  const tool = defineTool({
    id: "external.read",
    version: "1",
    description: "Reads.",
    input: value,
    output: value,
    effects: "read",
    capabilities: [],
    costMicros: 1,
    execute: (input: { value: number }) => input,
  });
  const program = defineCodeProgram({
    id: "phase.echo",
    version: "1",
    intent: "Return the input.",
    language: "javascript",
    source: "async (input) => input",
    input: value,
    output: value,
    inputSchemaId: "value",
    outputSchemaId: "value",
    tools: [tool],
    limits: testLimits({ maxToolCalls: 1 }),
  });
  const audit = createDurableCodeAudit({ store, scope: auditScope });
  const definition = defineDurableCodeWorkflow({
    id: "codes",
    version: "1",
    input: value,
    output: value,
    codeMode: createCodeMode({ adapter, allowTestAdapter: true, invokeTool: async () => ({}) as never }),
    audit,
    phases: [{ id: "execute", program, input: { kind: "input", path: [] } }],
    result: { kind: "step", stepId: "execute", path: [] },
  });
  const node = definition.nodes[0];
  if (node?.kind !== "tool") throw new Error("a phase is a tool node");
  const context = (scope: typeof alice): ToolContext =>
    Object.freeze({ runId, callId: `${runId}/step:execute`, scope, signal: new AbortController().signal });
  return { run: handlerOf(node.tool), context, audit };
}

describe("a durable phase's refusals", () => {
  it("is PERMISSION_DENIED, without running the program, when its audit belongs to another scope", async () => {
    const phase = phaseFor({ principalId: "mallory", projectId: "project" });
    await expect(Promise.resolve(phase.run({ value: 1 }, phase.context(alice)))).rejects.toMatchObject({
      code: "PERMISSION_DENIED",
    });
    expect(executions).toBe(0);
    expect(await phase.audit.inspect(runId, "execute")).toBeUndefined();
    // The same phase under its own scope runs.
    const own = phaseFor(alice);
    expect(await own.run({ value: 1 }, own.context(alice))).toEqual({ value: 1 });
    expect(executions).toBe(1);
  });

  it("is INTEGRITY_VIOLATION when its execution already has an audit record, which stays as it was", async () => {
    const phase = phaseFor(alice);
    expect(await phase.run({ value: 1 }, phase.context(alice))).toEqual({ value: 1 });
    const first = await phase.audit.inspect(runId, "execute");
    expect(first).toMatchObject({ outcome: "succeeded", executionId: `${runId}/step:execute:sandbox` });
    await expect(Promise.resolve(phase.run({ value: 2 }, phase.context(alice)))).rejects.toMatchObject({
      code: "INTEGRITY_VIOLATION",
    });
    expect(await phase.audit.inspect(runId, "execute")).toEqual(first);
  });
});
