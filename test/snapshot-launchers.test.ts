/**
 * A paused program run captured on one VM side and continued on another, through the one protocol and serve loop:
 * the capture (`snapshot` command) and the restore (`RunRequest.restore`) work wherever a VM side runs (a worker
 * thread, the calling thread, a process-tier child, a VM side of the user's behind the protocol adapter), with no
 * launcher of its own. A restored run continues exactly as the same run from its start given the same results (its
 * heap, pending promises, random generator and clock included), makes none of its earlier calls again, and numbers
 * its new calls on; a VM side of another build does not restore it, and runs the program from its start instead.
 */
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ProcessCodemodeSandbox } from "airlock-codemode";
import { afterAll, describe, expect, it } from "vitest";
import { INLINE_MAX_STACK_SIZE } from "../dist/engine/limits.js";
import { loadQuickJSWasm } from "../dist/engine/wasm/load.js";
import type { Launcher } from "../dist/host/launcher.js";
import { GuestMemoryBudget } from "../dist/host/memory-budget.js";
import { type ProgramRunOptions, type ProgramSnapshot, runProgram } from "../dist/host/run-program.js";
import { InlineLauncher } from "../dist/inline/launcher.js";
import { ProtocolLauncher } from "../dist/transport/launcher.js";
import { WorkerPool } from "../dist/worker/launcher.js";
import { hasSystemTool } from "./helpers/system-tools.ts";
import { launchVmSideChild } from "./helpers/vm-side.ts";

const budget = () => new GuestMemoryBudget(1024 * 1024 * 1024);
const closing: (() => Promise<void> | void)[] = [];
afterAll(async () => {
  for (const close of closing) await close();
});

const workerPool = (): Launcher => {
  const pool = new WorkerPool({ module: loadQuickJSWasm(), size: 1, maxVmsPerWorker: 4, budget: budget() });
  closing.push(() => pool.close());
  return pool;
};
const inline = (wasmPath?: string): Launcher => {
  const launcher = new InlineLauncher({
    module: loadQuickJSWasm(wasmPath),
    maxStackSize: INLINE_MAX_STACK_SIZE,
    maxVms: 2,
    budget: budget(),
  });
  closing.push(() => launcher.close());
  return launcher;
};
const protocolChild = (): Launcher => {
  const launcher = new ProtocolLauncher(() => launchVmSideChild(), budget());
  closing.push(() => launcher.close());
  return launcher;
};
const processChild = (): Launcher => {
  const sandbox = new ProcessCodemodeSandbox({ poolSize: 1 });
  closing.push(() => sandbox.close());
  return (sandbox as unknown as { launcher: Launcher }).launcher;
};

/** A program run's options: a deterministic run answers its calls through `sequencedCall`, never `call`. */
const runOptions = (
  source: string,
  inputJson: string,
  deterministic: NonNullable<ProgramRunOptions["deterministic"]>,
  { memoryLimitBytes = 16 * 1024 * 1024, signal }: { memoryLimitBytes?: number; signal?: AbortSignal } = {},
): ProgramRunOptions => ({
  source,
  inputJson,
  memoryLimitBytes,
  cpuLimitMs: 5_000,
  wallTimeMs: 20_000,
  ...(signal === undefined ? {} : { signal }),
  call: () => Promise.reject(new Error("a deterministic run answers through sequencedCall")),
  deterministic,
});

/** Reads, then a write it waits on beside another read, then one more read; everything it saw goes in its result. */
const SOURCE = `async (input, tools) => {
  const kept = [];
  const r0 = Math.random();
  for (let i = 0; i < input.reads; i++) kept.push((await tools.call("read", { i })).v);
  const [paid, late] = await Promise.all([tools.call("pay", { sum: kept.length }), tools.call("read", { i: -1, t: Date.now() })]);
  const last = await tools.call("read", { i: -2, r: Math.random() });
  return { kept: kept.length, paid, late, last, r0, r1: Math.random(), t: Date.now() };
}`;
const STARTED_AT = 1_800_000_000_000;
const SEED = 7;

interface Answer {
  value: unknown;
  seq: number;
  now: number;
}

/**
 * The results of a run's calls by number, as a journal keeps them: a call already in it gets its result back, a new
 * one the next result number. `pause` holds a call (by tool) unanswered, as a call waiting for a person is.
 */
function journalOf(answers = new Map<number, Answer>()) {
  let nextSeq = Math.max(0, ...[...answers.values()].map((a) => a.seq)) + 1;
  return {
    answers,
    /** Answers call `n` from the journal, or as a new result. */
    answer(n: number, name: string, args: { i?: number; sum?: number }): Answer {
      const known = answers.get(n);
      if (known !== undefined) return known;
      const seq = nextSeq++;
      const answer = { value: name === "pay" ? { paid: args.sum } : { v: args.i }, seq, now: STARTED_AT + seq * 1_000 };
      answers.set(n, answer);
      return answer;
    },
  };
}

/** Runs the program to its pay call, captures it there and stops it: the snapshot, and the results it was given. */
async function pauseAt(launcher: Launcher, reads: number) {
  const journal = journalOf();
  const capture = new AbortController();
  const stop = new AbortController();
  let snapshot: ProgramSnapshot | null | undefined;
  const captured = new Promise<void>((resolve) => {
    let calls = 0;
    void runProgram(
      launcher,
      runOptions(
        SOURCE,
        JSON.stringify({ reads }),
        {
          startedAt: STARTED_AT,
          seed: SEED,
          sequencedCall: async (name, args) => {
            const n = ++calls;
            if (name === "pay") {
              capture.abort();
              return new Promise(() => {});
            }
            return journal.answer(n, name, args as { i: number });
          },
          capture: {
            signal: capture.signal,
            done: (taken) => {
              snapshot = taken;
              resolve();
            },
          },
        },
        { signal: stop.signal },
      ),
    );
  });
  await captured;
  stop.abort();
  return { snapshot, journal: journal.answers };
}

/** Continues from the snapshot (or, without one, runs from the start) with the journal's results; new calls are new. */
async function continueOn(launcher: Launcher, reads: number, answers: Map<number, Answer>, snapshot?: ProgramSnapshot) {
  const journal = journalOf(new Map(answers));
  let restored: boolean | undefined;
  const made: number[] = [];
  let k = 0;
  const numberOf = () => {
    k++;
    if (!restored || snapshot === undefined) return k;
    return k <= snapshot.open.length ? (snapshot.open[k - 1] as number) : snapshot.calls + (k - snapshot.open.length);
  };
  const result = await runProgram(
    launcher,
    runOptions(SOURCE, JSON.stringify({ reads }), {
      startedAt: STARTED_AT,
      seed: SEED,
      sequencedCall: async (name, args) => {
        const n = numberOf();
        made.push(n);
        // A new result comes later, as a tool's does: the journaled one numbered before it is applied first.
        if (!journal.answers.has(n)) await new Promise((resolve) => setTimeout(resolve, 20));
        return journal.answer(n, name, args as { i: number });
      },
      ...(snapshot === undefined
        ? {}
        : {
            restore: {
              snapshot,
              onRestored: (yes: boolean) => {
                restored = yes;
              },
            },
          }),
    }),
  );
  return { result, restored, made };
}

const READS = 30;
const targets: [string, () => Launcher, boolean][] = [
  ["a worker thread", workerPool, true],
  ["the calling thread", () => inline(), true],
  ["a VM side of the user's behind the protocol adapter (a child process)", protocolChild, true],
  ["a process-tier child under bubblewrap", processChild, hasSystemTool("bwrap")],
];

describe("a program run captured on one VM side and restored on another", () => {
  for (const [name, target, available] of targets) {
    it.runIf(available)(
      `continues on ${name} exactly as the same run from its start does`,
      async () => {
        const paused = await pauseAt(workerPool(), READS);
        const snapshot = paused.snapshot as ProgramSnapshot;
        expect(snapshot).not.toBeNull();
        // The pay call and the read beside it are open; every read before them was answered inside the run.
        expect(snapshot.calls).toBe(READS + 2);
        expect(snapshot.open).toEqual([READS + 1, READS + 2]);

        const fromSnapshot = await continueOn(target(), READS, paused.journal, snapshot);
        const fromStart = await continueOn(target(), READS, paused.journal);
        expect(fromSnapshot.restored).toBe(true);
        expect(fromSnapshot.result).toMatchObject({ status: "succeeded" });
        expect(fromSnapshot.result).toEqual(fromStart.result);
        // Restored, the run makes its open calls again and then the new one; from the start, every call again.
        expect(fromSnapshot.made).toEqual([READS + 1, READS + 2, READS + 3]);
        expect(fromStart.made).toHaveLength(READS + 3);
        if (fromSnapshot.result.status === "succeeded") {
          expect(fromSnapshot.result.output).toMatchObject({ kept: READS, paid: { paid: READS }, late: { v: -1 } });
        }
      },
      60_000,
    );
  }

  it("captures on a process-tier child and on the protocol adapter's child too, and restores in a worker", async () => {
    const sources: [string, () => Launcher, boolean][] = [
      ["a process-tier child", processChild, hasSystemTool("bwrap")],
      ["the protocol adapter's child", protocolChild, true],
    ];
    for (const [name, source, available] of sources) {
      if (!available) continue;
      const paused = await pauseAt(source(), READS);
      expect(paused.snapshot, name).not.toBeNull();
      const fromSnapshot = await continueOn(workerPool(), READS, paused.journal, paused.snapshot as ProgramSnapshot);
      const fromStart = await continueOn(workerPool(), READS, paused.journal);
      expect(fromSnapshot.restored, name).toBe(true);
      expect(fromSnapshot.result, name).toEqual(fromStart.result);
    }
  }, 60_000);

  it("is not restored by a VM side of another build, which runs the program from its start instead", async () => {
    // Another build of the wasm: the same QuickJS with a custom section of its own, so other bytes.
    const directory = mkdtempSync(join(tmpdir(), "airlock-other-build-"));
    try {
      const original = createRequire(import.meta.url).resolve("quickjs-wasi/quickjs.wasm");
      const other = join(directory, "quickjs.wasm");
      copyFileSync(original, other);
      const section = Buffer.from([0, 6, 5, ...Buffer.from("other")]);
      writeFileSync(other, Buffer.concat([readFileSync(other), section]));
      const paused = await pauseAt(workerPool(), READS);
      const elsewhere = await continueOn(inline(other), READS, paused.journal, paused.snapshot as ProgramSnapshot);
      const fromStart = await continueOn(inline(), READS, paused.journal);
      expect(elsewhere.restored).toBe(false);
      expect(elsewhere.made).toHaveLength(READS + 3);
      expect(elsewhere.result).toEqual(fromStart.result);
    } finally {
      rmSync(directory, { recursive: true, force: true });
    }
  }, 60_000);

  it("takes no snapshot of a VM whose memory holds more than MAX_SNAPSHOT_BYTES, and the run goes on", async () => {
    const { MAX_SNAPSHOT_BYTES } = await import("../dist/engine/limits.js");
    const launcher = workerPool();
    const capture = new AbortController();
    let taken: ProgramSnapshot | null | undefined;
    const journal = journalOf();
    let calls = 0;
    // Pages that are not zero, past the limit, kept alive across the call.
    const source = `async (input, tools) => {
      const big = new Uint8Array(${MAX_SNAPSHOT_BYTES} + 65536).fill(1);
      const r = await tools.call("read", { i: 1 });
      return big.length + r.v;
    }`;
    const result = await runProgram(
      launcher,
      runOptions(
        source,
        "null",
        {
          startedAt: STARTED_AT,
          seed: SEED,
          sequencedCall: async (name, args) => {
            capture.abort();
            await new Promise((resolve) => setTimeout(resolve, 200));
            return journal.answer(++calls, name, args as { i: number });
          },
          capture: {
            signal: capture.signal,
            done: (snapshot) => {
              taken = snapshot;
            },
          },
        },
        { memoryLimitBytes: 32 * 1024 * 1024 },
      ),
    );
    expect(taken).toBeNull();
    expect(result).toEqual({ status: "succeeded", output: MAX_SNAPSHOT_BYTES + 65536 + 1, cpuMs: 0 });
  }, 60_000);
});
