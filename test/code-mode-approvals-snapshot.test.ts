/**
 * Resuming a paused program from a snapshot of its VM (docs/durable-programs.md, How a resume starts): a program paused
 * after `snapshotMinCalls` calls or more is captured where it waits and kept in the journal's store; after the approval
 * a new code mode on the same store restores it instead of replaying its journal, makes none of its earlier calls
 * again, checks the calls it makes against the journal, and ends exactly as a replay does. A short journal is replayed
 * and keeps no snapshot; a snapshot of another build is not used (the resume replays); one changed at rest is
 * INTEGRITY_VIOLATION; a VM past MAX_SNAPSHOT_BYTES is not kept.
 */
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Budget, defineTool, invokeTool, type Tool, z } from "airlock-codemode";
import {
  type ClosableSandboxAdapter,
  createQuickJsProtocolAdapter,
  createQuickJsSandboxAdapter,
} from "airlock-codemode/adapter-code-quickjs";
import {
  createCodeMode,
  defineCodeProgram,
  defineSandboxAdapter,
  type SandboxAdapter,
  type SandboxDeterministicRun,
} from "airlock-codemode/code-mode";
import type { WorkflowStore } from "airlock-codemode/workflows";
import { createSqliteStore } from "airlock-codemode/workflows/sqlite";
import Database from "better-sqlite3";
import { afterAll, afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { MAX_SNAPSHOT_BYTES } from "../dist/engine/limits.js";
import { testLimits } from "./helpers/code-mode.ts";
import { observeAdapter } from "./helpers/observed-adapter.ts";
import { launchVmSideChild } from "./helpers/vm-side.ts";

/** The threshold these tests give (`approvals.snapshotMinCalls`): a default-threshold run is in the crash tests. */
const MIN_CALLS = 12;
const scope = { principalId: "agent", projectId: "shop" };
const NO_ABORT = new AbortController().signal;
const verifyHuman = async () => ({ id: "clerk-1", projectId: "shop", canApprove: true });

const adapters: ClosableSandboxAdapter[] = [];
const quickjs = (wasmPath?: string) => {
  const adapter = createQuickJsSandboxAdapter({ poolSize: 1, ...(wasmPath === undefined ? {} : { wasmPath }) });
  adapters.push(adapter);
  return adapter;
};
afterAll(async () => {
  for (const adapter of adapters) await adapter.close();
});

function fixture(reads: number, memoryBytes = 16 * 1024 * 1024, hold = 0) {
  const counts = { read: 0, pay: 0 };
  const value = z.object({ i: z.number() }).passthrough();
  const read = defineTool({
    id: "read",
    version: "1",
    description: "Reads.",
    input: value,
    output: z.object({ v: z.number() }),
    effects: "read",
    capabilities: [],
    costMicros: 1,
    execute: ({ i }: { i: number }) => {
      counts.read++;
      return { v: i };
    },
  }) as Tool;
  const pay = defineTool({
    id: "pay",
    version: "1",
    description: "Pays.",
    input: z.object({ amount: z.number() }),
    output: z.object({ receipt: z.string() }),
    effects: "write",
    capabilities: [],
    costMicros: 5,
    approval: "always",
    execute: ({ amount }: { amount: number }) => {
      counts.pay++;
      return { receipt: `paid ${amount}` };
    },
  }) as Tool;
  const program = defineCodeProgram({
    id: "shop.snapshot",
    version: "1",
    intent: "Read many things, pay, read on.",
    language: "javascript",
    source: `async (input, tools) => {
      const held = ${hold} > 0 ? new Uint8Array(${hold}).fill(7) : null;
      const t0 = Date.now();
      const r0 = Math.random();
      let sum = 0;
      for (let i = 0; i < input.reads; i++) sum += (await tools.call("read", { i })).output.v;
      const [paid, beside] = await Promise.all([
        tools.call("pay", { amount: sum }),
        tools.call("read", { i: 1000, t: Date.now() }),
      ]);
      const after = await tools.call("read", { i: 2000, r: Math.random() });
      return {
        sum, t0, r0, r1: Math.random(), t1: Date.now(),
        paid: paid.status === "succeeded" ? paid.output.receipt : paid.error.code,
        beside: beside.output.v, after: after.output.v, held: held === null ? 0 : held.length,
      };
    }`,
    input: z.object({ reads: z.number() }),
    output: z.object({
      sum: z.number(),
      t0: z.number(),
      r0: z.number(),
      r1: z.number(),
      t1: z.number(),
      paid: z.string(),
      beside: z.number(),
      after: z.number(),
      held: z.number(),
    }),
    inputSchemaId: "snap.in",
    outputSchemaId: "snap.out",
    tools: [read, pay],
    limits: testLimits({
      cpuMillis: 5_000,
      wallTimeMillis: 30_000,
      memoryBytes,
      maxOutputBytes: 4_096,
      maxToolCalls: reads + 4,
      maxToolConcurrency: 4,
    }),
  });
  return { counts, program, input: { reads } };
}

describe("resuming a paused program from a snapshot", () => {
  let directory: string;
  let filename: string;
  let stores: WorkflowStore[];
  const openStore = async (file = filename) => {
    const store = createSqliteStore({ filename: file });
    await store.initialize();
    stores.push(store);
    return store;
  };
  const modeOn = (store: WorkflowStore, adapter: SandboxAdapter, snapshotMinCalls = MIN_CALLS) => {
    const budget = new Budget(100_000, 100_000);
    return createCodeMode({
      adapter,
      invokeTool: (tool, input, context) =>
        invokeTool(tool, input, {
          ...context,
          permissions: { allow: ["tool:read", "tool:pay", "effect:read", "effect:write"] },
          budget,
        }),
      approvals: { store, verifyHuman, snapshotMinCalls },
    });
  };
  const context = (executionId: string) => ({ runId: "order-1", executionId, scope, signal: NO_ABORT });
  /** The snapshot records of the store, as the table holds them. */
  const snapshotRows = (file = filename) => {
    const db = new Database(file);
    try {
      return (
        db.prepare("SELECT id, state FROM airlock_records WHERE kind = 'code-snapshot'").all() as {
          id: string;
          state: string;
        }[]
      ).map((row) => ({ id: row.id, state: JSON.parse(row.state) as { data: string | null; key: string } }));
    } finally {
      db.close();
    }
  };
  /** Pauses the program in one code mode, and approves in another on a new store object (a restart). */
  async function pauseAndApprove(reads: number, executionId: string, first: SandboxAdapter, hold = 0) {
    const setup = fixture(reads, hold > 0 ? 32 * 1024 * 1024 : undefined, hold);
    const waiting = await modeOn(await openStore(), first).execute(setup.program, setup.input, context(executionId));
    expect(waiting, JSON.stringify(waiting)).toMatchObject({
      status: "waiting",
      approval: { callId: `${executionId}:call:${reads + 1}`, tool: "pay" },
    });
    if (waiting.status !== "waiting") throw new Error("not waiting");
    await modeOn(await openStore(), quickjs()).approve({
      scope,
      executionId,
      digest: waiting.approval.digest,
      credential: "clerk",
    });
    return setup;
  }

  beforeEach(() => {
    directory = mkdtempSync(join(tmpdir(), "airlock-snapshot-"));
    filename = join(directory, "journal.sqlite");
    stores = [];
  });
  afterEach(async () => {
    vi.restoreAllMocks();
    for (const store of stores) await store.close();
    rmSync(directory, { recursive: true, force: true });
  });

  it("restores a program paused after more calls than the threshold, in a new code mode, without repeating a call", async () => {
    const reads = MIN_CALLS + 8;
    const { counts, program, input } = await pauseAndApprove(reads, "long-1", quickjs());
    // The pay call waits; the read beside it was sent before the pause.
    expect(counts).toEqual({ read: reads + 1, pay: 0 });
    const kept = snapshotRows();
    expect(kept).toHaveLength(1);
    expect(kept[0]?.state.data).toEqual(expect.any(String));

    const { adapter, runs } = observeAdapter(quickjs());
    const done = await modeOn(await openStore(), adapter).resume(program, input, context("long-1"));
    expect(done, JSON.stringify(done)).toMatchObject({
      status: "succeeded",
      output: { sum: (reads * (reads - 1)) / 2, paid: `paid ${(reads * (reads - 1)) / 2}`, beside: 1000, after: 2000 },
    });
    expect(runs).toEqual([{ snapshotGiven: true, restored: true, calls: 3 }]);
    // Only the approved call and the read after it ran now; the read beside it was answered from the journal.
    expect(counts).toEqual({ read: reads + 2, pay: 1 });
    expect(done.usage.toolCalls).toBe(2);
    expect(done.evidence.map((e) => e.receipt.toolId)).toEqual(["pay", "read"]);
    // Once the execution moved past it, the snapshot's data is gone from the store.
    expect(snapshotRows()[0]?.state.data).toBeNull();
  }, 60_000);

  it("replays a program paused after fewer calls than the threshold, and keeps no snapshot of it", async () => {
    const reads = MIN_CALLS - 4;
    const { counts, program, input } = await pauseAndApprove(reads, "short-1", quickjs());
    expect(snapshotRows()).toEqual([]);
    const { adapter, runs } = observeAdapter(quickjs());
    const done = await modeOn(await openStore(), adapter).resume(program, input, context("short-1"));
    expect(done).toMatchObject({ status: "succeeded", output: { sum: (reads * (reads - 1)) / 2 } });
    expect(runs).toEqual([{ snapshotGiven: false, restored: undefined, calls: reads + 3 }]);
    expect(counts).toEqual({ read: reads + 2, pay: 1 });
  }, 60_000);

  it("ends a resume from the snapshot exactly as a replay of the same journal: outcome, usage, evidence and records", async () => {
    const reads = MIN_CALLS + 5;
    // A result's time is the host's clock, never earlier than the journal's last: stopped before the first attempt,
    // the clock gives both resumes the same times, so that everything they record can be compared.
    const frozen = Date.now();
    const { counts, program, input } = await pauseAndApprove(reads, "same-1", quickjs());
    for (const store of stores.splice(0)) await store.close();
    const copy = join(directory, "copy.sqlite");
    copyFileSync(filename, copy);
    vi.spyOn(Date, "now").mockReturnValue(frozen);
    const fromSnapshot = observeAdapter(quickjs());
    const byReplay = observeAdapter(quickjs(), { snapshots: false });
    const a = await modeOn(await openStore(filename), fromSnapshot.adapter).resume(program, input, context("same-1"));
    const b = await modeOn(await openStore(copy), byReplay.adapter).resume(program, input, context("same-1"));
    expect(fromSnapshot.runs).toEqual([{ snapshotGiven: true, restored: true, calls: 3 }]);
    expect(byReplay.runs).toEqual([{ snapshotGiven: false, restored: undefined, calls: reads + 3 }]);
    expect(a.status).toBe("succeeded");
    expect(a).toEqual(b);
    expect(counts).toEqual({ read: reads + 1 + 2, pay: 2 });
    const records = (file: string) => {
      const db = new Database(file);
      try {
        return {
          journal: db.prepare("SELECT state FROM airlock_records WHERE kind = 'code-journal'").get(),
          snapshot: db.prepare("SELECT state FROM airlock_records WHERE kind = 'code-snapshot'").get(),
          events: db.prepare("SELECT sequence, type, data FROM airlock_events ORDER BY id, sequence").all(),
        };
      } finally {
        db.close();
      }
    };
    for (const store of stores.splice(0)) await store.close();
    expect(records(filename)).toEqual(records(copy));
  }, 60_000);

  it("does not restore a snapshot of another build: the resume replays the journal", async () => {
    // Another build of the wasm: QuickJS with a custom section of its own, so other bytes and another digest.
    const original = createRequire(import.meta.url).resolve("quickjs-wasi/quickjs.wasm");
    const other = join(directory, "quickjs-other.wasm");
    writeFileSync(other, Buffer.concat([readFileSync(original), Buffer.from([0, 6, 5, ...Buffer.from("other")])]));
    const reads = MIN_CALLS + 5;
    const { counts, program, input } = await pauseAndApprove(reads, "other-1", quickjs(other));
    const kept = snapshotRows();
    expect(kept).toHaveLength(1);
    const { adapter, runs } = observeAdapter(quickjs());
    const done = await modeOn(await openStore(), adapter).resume(program, input, context("other-1"));
    expect(done).toMatchObject({ status: "succeeded", output: { sum: (reads * (reads - 1)) / 2, after: 2000 } });
    // Given the snapshot, the VM side did not take it, and the program ran from its start against the journal.
    expect(runs).toEqual([{ snapshotGiven: true, restored: false, calls: reads + 3 }]);
    expect(counts).toEqual({ read: reads + 2, pay: 1 });
  }, 60_000);

  it("checks the calls a restored run makes against the journal: another call at a journaled number sends nothing", async () => {
    const reads = MIN_CALLS + 5;
    const { counts, program, input } = await pauseAndApprove(reads, "diverged-1", quickjs());
    // The restored run asks for the approved payment with another amount than the person approved.
    const inner = quickjs();
    const changing = defineSandboxAdapter({
      id: "changing-quickjs",
      version: "1",
      qualification: "production",
      deterministic: true,
      snapshots: true,
      isAvailable: () => inner.isAvailable(),
      execute: (request) => {
        const run = request.deterministic as SandboxDeterministicRun;
        const call = (toolId: string, value: unknown) => run.call(toolId, toolId === "pay" ? { amount: 1 } : value);
        return inner.execute({ ...request, deterministic: { ...run, call } });
      },
    });
    const { adapter, runs } = observeAdapter(changing);
    expect(await modeOn(await openStore(), adapter).resume(program, input, context("diverged-1"))).toMatchObject({
      status: "failed",
      error: { code: "INTEGRITY_VIOLATION" },
    });
    expect(runs[0]).toMatchObject({ snapshotGiven: true, restored: true });
    expect(counts).toEqual({ read: reads + 1, pay: 0 });
  }, 60_000);

  it("replays the whole journal for an adapter that says nothing of the snapshot it was given: nothing runs twice", async () => {
    const reads = MIN_CALLS + 5;
    const { counts, program, input } = await pauseAndApprove(reads, "silent-1", quickjs());
    const { adapter, runs } = observeAdapter(quickjs(), { ignoreSnapshots: true });
    const done = await modeOn(await openStore(), adapter).resume(program, input, context("silent-1"));
    expect(done).toMatchObject({ status: "succeeded", output: { sum: (reads * (reads - 1)) / 2, after: 2000 } });
    expect(runs).toEqual([{ snapshotGiven: true, restored: undefined, calls: reads + 3 }]);
    expect(counts).toEqual({ read: reads + 2, pay: 1 });
  }, 60_000);

  it("refuses a snapshot changed at rest with INTEGRITY_VIOLATION, and runs nothing", async () => {
    const reads = MIN_CALLS + 5;
    const { counts, program, input } = await pauseAndApprove(reads, "tampered-1", quickjs());
    const [kept] = snapshotRows();
    const data = kept?.state.data as string;
    // One character of the stored (gzipped) bytes, changed.
    const changed = { ...kept?.state, data: `${data.slice(0, 100)}${data[100] === "A" ? "B" : "A"}${data.slice(101)}` };
    const db = new Database(filename);
    db.prepare("UPDATE airlock_records SET state = ? WHERE id = ?").run(JSON.stringify(changed), kept?.id);
    db.close();
    const { adapter, runs } = observeAdapter(quickjs());
    const mode = modeOn(await openStore(), adapter);
    expect(await mode.resume(program, input, context("tampered-1"))).toMatchObject({
      status: "failed",
      error: { code: "INTEGRITY_VIOLATION" },
    });
    expect(runs).toEqual([]);
    expect(counts).toEqual({ read: reads + 1, pay: 0 });
    // The execution is over: it cannot be resumed again.
    expect(await mode.resume(program, input, context("tampered-1"))).toMatchObject({ error: { code: "CONFLICT" } });
  }, 60_000);

  it("keeps no snapshot of a VM past MAX_SNAPSHOT_BYTES: the resume replays", async () => {
    const reads = MIN_CALLS + 5;
    const { counts, program, input } = await pauseAndApprove(reads, "big-1", quickjs(), MAX_SNAPSHOT_BYTES + 65536);
    expect(snapshotRows()).toEqual([]);
    const { adapter, runs } = observeAdapter(quickjs());
    const done = await modeOn(await openStore(), adapter).resume(program, input, context("big-1"));
    expect(done).toMatchObject({ status: "succeeded", output: { held: MAX_SNAPSHOT_BYTES + 65536 } });
    expect(runs).toEqual([{ snapshotGiven: false, restored: undefined, calls: reads + 3 }]);
    expect(counts).toEqual({ read: reads + 2, pay: 1 });
  }, 60_000);

  it("pauses and restores on VM sides behind the protocol adapter (child processes)", async () => {
    const protocol = () => {
      const adapter = createQuickJsProtocolAdapter({
        id: "child",
        version: "1",
        qualification: "production",
        launch: () => launchVmSideChild(),
      });
      adapters.push(adapter);
      return adapter;
    };
    const reads = MIN_CALLS + 5;
    const { counts, program, input } = await pauseAndApprove(reads, "child-1", protocol());
    expect(snapshotRows()).toHaveLength(1);
    const { adapter, runs } = observeAdapter(protocol());
    const done = await modeOn(await openStore(), adapter).resume(program, input, context("child-1"));
    expect(done).toMatchObject({ status: "succeeded", output: { sum: (reads * (reads - 1)) / 2, after: 2000 } });
    expect(runs).toEqual([{ snapshotGiven: true, restored: true, calls: 3 }]);
    expect(counts).toEqual({ read: reads + 2, pay: 1 });
  }, 60_000);
});
