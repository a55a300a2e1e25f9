/**
 * Approvals bind what is sent: a person approves a 500-cent refund, and rows of the journal are then changed in the
 * store (SQLite and PostgreSQL). The resume computes the approval's digest again from the call it is about to send and
 * checks the decision against its record: a call other than the approved one, or a decision nobody made, is
 * INTEGRITY_VIOLATION with nothing sent, and the journal says so. A row that does not have the journal's format is
 * STORAGE_UNAVAILABLE with nothing sent and nothing changed: once mended, the execution resumes as if untouched.
 * (Before, two changed event rows made the resume send a 50,000-cent refund under the 500-cent approval.)
 */
import { Budget, z } from "airlock-codemode";
import { createQuickJsSandboxAdapter } from "airlock-codemode/adapter-code-quickjs";
import { type ApprovingCodeMode, defineCodeProgram } from "airlock-codemode/code-mode";
import type { WorkflowStore } from "airlock-codemode/workflows";
import { afterAll, afterEach, beforeEach, describe, expect, it } from "vitest";
import { argsOf } from "../src/code-mode/approvals/call-journal.ts";
// @ts-expect-error: a plain-JavaScript fixture shared with the crash tests' child processes.
import { clerkApprovedMode, scope } from "./fixtures/workflows/approving-mode.mjs";
import { testLimits } from "./helpers/code-mode.ts";
import { refundTools } from "./helpers/refund-tools.ts";
import {
  type BackingKind,
  type EventRow,
  journalRows,
  openBacking,
  type StoreBacking,
} from "./helpers/store-backings.ts";
import { requirePostgres } from "./helpers/system-tools.ts";

const url = await requirePostgres();
const adapter = createQuickJsSandboxAdapter({ poolSize: 1 });
afterAll(() => adapter.close());

const context = { runId: "order-12", executionId: "refund-12", scope, signal: new AbortController().signal };
const input = { order: "o-12" };
/** The order's total is 500 cents; the program refunds what the lookup says, after a person approves the refund. */
function fixture() {
  const { sent, tools } = refundTools();
  const program = defineCodeProgram({
    id: "shop.refund-order",
    version: "1",
    intent: "Refund an order in full.",
    language: "javascript",
    source: `async (input, tools) => {
      const order = await tools.call("lookup", { order: input.order });
      const refunded = await tools.call("refund", { order: input.order, cents: order.output.cents });
      return { status: refunded.status, cents: order.output.cents };
    }`,
    input: z.object({ order: z.string() }),
    output: z.object({ status: z.string(), cents: z.number() }),
    inputSchemaId: "refund.in",
    outputSchemaId: "refund.out",
    tools,
    limits: testLimits(),
  });
  return { sent, program };
}

describe.each(["SQLite", "PostgreSQL"] as BackingKind[])(
  "a journal changed in the store after a decision, on %s",
  (kind) => {
    const skip = kind === "PostgreSQL" && url === undefined;
    let backing: StoreBacking;
    beforeEach(async () => {
      if (!skip) backing = await openBacking(kind, url);
    });
    afterEach(async () => {
      await backing?.cleanup();
    });

    const modeOn = (store: WorkflowStore): ApprovingCodeMode =>
      clerkApprovedMode(store, adapter, new Budget(1_000, 100));
    const journal = () => journalRows(backing);
    const editEvent = async (row: EventRow, data: Record<string, unknown>) => {
      await backing.sql("UPDATE {events} SET data = $1 WHERE scope = $2 AND id = $3 AND sequence = $4", [
        JSON.stringify(data),
        row.scope,
        row.id,
        row.sequence,
      ]);
    };
    const editState = async (edit: (state: Record<string, unknown>) => void) => {
      const { scope: sh, id, state } = await journal();
      edit(state);
      await backing.sql("UPDATE {records} SET state = $1 WHERE scope = $2 AND id = $3", [
        JSON.stringify(state),
        sh,
        id,
      ]);
    };
    const eventOf = (rows: EventRow[], type: string, n: number) =>
      rows.find((row) => row.type === type && row.data.n === n);

    /** Runs the program to its pause at the refund, and decides it as the clerk, in one process. */
    async function pauseAndDecide(verdict: "approve" | "reject" | null) {
      const setup = fixture();
      const mode = modeOn(await backing.open());
      const waiting = await mode.execute(setup.program, input, context);
      expect(waiting).toMatchObject({ status: "waiting", approval: { callId: "refund-12:call:2", tool: "refund" } });
      if (waiting.status !== "waiting") throw new Error("not waiting");
      const decision = {
        scope,
        executionId: context.executionId,
        digest: waiting.approval.digest,
        credential: "clerk",
      };
      if (verdict === "approve") await mode.approve(decision);
      if (verdict === "reject") await mode.reject(decision);
      return setup;
    }

    /** The resume, in a new process as it were: INTEGRITY_VIOLATION, nothing sent, and the journal ends so, for good. */
    async function expectRefused(setup: ReturnType<typeof fixture>, message: RegExp) {
      const mode = modeOn(await backing.open());
      const done = await mode.resume(setup.program, input, context);
      expect(done).toMatchObject({ status: "failed", error: { code: "INTEGRITY_VIOLATION", message } });
      expect(setup.sent).toEqual([]);
      const after = await journal();
      expect(after.state).toMatchObject({ status: "failed", owner: null, error: { code: "INTEGRITY_VIOLATION" } });
      expect(after.events.at(-1)).toMatchObject({
        type: "journal.status",
        data: { status: "failed", code: "INTEGRITY_VIOLATION" },
      });
      expect(await mode.resume(setup.program, input, context)).toMatchObject({ error: { code: "CONFLICT" } });
      expect(setup.sent).toEqual([]);
    }

    it.skipIf(skip)(
      "refuses to send a 50,000-cent refund under a 500-cent approval (two event rows changed)",
      async () => {
        const setup = await pauseAndDecide("approve");
        const { events } = await journal();
        const lookup = eventOf(events, "call.settled", 1) as EventRow;
        const awaiting = eventOf(events, "call.awaiting", 2) as EventRow;
        expect(lookup.data.result).toEqual({ status: "succeeded", output: { order: "o-12", cents: 500 } });
        // The lookup now answers 50,000 cents, and the awaited call is journaled with the arguments that follow from it,
        // so that the replay matches the journal call for call.
        await editEvent(lookup, {
          ...lookup.data,
          result: { status: "succeeded", output: { order: "o-12", cents: 50_000 } },
        });
        await editEvent(awaiting, {
          ...awaiting.data,
          argsDigest: argsOf({ order: "o-12", cents: 50_000 }, 1_024).digest,
        });
        await expectRefused(setup, /not the call the program makes/);
      },
      30_000,
    );

    it.skipIf(skip)(
      "refuses it also when the state's record of the approved call was changed to match",
      async () => {
        const setup = await pauseAndDecide("approve");
        const { events } = await journal();
        const lookup = eventOf(events, "call.settled", 1) as EventRow;
        const awaiting = eventOf(events, "call.awaiting", 2) as EventRow;
        const inputDigest = argsOf({ order: "o-12", cents: 50_000 }, 1_024).digest;
        await editEvent(lookup, {
          ...lookup.data,
          result: { status: "succeeded", output: { order: "o-12", cents: 50_000 } },
        });
        await editEvent(awaiting, { ...awaiting.data, argsDigest: inputDigest });
        await editState((state) => {
          Object.assign(state.pending as object, { inputDigest, input: { order: "o-12", cents: 50_000 } });
        });
        await expectRefused(setup, /not the call the program makes/);
      },
      30_000,
    );

    it.skipIf(skip)(
      "refuses a rejection turned into an approval in the state",
      async () => {
        const setup = await pauseAndDecide("reject");
        await editState((state) => {
          state.status = "approved";
          (state.pending as { decision: string }).decision = "approved";
        });
        await expectRefused(setup, /not the call the program makes/);
      },
      30_000,
    );

    it.skipIf(skip)(
      "refuses an approval nobody gave (a waiting journal marked approved)",
      async () => {
        const setup = await pauseAndDecide(null);
        await editState((state) => {
          state.status = "approved";
          Object.assign(state.pending as object, { decision: "approved", humanId: "clerk-1" });
        });
        await expectRefused(setup, /not the call the program makes/);
      },
      30_000,
    );

    it.skipIf(skip)(
      "answers rows that are not the journal's with STORAGE_UNAVAILABLE, sends nothing, changes nothing",
      async () => {
        const setup = await pauseAndDecide("approve");
        const before = await journal();
        const lookup = eventOf(before.events, "call.settled", 1) as EventRow;
        const awaiting = eventOf(before.events, "call.awaiting", 2) as EventRow;
        const bad: [EventRow | "state", unknown][] = [
          [lookup, { ...lookup.data, result: { status: "succeeded" } }],
          [lookup, { ...lookup.data, result: "ok" }],
          [lookup, { ...lookup.data, result: { status: "failed", error: { code: "NO_SUCH_CODE", message: "" } } }],
          [lookup, { ...lookup.data, result: { status: "blocked", error: { code: "TOOL_FAILED", message: "" } } }],
          [lookup, { ...lookup.data, seq: "1" }],
          [awaiting, { ...awaiting.data, toolId: 7 }],
          [awaiting, { ...awaiting.data, n: -2 }],
          ["state", { n: "2" }],
          ["state", { decision: "maybe" }],
        ];
        for (const [row, change] of bad) {
          if (row === "state") await editState((state) => Object.assign(state.pending as object, change));
          else await editEvent(row, change as Record<string, unknown>);
          const mode = modeOn(await backing.open());
          const done = await mode.resume(setup.program, input, context);
          expect(done, JSON.stringify(change)).toMatchObject({
            status: "failed",
            error: { code: "STORAGE_UNAVAILABLE", message: "a stored call journal does not check out" },
          });
          expect(setup.sent).toEqual([]);
          // Mended, the journal is as it was: its state, and its history but for the words of the refused attempts.
          if (row === "state") await editState((state) => Object.assign(state, { pending: before.state.pending }));
          else await editEvent(row, row.data);
          const now = await journal();
          expect(now.state).toEqual(before.state);
          expect(now.events.slice(0, before.events.length)).toEqual(before.events);
          expect(now.events.slice(before.events.length).every((event) => event.type === "journal.status")).toBe(true);
        }
        const done = await modeOn(await backing.open()).resume(setup.program, input, context);
        expect(done).toMatchObject({ status: "succeeded", output: { status: "succeeded", cents: 500 } });
        expect(setup.sent).toEqual(["o-12:500"]);
      },
      60_000,
    );
  },
);
