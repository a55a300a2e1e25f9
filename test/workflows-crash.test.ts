/**
 * Crashes of real processes (docs/durable-programs.md, Crashes): a worker is SIGKILLed while it waits for an approval,
 * and right after the effect, the receipt and the completion of a durable write phase; a new process on the same store
 * finishes what can be finished. The write appends to a log file, so "nothing ran twice" is counted across processes.
 * On PostgreSQL, two worker processes also race for the same runs.
 */
import { type ChildProcess, fork } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { createScheduledWorkflowRuntime } from "airlock-codemode/workflows";
import { describe, expect, it } from "vitest";
// @ts-expect-error: a plain-JavaScript fixture shared with the child process.
import { makePhase, openStore } from "./fixtures/workflows/phase.mjs";
import { dropSchema, freshSchema } from "./helpers/postgres.ts";
import { requirePostgres } from "./helpers/system-tools.ts";

const CHILD = fileURLToPath(new URL("./fixtures/workflows/crash-child.mjs", import.meta.url));
const RACER = fileURLToPath(new URL("./fixtures/workflows/race-worker.mjs", import.meta.url));
const url = await requirePostgres();

type Config = { store: "sqlite"; filename: string } | { store: "postgres"; url: string; schema: string };

/** Starts a child and resolves with the messages it sent once it sent one of `kind` (or fails if it exits first). */
function start(script: string, args: unknown) {
  const child = fork(script, [JSON.stringify(args)], { stdio: ["ignore", "ignore", "pipe", "ipc"] });
  let stderr = "";
  child.stderr?.on("data", (chunk) => {
    stderr += chunk;
  });
  const messages: Record<string, unknown>[] = [];
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const until = (kind: string) =>
    new Promise<Record<string, unknown>>((resolve, reject) => {
      const found = messages.find((message) => message.kind === kind);
      if (found) return resolve(found);
      const onMessage = (message: Record<string, unknown>) => {
        if (message.kind === kind) resolve(message);
        else if (message.kind === "finished-without-checkpoint") reject(new Error("the child passed its checkpoint"));
      };
      child.on("message", onMessage);
      child.once("exit", (code) => reject(new Error(`the child exited (${code}) before '${kind}': ${stderr}`)));
    });
  child.on("message", (message: Record<string, unknown>) => messages.push(message));
  return { child, until, exited };
}

async function kill(child: ChildProcess, exited: Promise<void>) {
  child.kill("SIGKILL");
  await exited;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const lines = async (file: string) => (await readFile(file, "utf8")).split("\n").filter((line) => line !== "");

async function backing(kind: "sqlite" | "postgres") {
  const directory = await mkdtemp(join(tmpdir(), "airlock-crash-"));
  const log = join(directory, "effects.log");
  await writeFile(log, "");
  const schema = freshSchema("airlock_crash");
  const config: Config =
    kind === "sqlite"
      ? { store: "sqlite", filename: join(directory, "state.sqlite") }
      : { store: "postgres", url: url as string, schema };
  return {
    config,
    log,
    cleanup: async () => {
      if (kind === "postgres") await dropSchema(url as string, schema);
      await rm(directory, { recursive: true, force: true });
    },
  };
}

const stores = [
  { name: "SQLite", kind: "sqlite" as const, skip: false },
  { name: "PostgreSQL", kind: "postgres" as const, skip: url === undefined },
];

describe.each(stores)("$name: crashed workers", ({ kind, skip }) => {
  it.skipIf(skip)(
    "keeps an approval across a killed process: a new process approves and the phase runs once",
    async () => {
      const { config, log, cleanup } = await backing(kind);
      const { child, until, exited } = start(CHILD, { ...config, log, scenario: "approval" });
      try {
        const waiting = await until("waiting");
        await kill(child, exited);
        const store = openStore(config);
        await store.initialize();
        const phase = makePhase(store, log);
        const runtime = createScheduledWorkflowRuntime(phase.runtimeOptions(store, "after-restart"));
        const runId = waiting.runId as string;
        const before = await runtime.inspect(runId);
        expect(before).toMatchObject({ status: "waiting", budget: { reservedMicros: 0 } });
        expect(before.steps.execute?.approval?.digest).toBe(waiting.digest);
        await runtime.approve({
          id: runId,
          nodeId: "execute",
          digest: waiting.digest as string,
          credential: "approved",
        });
        const done = await runtime.runUntilSettled(phase.definition, runId);
        expect(done).toMatchObject({
          status: "succeeded",
          output: { value: 1 },
          // Its one write cost 3 of the 6 the phase reserved.
          budget: { spentMicros: 3, reservedMicros: 0 },
        });
        expect(await lines(log)).toEqual([`${runId}/step:execute:sandbox:code:1`]);
        expect(await phase.audit.inspect(runId, "execute")).toMatchObject({ outcome: "succeeded" });
        await runtime.close();
        await phase.adapter.close();
        await store.close();
      } finally {
        if (child.exitCode === null && child.signalCode === null) await kill(child, exited);
        await cleanup();
      }
    },
  );

  it.skipIf(skip).each(["effect", "receipt", "completion"])(
    "never runs a write phase twice after its worker is killed at the %s boundary",
    async (scenario) => {
      const { config, log, cleanup } = await backing(kind);
      const { child, until, exited } = start(CHILD, { ...config, log, scenario });
      try {
        const { runId } = (await until("waiting")) as { runId: string };
        await until("checkpoint");
        await kill(child, exited);
        expect(await lines(log)).toHaveLength(1);
        // The killed worker's lease (1 s) must lapse before anyone may judge its step.
        await sleep(1_100);
        const store = openStore(config);
        await store.initialize();
        const phase = makePhase(store, log);
        const runtime = createScheduledWorkflowRuntime(phase.runtimeOptions(store, "recovery"));
        await runtime.recoverExpired(runId);
        const recovered = await runtime.runUntilSettled(phase.definition, runId);
        const evidence = await phase.audit.inspect(runId, "execute");
        if (scenario === "completion") {
          expect(recovered).toMatchObject({
            status: "succeeded",
            output: { value: 1 },
            steps: { execute: { receipt: { execution: "succeeded", disclosure: "released" } } },
          });
        } else {
          expect(recovered).toMatchObject({
            status: "outcome_unknown",
            output: null,
            steps: { execute: { status: "unknown" } },
          });
        }
        // Killed inside the write, the phase never said what it cost: its whole 6 stay held. Once its receipt is
        // committed, the run is charged the write's 3.
        expect(recovered.budget).toMatchObject(
          scenario === "effect" ? { spentMicros: 0, reservedMicros: 6 } : { spentMicros: 3, reservedMicros: 0 },
        );
        if (scenario === "receipt") {
          expect(recovered.steps.execute?.receipt).toMatchObject({ execution: "succeeded", disclosure: "withheld" });
        }
        if (scenario === "effect") expect(evidence).toBeUndefined();
        else
          expect(evidence).toMatchObject({
            outcome: "succeeded",
            evidence: [{ receipt: { toolId: "external.crash-write" } }],
          });
        await runtime.runUntilSettled(phase.definition, runId);
        expect(await lines(log)).toHaveLength(1);
        await runtime.close();
        await phase.adapter.close();
        await store.close();
      } finally {
        if (child.exitCode === null && child.signalCode === null) await kill(child, exited);
        await cleanup();
      }
    },
    30_000,
  );
});

describe.skipIf(url === undefined)("PostgreSQL: worker processes racing", () => {
  it("runs each step of each run once when two worker processes drive the same runs", async () => {
    const directory = await mkdtemp(join(tmpdir(), "airlock-race-"));
    const log = join(directory, "effects.log");
    await writeFile(log, "");
    const schema = freshSchema("airlock_race");
    const config = { url, schema, log, runs: 12 };
    const racers = [start(RACER, { ...config, workerId: "racer-a" }), start(RACER, { ...config, workerId: "racer-b" })];
    try {
      await Promise.all(racers.map((racer) => racer.until("ready")));
      for (const racer of racers) racer.child.send({ kind: "go" });
      const reports = await Promise.all(racers.map((racer) => racer.until("done")));
      const effects = await lines(log);
      // 12 runs of 3 steps: every step exactly once, whichever worker ran it.
      expect(effects).toHaveLength(36);
      expect(new Set(effects).size).toBe(36);
      for (const report of reports) expect(report.statuses).toEqual(Array(12).fill("succeeded"));
      // Both workers did some of the work (the race was real).
      const byWorker = new Map<string, number>();
      for (const line of effects) {
        const worker = line.split(" ")[1] as string;
        byWorker.set(worker, (byWorker.get(worker) ?? 0) + 1);
      }
      expect([...byWorker.keys()].sort()).toEqual(["racer-a", "racer-b"]);
    } finally {
      for (const racer of racers) if (racer.child.exitCode === null) await kill(racer.child, racer.exited);
      await dropSchema(url as string, schema);
      await rm(directory, { recursive: true, force: true });
    }
  }, 60_000);
});
