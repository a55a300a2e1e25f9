/**
 * Single-call approvals across killed processes, on SQLite and on PostgreSQL: a process pauses at the call and is
 * SIGKILLed, a new one approves and continues without repeating the earlier call; a process killed inside the
 * approved write leaves it unknown, and the next process never sends it again.
 */
import { type ChildProcess, fork } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
// @ts-expect-error: a plain-JavaScript fixture shared with the child process.
import { approveAndResume, context, makeRefund } from "./fixtures/workflows/approval-child.mjs";
import { dropSchema, freshSchema, query } from "./helpers/postgres.ts";
import { requirePostgres } from "./helpers/system-tools.ts";

const CHILD = fileURLToPath(new URL("./fixtures/workflows/approval-child.mjs", import.meta.url));
/** Preloaded into a child whose clock must be off the database's. */
const SKEW = new URL("./fixtures/workflows/clock-skew.mjs", import.meta.url).href;
const url = await requirePostgres();

type CodeModeLike = { resume(program: unknown, input: unknown, ctx: unknown): Promise<unknown> };
type Config = { store: "sqlite"; filename: string } | { store: "postgres"; url: string; schema: string };

const stores = [
  { name: "SQLite", kind: "sqlite" as const, skip: false },
  { name: "PostgreSQL", kind: "postgres" as const, skip: url === undefined },
];

describe.each(stores)("$name: single-call approvals across killed processes", ({ kind, skip }) => {
  let directory: string;
  let log: string;
  let config: Config;
  let child: ChildProcess | undefined;

  // Each scenario has its own file or its own schema, so no run sees another's rows.
  beforeEach(async () => {
    directory = await mkdtemp(join(tmpdir(), "airlock-approval-crash-"));
    log = join(directory, "effects.log");
    await writeFile(log, "");
    config =
      kind === "sqlite"
        ? { store: "sqlite", filename: join(directory, "journal.sqlite") }
        : { store: "postgres", url: url as string, schema: freshSchema("airlock_approval_crash") };
  });
  afterEach(async () => {
    if (child && child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
    child = undefined;
    if (config.store === "postgres") await dropSchema(config.url, config.schema);
    await rm(directory, { recursive: true, force: true });
  });

  function run(scenario: "pause" | "dispatch" | "lookup", skewMs?: number) {
    const skewed =
      skewMs === undefined
        ? {}
        : {
            execArgv: [...process.execArgv, "--import", SKEW],
            env: { ...process.env, AIRLOCK_TEST_CLOCK_SKEW_MS: String(skewMs) },
          };
    child = fork(CHILD, [JSON.stringify({ ...config, log, scenario })], {
      stdio: ["ignore", "ignore", "pipe", "ipc"],
      ...skewed,
    });
    const started = child;
    let stderr = "";
    started.stderr?.on("data", (chunk) => {
      stderr += chunk;
    });
    const exited = new Promise<void>((resolve) => started.once("exit", () => resolve()));
    const messages: Record<string, unknown>[] = [];
    started.on("message", (message: Record<string, unknown>) => messages.push(message));
    const until = (kind: string) =>
      new Promise<Record<string, unknown>>((resolve, reject) => {
        const seen = messages.find((message) => message.kind === kind);
        if (seen) return resolve(seen);
        started.on("message", (message: Record<string, unknown>) => {
          if (message.kind === kind) resolve(message);
        });
        started.once("exit", () => reject(new Error(`the child exited before '${kind}': ${stderr}`)));
      });
    const kill = async () => {
      started.kill("SIGKILL");
      await exited;
    };
    return { until, kill };
  }

  const effects = async () => (await readFile(log, "utf8")).split("\n").filter((line) => line !== "");

  /**
   * Resumes after a killed attempt: refused while that attempt holds the journal (its wall time and grace), then
   * taken over once the hold has passed.
   */
  async function resumeAfterHold(mode: CodeModeLike, program: unknown) {
    expect(await mode.resume(program, { order: "o-1" }, context)).toMatchObject({
      status: "failed",
      error: { code: "CONFLICT" },
    });
    await new Promise((resolve) => setTimeout(resolve, 8_200));
    return await mode.resume(program, { order: "o-1" }, context);
  }

  /** On PostgreSQL, the journals in this scenario's own schema (the killed child wrote there, and nobody else did). */
  const journals = async () =>
    config.store === "postgres"
      ? await query(config.url, `SELECT kind, status FROM "${config.schema}".airlock_records ORDER BY id`)
      : undefined;

  it.skipIf(skip)(
    "continues in a new process after the waiting one was killed, without repeating the earlier call",
    async () => {
      const worker = run("pause");
      const { outcome } = (await worker.until("waiting")) as {
        outcome: { status: string; approval: { digest: string } };
      };
      expect(outcome.status).toBe("waiting");
      await worker.kill();
      expect(await effects()).toEqual(["lookup"]);
      if (kind === "postgres") expect(await journals()).toEqual([{ kind: "code-journal", status: "waiting" }]);
      const { store, adapter, mode, program } = makeRefund(config, log);
      await store.initialize();
      try {
        expect(await approveAndResume(mode, program, outcome.approval.digest)).toMatchObject({
          status: "succeeded",
          output: { status: "succeeded", code: null },
        });
        expect(await effects()).toEqual(["lookup", "refund"]);
        if (kind === "postgres") expect(await journals()).toEqual([{ kind: "code-journal", status: "succeeded" }]);
      } finally {
        await adapter.close();
        await store.close();
      }
    },
    30_000,
  );

  it.skipIf(skip)(
    "leaves a write whose process was killed after its effect unknown, and never sends it again",
    async () => {
      const worker = run("dispatch");
      await worker.until("dispatched");
      await worker.kill();
      expect(await effects()).toEqual(["lookup", "refund"]);
      if (kind === "postgres") expect(await journals()).toEqual([{ kind: "code-journal", status: "running" }]);
      const { store, adapter, mode, program } = makeRefund(config, log);
      await store.initialize();
      try {
        expect(await resumeAfterHold(mode, program)).toMatchObject({
          status: "outcome_unknown",
          error: { code: "OUTCOME_UNKNOWN" },
        });
        expect(await effects()).toEqual(["lookup", "refund"]);
        if (kind === "postgres") {
          expect(await journals()).toEqual([{ kind: "code-journal", status: "outcome_unknown" }]);
        }
      } finally {
        await adapter.close();
        await store.close();
      }
    },
    30_000,
  );

  // On SQLite every process's clock is the store's. On PostgreSQL the database's clock holds the lease of a first
  // attempt, whatever the clock of the worker that made the journal said.
  const firstAttempt =
    kind === "sqlite"
      ? { clock: "its own", skewMs: undefined }
      : { clock: "two hours ahead of the database's", skewMs: 2 * 60 * 60 * 1000 };
  it.skipIf(skip)(
    `takes over a first attempt killed inside a call once its hold has passed (worker clock: ${firstAttempt.clock})`,
    async () => {
      const worker = run("lookup", firstAttempt.skewMs);
      await worker.until("dispatched");
      await worker.kill();
      expect(await effects()).toEqual(["lookup"]);
      const { store, adapter, mode, program } = makeRefund(config, log);
      await store.initialize();
      try {
        // A read whose outcome was never recorded is asked again; the write still waits for a person.
        expect(await resumeAfterHold(mode, program)).toMatchObject({
          status: "waiting",
          approval: { tool: "refund" },
        });
        expect(await effects()).toEqual(["lookup", "lookup"]);
      } finally {
        await adapter.close();
        await store.close();
      }
    },
    30_000,
  );
});
