/**
 * A code mode with call approvals whose store fails while a program runs: the execution ends STORAGE_UNAVAILABLE
 * before anything acts that the journal could not record, through the public API and the real QuickJS adapter.
 */
import { Budget, defineTool, invokeTool, type Tool, z } from "airlock-codemode";
import { createQuickJsSandboxAdapter } from "airlock-codemode/adapter-code-quickjs";
import { createCodeMode, defineCodeProgram } from "airlock-codemode/code-mode";
import type { WorkflowStore } from "airlock-codemode/workflows";
import { createSqliteStore } from "airlock-codemode/workflows/sqlite";
import { afterAll, describe, expect, it } from "vitest";
import { testLimits } from "./helpers/code-mode.ts";

const adapter = createQuickJsSandboxAdapter({ poolSize: 1 });
afterAll(() => adapter.close());

const scope = { principalId: "agent", projectId: "shop" };
const NO_ABORT = new AbortController().signal;
const verifyHuman = async () => ({ id: "clerk", projectId: "shop", canApprove: true });

/** `lookup` runs `during` while it runs; `pay` needs approval. The program looks up, then pays. */
function fixture(during: () => unknown) {
  const counts = { lookup: 0, pay: 0 };
  const lookup = defineTool({
    id: "lookup",
    version: "1",
    description: "Looks something up.",
    input: z.object({ q: z.string() }),
    output: z.object({ q: z.string() }),
    effects: "read",
    capabilities: [],
    costMicros: 1,
    execute: async ({ q }: { q: string }) => {
      counts.lookup++;
      await during();
      return { q };
    },
  }) as Tool;
  const pay = defineTool({
    id: "pay",
    version: "1",
    description: "Moves money.",
    input: z.object({ amount: z.number() }),
    output: z.object({ ok: z.boolean() }),
    effects: "write",
    capabilities: [],
    costMicros: 1,
    approval: "always",
    execute: () => {
      counts.pay++;
      return { ok: true };
    },
  }) as Tool;
  const program = defineCodeProgram({
    id: "shop.storage",
    version: "1",
    intent: "Look up, then pay.",
    language: "javascript",
    source: `async (input, tools) => {
      const found = await tools.call("lookup", { q: "a" });
      const paid = await tools.call("pay", { amount: 1 });
      return { found: found.status, paid: paid.status };
    }`,
    input: z.object({}),
    output: z.unknown(),
    inputSchemaId: "in",
    outputSchemaId: "out",
    tools: [lookup, pay],
    limits: testLimits(),
  });
  return { counts, program };
}

function modeOn(store: WorkflowStore) {
  const budget = new Budget(100, 10);
  return createCodeMode({
    adapter,
    invokeTool: (tool, input, context) =>
      invokeTool(tool, input, {
        ...context,
        permissions: { allow: ["tool:lookup", "tool:pay", "effect:read", "effect:write"] },
        budget,
      }),
    approvals: { store, verifyHuman },
  });
}

describe("a store that fails while a program runs", () => {
  it("closed during a call: the execution is STORAGE_UNAVAILABLE and goes no further", async () => {
    const store = createSqliteStore({ filename: ":memory:" });
    await store.initialize();
    const { counts, program } = fixture(() => store.close());
    const outcome = await modeOn(store).execute(
      program,
      {},
      { runId: "r", executionId: "closed-1", scope, signal: NO_ABORT },
    );
    expect(outcome).toMatchObject({ status: "failed", error: { code: "STORAGE_UNAVAILABLE" } });
    expect(counts).toEqual({ lookup: 1, pay: 0 });
    // The call it made has its receipt; the pay call was never handed to the broker.
    expect(outcome.evidence.map((item) => item.receipt.toolId)).toEqual(["lookup"]);
  });

  it("failing its writes: STORAGE_UNAVAILABLE, with none of the store's own error text", async () => {
    const store = createSqliteStore({ filename: ":memory:" });
    await store.initialize();
    let broken = false;
    const failing: WorkflowStore = {
      ...store,
      mutate: (scopeHash, id, change) => {
        if (broken) throw new Error("SECRET disk full at /var/db");
        return store.mutate(scopeHash, id, change);
      },
    };
    const { counts, program } = fixture(() => {
      broken = true;
    });
    const outcome = await modeOn(failing).execute(
      program,
      {},
      { runId: "r", executionId: "failing-1", scope, signal: NO_ABORT },
    );
    expect(outcome).toMatchObject({ status: "failed", error: { code: "STORAGE_UNAVAILABLE" } });
    expect(JSON.stringify(outcome)).not.toContain("SECRET");
    expect(counts).toEqual({ lookup: 1, pay: 0 });
    // A store that fails from the start: refused before the program runs at all.
    const before = await modeOn(failing).execute(
      program,
      {},
      { runId: "r", executionId: "failing-2", scope, signal: NO_ABORT },
    );
    expect(before).toMatchObject({ status: "failed", error: { code: "STORAGE_UNAVAILABLE" } });
    expect(counts).toEqual({ lookup: 1, pay: 0 });
    await store.close();
  });
});
