/**
 * Resuming from a snapshot across a killed process, on SQLite and on PostgreSQL, with the code mode's default
 * `snapshotMinCalls`: a process runs a program to the call that waits for a person and is SIGKILLed; a new process
 * (here, the test's) approves and resumes. Paused after SNAPSHOT_MIN_CALLS calls or more, the program is restored from
 * the snapshot its first process kept; paused after fewer, it is replayed from the journal. Either way no earlier call
 * runs again, and the result is the same.
 */
import { type ChildProcess, fork } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { createQuickJsSandboxAdapter } from "airlock-codemode/adapter-code-quickjs";
import { SNAPSHOT_MIN_CALLS } from "airlock-codemode/code-mode";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
// @ts-expect-error: a plain-JavaScript fixture shared with the child process.
import { openStore } from "./fixtures/workflows/phase.mjs";
// @ts-expect-error: a plain-JavaScript fixture shared with the child process.
import { context, makeLookups, scope } from "./fixtures/workflows/snapshot-child.mjs";
import { observeAdapter } from "./helpers/observed-adapter.ts";
import { dropSchema, freshSchema, query } from "./helpers/postgres.ts";
import { requirePostgres } from "./helpers/system-tools.ts";

const CHILD = fileURLToPath(new URL("./fixtures/workflows/snapshot-child.mjs", import.meta.url));
const url = await requirePostgres();
type Config = { store: "sqlite"; filename: string } | { store: "postgres"; url: string; schema: string };

const stores = [
  { name: "SQLite", kind: "sqlite" as const, skip: false },
  { name: "PostgreSQL", kind: "postgres" as const, skip: url === undefined },
];

describe.each(stores)("$name: resuming a killed process's paused program", ({ kind, skip }) => {
  let directory: string;
  let log: string;
  let config: Config;
  let child: ChildProcess | undefined;

  beforeEach(async () => {
    directory = await mkdtemp(join(tmpdir(), "airlock-snapshot-crash-"));
    log = join(directory, "effects.log");
    await writeFile(log, "");
    config =
      kind === "sqlite"
        ? { store: "sqlite", filename: join(directory, "journal.sqlite") }
        : { store: "postgres", url: url as string, schema: freshSchema("airlock_snapshot_crash") };
  });
  afterEach(async () => {
    if (child && child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
    child = undefined;
    if (config.store === "postgres") await dropSchema(config.url, config.schema);
    await rm(directory, { recursive: true, force: true });
  });

  /** Runs the program in a child to its pause, and kills the child there. */
  async function pauseInChild(reads: number, executionId: string) {
    const started = fork(CHILD, [JSON.stringify({ ...config, log, reads, executionId })], {
      stdio: ["ignore", "ignore", "pipe", "ipc"],
    });
    child = started;
    let stderr = "";
    started.stderr?.on("data", (chunk) => {
      stderr += chunk;
    });
    const exited = new Promise<void>((resolve) => started.once("exit", () => resolve()));
    const message = await new Promise<{ outcome: { status: string; approval: { digest: string } } }>(
      (resolve, reject) => {
        started.on("message", resolve);
        started.once("exit", () => reject(new Error(`the child exited before it paused: ${stderr}`)));
      },
    );
    started.kill("SIGKILL");
    await exited;
    return message.outcome;
  }

  const effects = async () => (await readFile(log, "utf8")).split("\n").filter((line) => line !== "");
  /** The snapshots the store keeps, and whether their data is still there. */
  const snapshots = async (store: { list(query: object): Promise<{ state: { data?: unknown } }[]> }) =>
    (await store.list({ kind: "code-snapshot", limit: 10 })).map((record) => record.state.data !== null);

  for (const [when, reads, restored] of [
    ["SNAPSHOT_MIN_CALLS calls", SNAPSHOT_MIN_CALLS, true],
    ["one call fewer", SNAPSHOT_MIN_CALLS - 1, false],
  ] as const) {
    it.skipIf(skip)(
      `approves and resumes a program paused after ${when} (${reads}): ${restored ? "restored" : "replayed"}`,
      async () => {
        const executionId = `lines-${reads}`;
        const outcome = await pauseInChild(reads, executionId);
        expect(outcome.status).toBe("waiting");
        const lookups = Array.from({ length: reads }, (_, line) => `lookup ${line}`);
        expect(await effects()).toEqual(lookups);
        if (kind === "postgres") {
          const kinds = await query(
            url as string,
            `SELECT kind FROM "${(config as { schema: string }).schema}".airlock_records ORDER BY kind`,
          );
          expect(kinds.map((row) => row.kind)).toEqual(restored ? ["code-journal", "code-snapshot"] : ["code-journal"]);
        }
        const store = openStore(config);
        await store.initialize();
        const quickjs = createQuickJsSandboxAdapter({ poolSize: 1 });
        const { adapter, runs } = observeAdapter(quickjs);
        try {
          expect(await snapshots(store)).toEqual(restored ? [true] : []);
          const { mode, program, input } = makeLookups(store, log, reads, adapter);
          await mode.approve({ scope, executionId, digest: outcome.approval.digest, credential: "clerk" });
          const cents = lookups.reduce((sum, _, line) => sum + (line % 7), 0);
          expect(await mode.resume(program, input, context(executionId))).toMatchObject({
            status: "succeeded",
            output: { cents, status: "succeeded" },
          });
          expect(runs).toEqual([
            restored
              ? { snapshotGiven: true, restored: true, calls: 1 }
              : { snapshotGiven: false, restored: undefined, calls: reads + 1 },
          ]);
          expect(await effects()).toEqual([...lookups, `refund ${cents}`]);
          expect(await snapshots(store)).toEqual(restored ? [false] : []);
        } finally {
          await quickjs.close();
          await store.close();
        }
      },
      120_000,
    );
  }
});
