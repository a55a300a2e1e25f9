/**
 * A program that makes several calls needing approval at once (`Promise.all`): each is asked for, in a pause of its
 * own, and gets its own decision; the approved ones are sent once, the rejected ones reach the program as blocked,
 * and the execution finishes, on SQLite and PostgreSQL, across restarts between decisions and from snapshots.
 * (Before, the resume after the first approval sent that call and then ended INTEGRITY_VIOLATION: the second call,
 * journaled as awaiting beside the first, was taken for tampering and never asked about.)
 */
import { Budget, z } from "airlock-codemode";
import { type ClosableSandboxAdapter, createQuickJsSandboxAdapter } from "airlock-codemode/adapter-code-quickjs";
import {
  type ApprovingCodeMode,
  type CallApproval,
  defineCodeProgram,
  type ResumableExecutionOutcome,
  type SandboxAdapter,
} from "airlock-codemode/code-mode";
import type { WorkflowStore } from "airlock-codemode/workflows";
import { afterAll, afterEach, beforeEach, describe, expect, it } from "vitest";
// @ts-expect-error: a plain-JavaScript fixture shared with the crash tests' child processes.
import { clerkApprovedMode, scope } from "./fixtures/workflows/approving-mode.mjs";
import { testLimits } from "./helpers/code-mode.ts";
import { observeAdapter } from "./helpers/observed-adapter.ts";
import { type Refund, refundTools } from "./helpers/refund-tools.ts";
import { type BackingKind, journalRows, openBacking, type StoreBacking } from "./helpers/store-backings.ts";
import { requirePostgres } from "./helpers/system-tools.ts";

const url = await requirePostgres();
const NO_ABORT = new AbortController().signal;
const adapters: ClosableSandboxAdapter[] = [];
const quickjs = () => {
  const adapter = createQuickJsSandboxAdapter({ poolSize: 1 });
  adapters.push(adapter);
  return adapter;
};
afterAll(async () => {
  for (const adapter of adapters) await adapter.close();
});

/**
 * `refund` needs approval; the program sends the first refund, a lookup and the other refunds in one `Promise.all`,
 * then one more lookup. Call 1 is the first refund, call 2 the lookup beside it, calls 3... the other refunds.
 */
function fixture(refunds: Refund[]) {
  const { sent, lookups, tools } = refundTools();
  const program = defineCodeProgram({
    id: "shop.refunds",
    version: "1",
    intent: "Refund several orders at once.",
    language: "javascript",
    source: `async (input, tools) => {
      const t0 = Date.now();
      const results = await Promise.all([
        tools.call("refund", input.refunds[0]),
        tools.call("lookup", { order: "beside" }),
        ...input.refunds.slice(1).map((refund) => tools.call("refund", refund)),
      ]);
      const after = await tools.call("lookup", { order: "after", t: Date.now() });
      return {
        t0,
        results: results.map((r) => (r.status !== "succeeded" ? r.error.code : r.output.refunded ?? r.output.order)),
        after: after.output.order,
      };
    }`,
    input: z.object({ refunds: z.array(z.object({ order: z.string(), cents: z.number() })) }),
    output: z.object({ t0: z.number(), results: z.array(z.string()), after: z.string() }),
    inputSchemaId: "refunds.in",
    outputSchemaId: "refunds.out",
    tools,
    limits: testLimits({ cpuMillis: 1_000, wallTimeMillis: 20_000, maxToolCalls: 8, maxToolConcurrency: 8 }),
  });
  return { sent, lookups, program, input: { refunds } };
}

/** The refund a call number names (call 2 is the lookup). */
const refundOf = (refunds: Refund[], n: number) => refunds[n === 1 ? 0 : n - 2] as Refund;
const callNumber = (approval: CallApproval) => Number(approval.callId.slice(approval.callId.lastIndexOf(":") + 1));

describe.each(["SQLite", "PostgreSQL"] as BackingKind[])("several calls that need approval at once, on %s", (kind) => {
  const skip = kind === "PostgreSQL" && url === undefined;
  let backing: StoreBacking;
  beforeEach(async () => {
    if (!skip) backing = await openBacking(kind, url);
  });
  afterEach(async () => {
    await backing?.cleanup();
  });

  const modeOn = (store: WorkflowStore, adapter: SandboxAdapter, snapshotMinCalls?: number): ApprovingCodeMode =>
    clerkApprovedMode(
      store,
      adapter,
      new Budget(1_000, 100),
      snapshotMinCalls === undefined ? {} : { snapshotMinCalls },
    );
  /**
   * Runs the program to its end, deciding each call it waits on as `verdicts` says for its order; with `restart`, on a
   * new store object, code mode and sandbox for every decision and every resume (as another process would).
   */
  async function decideAll(
    refunds: Refund[],
    executionId: string,
    verdicts: Record<string, "approve" | "reject">,
    {
      restart = false,
      adapter = () => quickjs() as SandboxAdapter,
      snapshotMinCalls = undefined as number | undefined,
    },
  ) {
    const setup = fixture(refunds);
    const context = { runId: "order-3", executionId, scope, signal: NO_ABORT };
    let mode = modeOn(await backing.open(), adapter(), snapshotMinCalls);
    let outcome: ResumableExecutionOutcome<unknown> = await mode.execute(setup.program, setup.input, context);
    const asked: CallApproval[] = [];
    while (outcome.status === "waiting") {
      expect(asked.length, "asked more often than there are refunds").toBeLessThan(refunds.length);
      const { approval } = outcome;
      asked.push(approval);
      const refund = refundOf(refunds, callNumber(approval));
      // The request is for that one call, with its exact arguments; nothing was sent for it.
      expect(approval.tool).toBe("refund");
      expect((await journalRows(backing)).state.pending).toMatchObject({
        n: callNumber(approval),
        input: refund,
        digest: approval.digest,
      });
      expect(setup.sent).not.toContain(`${refund.order}:${refund.cents}`);
      if (restart) mode = modeOn(await backing.open(), adapter(), snapshotMinCalls);
      const decision = { scope, executionId, digest: approval.digest, credential: "clerk" };
      if (verdicts[refund.order] === "approve") await mode.approve(decision);
      else await mode.reject(decision);
      if (restart) mode = modeOn(await backing.open(), adapter(), snapshotMinCalls);
      outcome = await mode.resume(setup.program, setup.input, context);
    }
    return { ...setup, outcome, asked };
  }

  /** What every run of `decideAll` must come to: each refund asked once and decided as told, nothing twice. */
  async function expectDecidedEach(
    refunds: Refund[],
    verdicts: Record<string, "approve" | "reject">,
    run: Awaited<ReturnType<typeof decideAll>>,
  ) {
    expect(run.outcome, JSON.stringify(run.outcome)).toMatchObject({
      status: "succeeded",
      output: {
        results: [
          verdicts[refunds[0]?.order as string] === "approve"
            ? `${refunds[0]?.order}:${refunds[0]?.cents}`
            : "GUARD_BLOCKED",
          "beside",
          ...refunds.slice(1).map((r) => (verdicts[r.order] === "approve" ? `${r.order}:${r.cents}` : "GUARD_BLOCKED")),
        ],
        after: "after",
      },
    });
    const refundCalls = refunds.map((_, i) => (i === 0 ? 1 : i + 2));
    expect(run.asked.map(callNumber).sort()).toEqual(refundCalls);
    expect(new Set(run.asked.map((a) => a.digest)).size).toBe(refunds.length);
    expect(run.sent.sort()).toEqual(
      refunds.filter((r) => verdicts[r.order] === "approve").map((r) => `${r.order}:${r.cents}`),
    );
    expect(run.lookups.sort()).toEqual(["after", "beside"]);
    // The journal: succeeded, no failure recorded, and each decision in its history, as it was made.
    const { state, events } = await journalRows(backing);
    expect(state).toMatchObject({ status: "succeeded", error: null, pending: null });
    const decided = events.filter((e) => e.type === "call.decided").map((e) => e.data);
    expect(decided.sort((a, b) => (a.n as number) - (b.n as number))).toEqual(
      refundCalls.map((n, i) => ({
        n,
        digest: run.asked.find((a) => callNumber(a) === n)?.digest,
        decision: verdicts[refunds[i]?.order as string] === "approve" ? "approved" : "rejected",
        humanId: "clerk-1",
      })),
    );
    expect(JSON.stringify(events)).not.toContain("INTEGRITY_VIOLATION");
  }

  it.skipIf(skip)(
    "asks for each of two calls in one Promise.all, sends each once approved, and finishes",
    async () => {
      const refunds = [
        { order: "a", cents: 500 },
        { order: "b", cents: 700 },
      ];
      const verdicts = { a: "approve", b: "approve" } as const;
      const run = await decideAll(refunds, "both-1", verdicts, {});
      await expectDecidedEach(refunds, verdicts, run);
    },
    60_000,
  );

  it.skipIf(skip)(
    "approves one and rejects the other, with a restart between the decisions",
    async () => {
      const refunds = [
        { order: "a", cents: 500 },
        { order: "b", cents: 700 },
      ];
      for (const verdicts of [
        { a: "approve", b: "reject" },
        { a: "reject", b: "approve" },
      ] as const) {
        const run = await decideAll(refunds, `mixed-${verdicts.a}`, verdicts, { restart: true });
        await expectDecidedEach(refunds, verdicts, run);
        await backing.sql("DELETE FROM {events}");
        await backing.sql("DELETE FROM {records}");
      }
    },
    90_000,
  );

  it.skipIf(skip)(
    "asks for each of three, resumed from snapshots of the paused run",
    async () => {
      const refunds = [
        { order: "a", cents: 500 },
        { order: "b", cents: 700 },
        { order: "c", cents: 900 },
      ];
      const verdicts = { a: "approve", b: "reject", c: "approve" } as const;
      const observed = observeAdapter(quickjs());
      // Every pause keeps a snapshot (threshold 0), so every resume restores the run with its calls still open.
      const run = await decideAll(refunds, "three-1", verdicts, {
        adapter: () => observed.adapter,
        snapshotMinCalls: 0,
      });
      await expectDecidedEach(refunds, verdicts, run);
      expect(observed.runs.slice(1).map((r) => [r.snapshotGiven, r.restored])).toEqual([
        [true, true],
        [true, true],
        [true, true],
      ]);
    },
    60_000,
  );
});
