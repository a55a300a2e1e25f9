/**
 * A resume answers its journaled calls ahead (docs/durable-programs.md, How a resume starts): the run is handed the
 * journal's settled calls with its request, and the VM applies them without a round trip to the host per call. The host
 * still checks every call the program makes against the journal: a divergence among the answered calls is
 * INTEGRITY_VIOLATION with no later call acted on, and a resumed program sees exactly the journaled results and clock.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Budget, defineTool, invokeTool, type Tool, z } from "airlock-codemode";
import { createQuickJsSandboxAdapter } from "airlock-codemode/adapter-code-quickjs";
import {
  createCodeMode,
  defineCodeProgram,
  defineSandboxAdapter,
  type SandboxDeterministicRun,
} from "airlock-codemode/code-mode";
import type { WorkflowStore } from "airlock-codemode/workflows";
import { createSqliteStore } from "airlock-codemode/workflows/sqlite";
import Database from "better-sqlite3";
import { afterAll, afterEach, beforeEach, describe, expect, it } from "vitest";
import { testLimits } from "./helpers/code-mode.ts";

const quickjs = createQuickJsSandboxAdapter({ poolSize: 1 });
afterAll(() => quickjs.close());
/** What each deterministic run was handed as answers, in order of the runs. */
const handed: (SandboxDeterministicRun["answered"] | undefined)[] = [];
// The QuickJS adapter, noting the answers each run is handed.
const adapter = defineSandboxAdapter({
  id: "noting-quickjs",
  version: "1",
  qualification: "production",
  deterministic: true,
  isAvailable: () => quickjs.isAvailable(),
  execute: (request) => {
    handed.push(request.deterministic?.answered);
    return quickjs.execute(request);
  },
});

const scope = { principalId: "agent", projectId: "shop" };
const NO_ABORT = new AbortController().signal;
const verifyHuman = async () => ({ id: "clerk-1", projectId: "shop", canApprove: true });
const limits = testLimits({ cpuMillis: 2_000, maxOutputBytes: 16_384, maxToolCalls: 40, maxToolConcurrency: 4 });

function tools() {
  const counts = { tick: 0, pay: 0 };
  /** The clock values the program passed on, as the tools received them. */
  const clocks: (number | undefined)[] = [];
  let fastDone: () => void = () => {};
  const fast = new Promise<void>((resolve) => {
    fastDone = resolve;
  });
  const tick = defineTool({
    id: "tick",
    version: "1",
    description: "Counts its calls.",
    input: z.object({ i: z.number(), slow: z.boolean().optional(), t: z.number().optional() }),
    output: z.object({ count: z.number(), i: z.number() }),
    effects: "read",
    capabilities: [],
    costMicros: 1,
    execute: async ({ i, slow, t }: { i: number; slow?: boolean; t?: number }) => {
      clocks.push(t);
      // A slow call settles after the fast one made beside it: its result number is the later one.
      if (slow) await fast.then(() => new Promise((resolve) => setTimeout(resolve, 20)));
      else fastDone();
      counts.tick++;
      return { count: counts.tick, i };
    },
  }) as Tool;
  const pay = defineTool({
    id: "pay",
    version: "1",
    description: "Moves money.",
    input: z.object({ amount: z.number(), t: z.number().optional() }),
    output: z.object({ receipt: z.string() }),
    effects: "write",
    capabilities: [],
    costMicros: 1,
    approval: "always",
    execute: ({ amount }: { amount: number }) => {
      counts.pay++;
      return { receipt: `paid ${amount}` };
    },
  }) as Tool;
  return { counts, clocks, tick, pay };
}

interface Settled {
  n: number;
  seq: number;
  now: number;
  result: unknown;
}

describe("a resume that answers its journaled calls ahead", () => {
  let directory: string;
  let filename: string;
  let stores: WorkflowStore[];
  const modeOn = async () => {
    const store = createSqliteStore({ filename });
    await store.initialize();
    stores.push(store);
    const budget = new Budget(1_000, 1_000);
    return createCodeMode({
      adapter,
      invokeTool: (tool, input, context) =>
        invokeTool(tool, input, {
          ...context,
          permissions: { allow: ["tool:tick", "tool:pay", "effect:read", "effect:write"] },
          budget,
        }),
      approvals: { store, verifyHuman },
    });
  };
  const context = (executionId: string) => ({ runId: "run-1", executionId, scope, signal: NO_ABORT });
  const journal = (type: string) => {
    const db = new Database(filename, { readonly: true });
    try {
      return (
        db.prepare("SELECT data FROM airlock_events WHERE type = ? ORDER BY sequence").all(type) as {
          data: string;
        }[]
      ).map((row) => JSON.parse(row.data));
    } finally {
      db.close();
    }
  };

  beforeEach(async () => {
    directory = await mkdtemp(join(tmpdir(), "airlock-answers-"));
    filename = join(directory, "journal.sqlite");
    stores = [];
    handed.length = 0;
  });
  afterEach(async () => {
    for (const store of stores) await store.close();
    await rm(directory, { recursive: true, force: true });
  });

  it("gives the resumed program exactly the journaled results and clock, calls answered out of order included", async () => {
    const { counts, clocks, tick, pay } = tools();
    const program = defineCodeProgram({
      id: "answers.exact",
      version: "1",
      intent: "Counts, then pays.",
      language: "javascript",
      // Each call passes on the clock the program read after the one before: the first attempt's view, as the
      // tools saw it (and the journal's digests bind it).
      source: `async (input, tools) => {
        const seen = [];
        let t;
        for (let i = 0; i < 6; i++) {
          const r = await tools.call("tick", { i, t });
          t = Date.now();
          seen.push({ r, t });
        }
        const pair = await Promise.all([tools.call("tick", { i: 6, slow: true, t }), tools.call("tick", { i: 7, t })]);
        t = Date.now();
        seen.push({ r: pair[0], t }, { r: pair[1], t });
        const paid = await tools.call("pay", { amount: 3, t });
        return { seen, paid: paid.status };
      }`,
      input: z.object({}),
      output: z.object({ seen: z.array(z.object({ r: z.unknown(), t: z.number() })), paid: z.string() }),
      inputSchemaId: "in",
      outputSchemaId: "out",
      tools: [tick, pay],
      limits,
    });
    const mode = await modeOn();
    const waiting = await mode.execute(program, {}, context("exact-1"));
    if (waiting.status !== "waiting") throw new Error(`not waiting: ${JSON.stringify(waiting)}`);
    expect(counts).toEqual({ tick: 8, pay: 0 });
    await mode.approve({ scope, executionId: "exact-1", digest: waiting.approval.digest, credential: "c" });
    const settled = new Map((journal("call.settled") as Settled[]).map((entry) => [entry.n, entry]));
    // The slow call (7) settled after the fast one beside it (8): their result numbers are the other way round.
    expect(settled.get(7)?.seq).toBe(8);
    expect(settled.get(8)?.seq).toBe(7);

    const done = await mode.resume(program, {}, context("exact-1"));
    expect(done, JSON.stringify(done)).toMatchObject({ status: "succeeded", output: { paid: "succeeded" } });
    if (done.status !== "succeeded") throw new Error("not succeeded");
    // No earlier call ran again; the approved one ran once.
    expect(counts).toEqual({ tick: 8, pay: 1 });
    // The resume was handed the eight journaled calls, as the journal has them.
    const answered = handed.at(-1);
    expect(answered).toEqual(
      [1, 2, 3, 4, 5, 6, 7, 8].map((n) => {
        const entry = settled.get(n) as Settled;
        return { result: entry.result, seq: entry.seq, now: entry.now };
      }),
    );
    // And the program saw exactly those results, and the clock its first attempt read after each.
    const { seen } = done.output as { seen: { r: unknown; t: number }[] };
    expect(seen.map(({ r }) => r)).toEqual([1, 2, 3, 4, 5, 6, 7, 8].map((n) => settled.get(n)?.result));
    expect(clocks).toHaveLength(8);
    expect(seen.slice(0, 6).map(({ t }) => t)).toEqual([...clocks.slice(1, 6), clocks[7]]);
    expect(clocks[6]).toBe(clocks[7]);
  });

  for (const [what, tamper] of [
    ["other arguments", (data: Record<string, unknown>) => Object.assign(data, { argsDigest: "0".repeat(64) })],
    ["another tool", (data: Record<string, unknown>) => Object.assign(data, { toolId: "pay" })],
  ] as const) {
    it(`fails with INTEGRITY_VIOLATION when an answered call was journaled with ${what}, acting on no later call`, async () => {
      const { counts, tick, pay } = tools();
      const program = defineCodeProgram({
        id: "answers.diverged",
        version: "1",
        intent: "Counts, pays, counts.",
        language: "javascript",
        source: `async (input, tools) => {
          let sum = 0;
          for (let i = 0; i < 12; i++) sum += (await tools.call("tick", { i })).output.count;
          const paid = await tools.call("pay", { amount: sum });
          await tools.call("tick", { i: 99 });
          return { sum, paid: paid.status };
        }`,
        input: z.object({}),
        output: z.object({ sum: z.number(), paid: z.string() }),
        inputSchemaId: "in",
        outputSchemaId: "out",
        tools: [tick, pay],
        limits,
      });
      const mode = await modeOn();
      const id = `diverged-${what}`;
      const waiting = await mode.execute(program, {}, context(id));
      if (waiting.status !== "waiting") throw new Error(`not waiting: ${JSON.stringify(waiting)}`);
      await mode.approve({ scope, executionId: id, digest: waiting.approval.digest, credential: "c" });
      // The journal now says the program's 4th call, one of those answered ahead, was another.
      const db = new Database(filename);
      const rows = db
        .prepare("SELECT scope, id, sequence, data FROM airlock_events WHERE type = 'call.dispatching'")
        .all() as { scope: string; id: string; sequence: number; data: string }[];
      const fourth = rows.find((row) => JSON.parse(row.data).n === 4);
      if (fourth === undefined) throw new Error("no 4th call in the journal");
      db.prepare("UPDATE airlock_events SET data = ? WHERE scope = ? AND id = ? AND sequence = ?").run(
        JSON.stringify(tamper(JSON.parse(fourth.data))),
        fourth.scope,
        fourth.id,
        fourth.sequence,
      );
      db.close();
      const dispatchedBefore = journal("call.dispatching").length;

      const done = await mode.resume(program, {}, context(id));
      expect(done).toMatchObject({ status: "failed", error: { code: "INTEGRITY_VIOLATION" } });
      // The 4th call was among those handed to the run ahead of it.
      expect(handed.at(-1)?.length).toBe(12);
      // Neither the approved payment nor any other call was made, nor journaled as made.
      expect(counts).toEqual({ tick: 12, pay: 0 });
      expect(journal("call.dispatching").length).toBe(dispatchedBefore);
      expect(journal("call.settled").length).toBe(12);
    });
  }
});
