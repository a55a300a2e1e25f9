/**
 * Approving one call inside a running program (docs/durable-programs.md, Approving one call inside a running program):
 * the program pauses at a call a person must approve, and continues after the decision, in another code mode on the
 * same store (as after a restart), without running any earlier call again; a rejection reaches the program as a blocked
 * call; a journal that does not replay is INTEGRITY_VIOLATION; an approval request expires.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Budget, defineTool, invokeTool, type Tool, type ToolApproval, z } from "airlock-codemode";
import { createQuickJsSandboxAdapter } from "airlock-codemode/adapter-code-quickjs";
import {
  type ApprovingCodeMode,
  type CodeExecutionOutcome,
  createCodeMode,
  defineCodeProgram,
} from "airlock-codemode/code-mode";
import type { WorkflowStore } from "airlock-codemode/workflows";
import { createSqliteStore } from "airlock-codemode/workflows/sqlite";
import Database from "better-sqlite3";
import { afterAll, afterEach, beforeEach, describe, expect, it } from "vitest";
import { testLimits } from "./helpers/code-mode.ts";

const adapter = createQuickJsSandboxAdapter({ poolSize: 1 });
afterAll(() => adapter.close());

const scope = { principalId: "agent", projectId: "shop" };
/** A signal that never aborts, for executions the test does not cancel (execute requires one). */
const NO_ABORT = new AbortController().signal;
const verifyHuman = async (credential: unknown) => {
  if (credential === "clerk") return { id: "clerk-1", projectId: "shop", canApprove: true };
  if (credential === "outsider") return { id: "x", projectId: "elsewhere", canApprove: true };
  throw new Error("unknown person");
};

function fixture(approval: ToolApproval<{ amount: number; to: string }> = "always") {
  const counts = { lookup: 0, pay: 0 };
  const lookup = defineTool({
    id: "lookup",
    version: "1",
    description: "Looks something up.",
    input: z.object({ q: z.string() }).passthrough(),
    output: z.object({ who: z.string(), q: z.string() }),
    effects: "read",
    capabilities: [],
    costMicros: 1,
    execute: ({ q }: { q: string }) => {
      counts.lookup++;
      return { who: `payee-${q}`, q };
    },
  }) as Tool;
  const pay = defineTool({
    id: "pay",
    version: "1",
    description: "Moves money.",
    input: z.object({ amount: z.number(), to: z.string() }),
    output: z.object({ receipt: z.string() }),
    effects: "write",
    capabilities: [],
    costMicros: 5,
    approval,
    execute: ({ amount, to }: { amount: number; to: string }) => {
      counts.pay++;
      return { receipt: `paid ${amount} to ${to}` };
    },
  }) as Tool;
  const program = defineCodeProgram({
    id: "shop.pay",
    version: "1",
    intent: "Look up the payee and pay them.",
    language: "javascript",
    source: `async (input, tools) => {
      const t0 = Date.now();
      const r0 = Math.random();
      const [a, b] = await Promise.all([
        tools.call("lookup", { q: "a", t0, r0 }),
        tools.call("lookup", { q: "b" }),
      ]);
      const paid = await tools.call("pay", { amount: input.amount, to: a.output.who });
      const after = await tools.call("lookup", { q: "after-" + paid.status, t: Date.now() });
      return {
        t0, r0, b: b.output.who,
        paid: paid.status,
        code: paid.status === "succeeded" ? null : paid.error.code,
        receipt: paid.status === "succeeded" ? paid.output.receipt : null,
        after: after.output.q,
      };
    }`,
    input: z.object({ amount: z.number() }),
    output: z.object({
      t0: z.number(),
      r0: z.number(),
      b: z.string(),
      paid: z.string(),
      code: z.string().nullable(),
      receipt: z.string().nullable(),
      after: z.string(),
    }),
    inputSchemaId: "pay.in",
    outputSchemaId: "pay.out",
    tools: [lookup, pay],
    limits: testLimits({ maxOutputBytes: 4_096, maxToolCalls: 10, maxToolConcurrency: 4 }),
  });
  return { counts, program };
}

describe("single-call approvals", () => {
  let directory: string;
  let filename: string;
  let stores: WorkflowStore[];
  const openStore = async () => {
    const store = createSqliteStore({ filename });
    await store.initialize();
    stores.push(store);
    return store;
  };
  const modeOn = (store: WorkflowStore, ttlMs?: number) => {
    const budget = new Budget(1_000, 100);
    return createCodeMode({
      adapter,
      invokeTool: (tool, input, context) =>
        invokeTool(tool, input, {
          ...context,
          permissions: { allow: ["tool:lookup", "tool:pay", "effect:read", "effect:write"] },
          budget,
        }),
      approvals: { store, verifyHuman, ...(ttlMs === undefined ? {} : { ttlMs }) },
    });
  };
  const context = (executionId: string) => ({ runId: "order-7", executionId, scope, signal: NO_ABORT });

  beforeEach(async () => {
    directory = await mkdtemp(join(tmpdir(), "airlock-approvals-"));
    filename = join(directory, "journal.sqlite");
    stores = [];
  });
  afterEach(async () => {
    for (const store of stores) await store.close();
    await rm(directory, { recursive: true, force: true });
  });

  it("pauses at the call, continues in another code mode after approval, and runs no earlier call again", async () => {
    const { counts, program } = fixture();
    const first = modeOn(await openStore());
    const waiting = await first.execute(program, { amount: 40 }, context("pay-1"));
    expect(waiting, JSON.stringify(waiting)).toMatchObject({ status: "waiting" });
    if (waiting.status !== "waiting") throw new Error("not waiting");
    expect(waiting.approval).toMatchObject({
      callId: "pay-1:call:3",
      tool: "pay",
      version: "1",
      inputDigest: expect.stringMatching(/^[a-f0-9]{64}$/),
      digest: expect.stringMatching(/^[a-f0-9]{64}$/),
    });
    expect(waiting.approval.expiresAt).toBeGreaterThan(Date.now());
    expect(counts).toEqual({ lookup: 2, pay: 0 });
    expect(waiting.usage.toolCalls).toBe(2);
    // Resuming before anyone decided only says again what it waits for.
    expect(await first.resume(program, { amount: 40 }, context("pay-1"))).toMatchObject({
      status: "waiting",
      approval: waiting.approval,
    });

    // A "restart": a new store object and code mode on the same file.
    const second = modeOn(await openStore());
    const decision = { scope, executionId: "pay-1", digest: waiting.approval.digest };
    await expect(second.approve({ ...decision, credential: "stranger" })).rejects.toMatchObject({
      code: "PERMISSION_DENIED",
    });
    await expect(second.approve({ ...decision, credential: "outsider" })).rejects.toMatchObject({
      code: "PERMISSION_DENIED",
    });
    await expect(second.approve({ ...decision, digest: "a".repeat(64), credential: "clerk" })).rejects.toMatchObject({
      code: "CONFLICT",
    });
    await expect(
      second.approve({ ...decision, scope: { ...scope, principalId: "other" }, credential: "clerk" }),
    ).rejects.toMatchObject({ code: "NOT_FOUND" });
    expect(await second.approve({ ...decision, credential: "clerk" })).toEqual({ status: "approved" });
    await expect(second.reject({ ...decision, credential: "clerk" })).rejects.toMatchObject({ code: "CONFLICT" });
    const done = (await second.resume(program, { amount: 40 }, context("pay-1"))) as CodeExecutionOutcome<{
      t0: number;
      paid: string;
      receipt: string;
      after: string;
      b: string;
    }>;
    expect(done).toMatchObject({
      status: "succeeded",
      output: { paid: "succeeded", code: null, receipt: "paid 40 to payee-a", after: "after-succeeded", b: "payee-b" },
    });
    // Only the approved call and the one after it ran in the second attempt.
    expect(counts).toEqual({ lookup: 3, pay: 1 });
    expect(done.usage.toolCalls).toBe(2);
    expect(done.evidence.map((e) => e.receipt.toolId)).toEqual(["pay", "lookup"]);
    // The replayed clock and random numbers are the journaled ones (their call matched the journal's digest).
    if (done.status === "succeeded") expect(done.output.t0).toBeGreaterThan(0);
    await expect(second.resume(program, { amount: 40 }, context("pay-1"))).resolves.toMatchObject({
      status: "failed",
      error: { code: "CONFLICT" },
    });
    expect(counts).toEqual({ lookup: 3, pay: 1 });
  });

  it("hands a rejection to the program as a blocked call, and the program goes on", async () => {
    const { counts, program } = fixture();
    const mode = modeOn(await openStore());
    const waiting = await mode.execute(program, { amount: 99 }, context("pay-2"));
    if (waiting.status !== "waiting") throw new Error("not waiting");
    expect(
      await mode.reject({ scope, executionId: "pay-2", digest: waiting.approval.digest, credential: "clerk" }),
    ).toEqual({
      status: "rejected",
    });
    const done = await mode.resume(program, { amount: 99 }, context("pay-2"));
    expect(done).toMatchObject({
      status: "succeeded",
      output: { paid: "blocked", code: "GUARD_BLOCKED", receipt: null, after: "after-blocked" },
    });
    expect(counts).toEqual({ lookup: 3, pay: 0 });
  });

  it("runs without pausing when the tool's approval function says no, and pauses when it says yes", async () => {
    const { counts, program } = fixture(({ amount }) => amount > 100);
    const mode = modeOn(await openStore());
    expect(await mode.execute(program, { amount: 5 }, context("small"))).toMatchObject({
      status: "succeeded",
      output: { paid: "succeeded" },
    });
    expect(counts.pay).toBe(1);
    expect((await mode.execute(program, { amount: 500 }, context("large"))).status).toBe("waiting");
    expect(counts.pay).toBe(1);
  });

  it("fails with INTEGRITY_VIOLATION when the journal does not replay, without acting", async () => {
    const { counts, program } = fixture();
    const mode = modeOn(await openStore());
    const waiting = await mode.execute(program, { amount: 40 }, context("pay-3"));
    if (waiting.status !== "waiting") throw new Error("not waiting");
    await mode.approve({ scope, executionId: "pay-3", digest: waiting.approval.digest, credential: "clerk" });
    // The journal now says call 2 was another lookup than the program makes.
    const db = new Database(filename);
    const rows = db
      .prepare("SELECT scope, id, sequence, data FROM airlock_events WHERE type = 'call.dispatching'")
      .all() as {
      scope: string;
      id: string;
      sequence: number;
      data: string;
    }[];
    const second = rows.find((row) => JSON.parse(row.data).n === 2);
    const data = JSON.parse(second?.data as string);
    data.argsDigest = "0".repeat(64);
    db.prepare("UPDATE airlock_events SET data = ? WHERE scope = ? AND id = ? AND sequence = ?").run(
      JSON.stringify(data),
      second?.scope,
      second?.id,
      second?.sequence,
    );
    db.close();
    const done = await mode.resume(program, { amount: 40 }, context("pay-3"));
    expect(done).toMatchObject({ status: "failed", error: { code: "INTEGRITY_VIOLATION" } });
    expect(counts).toEqual({ lookup: 2, pay: 0 });
  });

  it("refuses another program or input for the journal, a reused execution id, and approvals it was not given", async () => {
    const { program } = fixture();
    const other = fixture(({ amount }) => amount > 0).program;
    const mode = modeOn(await openStore());
    const waiting = await mode.execute(program, { amount: 40 }, context("pay-4"));
    expect(waiting.status).toBe("waiting");
    expect(await mode.resume(program, { amount: 41 }, context("pay-4"))).toMatchObject({ error: { code: "CONFLICT" } });
    expect(await mode.resume(other, { amount: 40 }, context("pay-4"))).toMatchObject({ error: { code: "CONFLICT" } });
    expect(await modeOn(stores[0] as WorkflowStore).execute(program, { amount: 40 }, context("pay-4"))).toMatchObject({
      error: { code: "CONFLICT" },
    });
    const plain = createCodeMode({ adapter, invokeTool: () => ({ status: "succeeded", output: null }) });
    expect(await plain.execute(program, { amount: 1 }, context("pay-5"))).toMatchObject({
      status: "failed",
      error: { code: "INVALID_CONFIG" },
    });
    // Its type has no approve; the object refuses one all the same.
    const untyped = plain as unknown as ApprovingCodeMode;
    await expect(
      untyped.approve({ scope, executionId: "x", digest: "a".repeat(64), credential: "clerk" }),
    ).rejects.toMatchObject({
      code: "INVALID_CONFIG",
    });
  });

  it("expires a request nobody decided in time", async () => {
    const { counts, program } = fixture();
    const mode = modeOn(await openStore(), 200);
    const waiting = await mode.execute(program, { amount: 40 }, context("pay-6"));
    if (waiting.status !== "waiting") throw new Error("not waiting");
    await new Promise((resolve) => setTimeout(resolve, 260));
    await expect(
      mode.approve({ scope, executionId: "pay-6", digest: waiting.approval.digest, credential: "clerk" }),
    ).rejects.toMatchObject({ code: "CONFLICT" });
    expect(await mode.resume(program, { amount: 40 }, context("pay-6"))).toMatchObject({
      status: "failed",
      error: { code: "TIMEOUT" },
    });
    expect(counts.pay).toBe(0);
  });
});
