/**
 * The options of the durable runtime and its stores: what each refuses (the runtime's INVALID_CONFIG and the stores'
 * INVALID_INPUT, as Mayura's, naming the option), what each defaults to, as docs/durable-programs.md (The runtime) documents it, the connection
 * strings the PostgreSQL store takes (every form pg reads, tried against a server), and the store-call bounds
 * (`storageTimeoutMs`, `maxPendingStorageOperations`) against a store that does not answer.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { defineTool, type Tool, z } from "airlock-codemode";
import {
  createScheduledWorkflowRuntime,
  DEFAULT_APPROVAL_TTL_MS,
  DEFAULT_LEASE_MS,
  DEFAULT_MAX_CONCURRENT_JOBS,
  DEFAULT_MAX_CONCURRENT_RUNS,
  DEFAULT_MAX_OUTPUT_BYTES,
  DEFAULT_MAX_PENDING_STORAGE_OPERATIONS,
  DEFAULT_STORAGE_TIMEOUT_MS,
  defineWorkflow,
  type ScheduledWorkflowRuntimeOptions,
  type WorkflowStore,
} from "airlock-codemode/workflows";
import {
  createPostgresStore,
  DEFAULT_POSTGRES_SCHEMA,
  MAX_CONNECTION_STRING_CHARS,
} from "airlock-codemode/workflows/postgres";
import { createSqliteStore } from "airlock-codemode/workflows/sqlite";
import Database from "better-sqlite3";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { WorkflowCommands } from "../dist/workflows/store.js";
import { dropSchema, freshSchema, query } from "./helpers/postgres.ts";
import { requirePostgres } from "./helpers/system-tools.ts";
import { submitAndSettle } from "./helpers/workflow-runs.ts";

const url = await requirePostgres();
const scope = { principalId: "dev", projectId: "project" };

/** Where the test server listens on a Unix socket, and the test URL's user and database; undefined when it does not. */
async function socketOf(server: string) {
  const rows = await query(
    server,
    "SELECT current_setting('unix_socket_directories') AS dirs, current_setting('port') AS port",
  );
  const directory = String(rows[0]?.dirs ?? "")
    .split(",")
    .map((item) => item.trim())
    .find((item) => item.startsWith("/"));
  if (directory === undefined) return undefined;
  const parsed = new URL(server);
  return {
    directory,
    port: String(rows[0]?.port),
    user: decodeURIComponent(parsed.username),
    password: decodeURIComponent(parsed.password),
    database: decodeURIComponent(parsed.pathname.slice(1)) || "postgres",
  };
}
const socket = url === undefined ? undefined : await socketOf(url);
const value = z.object({ value: z.number() });

function deferred<T = void>() {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((done) => {
    resolve = done;
  });
  return { promise, resolve };
}

function tool(execute: (input: { value: number }) => unknown = (input) => input): Tool {
  return defineTool({
    id: "fixture.write",
    version: "1",
    description: "A controlled write.",
    input: value,
    output: z.unknown(),
    effects: "write",
    capabilities: [],
    costMicros: 1,
    execute,
  }) as Tool;
}

function single(step: Tool, approval = false) {
  return defineWorkflow({
    id: "options.single",
    version: "1",
    input: value,
    output: z.unknown(),
    nodes: [{ kind: "tool", id: "write", tool: step, input: { kind: "input", path: [] }, approval }],
    result: { kind: "step", stepId: "write", path: [] },
  });
}

let store: WorkflowStore;
beforeEach(async () => {
  store = createSqliteStore({ filename: ":memory:" });
  await store.initialize();
});
afterEach(async () => {
  vi.useRealTimers();
  await store.close();
});

const base = (): ScheduledWorkflowRuntimeOptions => ({
  store,
  workerId: "worker",
  scope,
  permissions: { allow: ["tool:fixture.write", "effect:write"] },
  policyVersion: "1",
  maxCostMicros: 10,
});

/** A store whose named workflow commands never answer until `release` is called. */
function hanging(names: (keyof WorkflowCommands)[]) {
  const gate = deferred();
  const workflows = { ...store.workflows };
  for (const name of names) {
    const real = store.workflows[name] as (command: never) => Promise<unknown>;
    (workflows as Record<string, unknown>)[name] = async (command: never) => {
      await gate.promise;
      return real(command);
    };
  }
  return { store: { ...store, workflows }, release: () => gate.resolve() };
}

describe("createScheduledWorkflowRuntime options", () => {
  it("refuses every bad or unknown option with INVALID_CONFIG naming it", () => {
    const refused = (change: Record<string, unknown>, name: string) =>
      expect(() => createScheduledWorkflowRuntime({ ...base(), ...change } as never)).toThrowError(
        expect.objectContaining({ code: "INVALID_CONFIG", message: expect.stringContaining(name) }),
      );
    refused({ leaseMS: 3_000 }, "leaseMS");
    refused({ resources: {} }, "resources");
    refused({ leaseMs: 999 }, "leaseMs");
    refused({ leaseMs: 300_001 }, "leaseMs");
    refused({ leaseMs: 1_500.5 }, "leaseMs");
    refused({ leaseMs: "3000" }, "leaseMs");
    refused({ maxConcurrentJobs: 0 }, "maxConcurrentJobs");
    refused({ maxConcurrentJobs: 33 }, "maxConcurrentJobs");
    refused({ maxConcurrentRuns: 0 }, "maxConcurrentRuns");
    refused({ maxConcurrentRuns: 129 }, "maxConcurrentRuns");
    refused({ storageTimeoutMs: 0 }, "storageTimeoutMs");
    refused({ storageTimeoutMs: 30_001 }, "storageTimeoutMs");
    refused({ maxPendingStorageOperations: 1_025 }, "maxPendingStorageOperations");
    // The worker's own calls must fit: 16 runs + 2 x 4 jobs by default.
    refused({ maxPendingStorageOperations: 23 }, "maxPendingStorageOperations");
    refused({ maxConcurrentRuns: 128, maxConcurrentJobs: 32, maxPendingStorageOperations: 191 }, "maxPending");
    refused({ reconciliationTimeoutMs: 0 }, "reconciliationTimeoutMs");
    refused({ reconciliationTimeoutMs: 30_001 }, "reconciliationTimeoutMs");
    refused({ approvalTtlMs: 0 }, "approvalTtlMs");
    refused({ approvalTtlMs: 30 * 24 * 3_600_000 + 1 }, "approvalTtlMs");
    refused({ maxOutputBytes: 0 }, "maxOutputBytes");
    refused({ maxOutputBytes: 64 * 1024 + 1 }, "maxOutputBytes");
    refused({ maxCostMicros: undefined }, "maxCostMicros");
    refused({ maxCostMicros: -1 }, "maxCostMicros");
    refused({ maxCostMicros: 0.5 }, "maxCostMicros");
    refused({ workerId: "" }, "workerId");
    refused({ workerId: "-leading-dash" }, "workerId");
    refused({ workerId: "x".repeat(129) }, "workerId");
    refused({ scope: { principalId: "dev" } }, "scope");
    refused({ scope: { principalId: "dev", projectId: "" } }, "scope");
    refused({ permissions: { allow: "tool:fixture.write" } }, "permissions.allow");
    refused({ permissions: { allow: [1] } }, "permissions.allow");
    refused({ policyVersion: "" }, "policyVersion");
    refused({ verifyHuman: "yes" }, "verifyHuman");
    refused({ verifyExecution: {} }, "verifyExecution");
    expect(() => createScheduledWorkflowRuntime(null as never)).toThrowError(
      expect.objectContaining({ code: "INVALID_CONFIG" }),
    );
    expect(() => createScheduledWorkflowRuntime({ ...base(), store: { events: () => [] } } as never)).toThrowError(
      expect.objectContaining({ code: "UNSUPPORTED_PROFILE" }),
    );
    // The edges themselves are accepted.
    for (const change of [
      { leaseMs: 1_000 },
      { leaseMs: 300_000 },
      { maxConcurrentJobs: 32, maxConcurrentRuns: 128, maxPendingStorageOperations: 192 },
      { maxConcurrentRuns: 128, maxConcurrentJobs: 32 },
      { storageTimeoutMs: 1 },
      { storageTimeoutMs: 30_000 },
      { maxPendingStorageOperations: 24 },
      { maxPendingStorageOperations: 1_024 },
      { reconciliationTimeoutMs: 1 },
      { reconciliationTimeoutMs: 30_000 },
      { maxOutputBytes: 64 * 1024 },
      { maxCostMicros: 0 },
    ]) {
      expect(() => createScheduledWorkflowRuntime({ ...base(), ...change })).not.toThrow();
    }
  });

  it("says its profile, and gives a run's reference: its id and the digests of its definition and policy", async () => {
    const runtime = createScheduledWorkflowRuntime(base());
    expect(runtime.profile).toBe("scheduled-v1");
    const definition = single(tool());
    const run = await runtime.submit(definition, { input: { value: 1 }, idempotencyKey: "ref" });
    const reference = await runtime.reference(run.id);
    expect(reference).toEqual({
      kind: "scheduled-workflow",
      runId: run.id,
      definitionHash: definition.digest,
      policyHash: expect.stringMatching(/^[a-f0-9]{64}$/),
    });
    expect(Object.isFrozen(reference)).toBe(true);
    // The policy is part of it: another policy version is another reference, and cannot read this run.
    const other = createScheduledWorkflowRuntime({ ...base(), policyVersion: "2" });
    await expect(other.reference(run.id)).rejects.toMatchObject({ code: "CONFLICT" });
    await expect(runtime.reference("nope")).rejects.toMatchObject({ code: "INVALID_INPUT" });
    await runtime.close();
    await expect(runtime.reference(run.id)).rejects.toMatchObject({ code: "CANCELLED" });
  });

  it("defaults: a 3 s lease, a 1 h approval, 64 KiB of input, 4 steps and 16 runs at once", async () => {
    expect({
      DEFAULT_LEASE_MS,
      DEFAULT_APPROVAL_TTL_MS,
      DEFAULT_MAX_OUTPUT_BYTES,
      DEFAULT_MAX_CONCURRENT_JOBS,
      DEFAULT_MAX_CONCURRENT_RUNS,
      DEFAULT_STORAGE_TIMEOUT_MS,
      DEFAULT_MAX_PENDING_STORAGE_OPERATIONS,
    }).toEqual({
      DEFAULT_LEASE_MS: 3_000,
      DEFAULT_APPROVAL_TTL_MS: 3_600_000,
      DEFAULT_MAX_OUTPUT_BYTES: 65_536,
      DEFAULT_MAX_CONCURRENT_JOBS: 4,
      DEFAULT_MAX_CONCURRENT_RUNS: 16,
      DEFAULT_STORAGE_TIMEOUT_MS: 10_000,
      DEFAULT_MAX_PENDING_STORAGE_OPERATIONS: 64,
    });
    const runtime = createScheduledWorkflowRuntime({
      ...base(),
      verifyHuman: async () => ({ id: "ana", projectId: scope.projectId, canApprove: true }),
    });
    // The approval lives an hour from the store's clock at the request.
    const approved = single(tool(), true);
    const waiting = await runtime.runUntilSettled(
      approved,
      (await runtime.submit(approved, { input: { value: 1 }, idempotencyKey: "ttl" })).id,
    );
    const requested = (await runtime.events(waiting.id)).find((e) => e.type === "step.approval_requested");
    expect((waiting.steps.write?.approval?.expiresAt ?? 0) - (requested?.at ?? 0)).toBe(3_600_000);
    await runtime.approve({
      id: waiting.id,
      nodeId: "write",
      digest: waiting.steps.write?.approval?.digest as string,
      credential: "c",
    });
    // The lease is 3 s from the store's clock at the claim.
    const leases: number[] = [];
    const seen = createScheduledWorkflowRuntime({
      ...base(),
      workerId: "seen",
      store: {
        ...store,
        workflows: {
          ...store.workflows,
          claim: async (command) => {
            const claims = await store.workflows.claim(command);
            leases.push(command.leaseMs);
            return claims;
          },
        },
      },
    });
    expect((await seen.runUntilSettled(approved, waiting.id)).status).toBe("succeeded");
    expect(leases).toEqual([3_000]);

    // 64 KiB of input JSON is taken, one byte more is INVALID_INPUT.
    const text = defineWorkflow({
      id: "options.text",
      version: "1",
      input: z.object({ text: z.string() }),
      output: z.unknown(),
      nodes: [{ kind: "tool", id: "write", tool: tool(), input: { kind: "literal", value: { value: 1 } } }],
      result: { kind: "literal", value: null },
    });
    const room = 65_536 - JSON.stringify({ text: "" }).length;
    await expect(
      runtime.submit(text, { input: { text: "x".repeat(room) }, idempotencyKey: "fits" }),
    ).resolves.toMatchObject({ status: "running" });
    await expect(
      runtime.submit(text, { input: { text: "x".repeat(room + 1) }, idempotencyKey: "too-big" }),
    ).rejects.toMatchObject({ code: "INVALID_INPUT" });

    // 16 runs driven at once; the 17th is refused while they are.
    const quick = single(tool());
    const ids = await Promise.all(
      Array.from(
        { length: 17 },
        async (_, i) => (await runtime.submit(quick, { input: { value: i }, idempotencyKey: `run-${i}` })).id,
      ),
    );
    const driven = ids.map((id) => runtime.runUntilSettled(quick, id));
    const results = await Promise.allSettled(driven);
    expect(results.filter((r) => r.status === "fulfilled")).toHaveLength(16);
    expect(results.at(-1)).toMatchObject({ status: "rejected", reason: { code: "LIMIT_EXCEEDED" } });
    await runtime.close();
    await seen.close();
  });

  it("runs at most 4 steps at once by default", async () => {
    let running = 0;
    let most = 0;
    const four = deferred();
    const release = deferred<{ value: number }>();
    const slow = tool(async (input) => {
      running++;
      most = Math.max(most, running);
      if (running === 4) four.resolve();
      const output = await release.promise;
      running--;
      return { value: input.value + output.value };
    });
    const definition = defineWorkflow({
      id: "options.fan",
      version: "1",
      input: value,
      output: z.unknown(),
      nodes: [
        ...["a", "b", "c", "d", "e"].map((id) => ({
          kind: "tool" as const,
          id,
          tool: slow,
          input: { kind: "input" as const, path: [] },
        })),
        { kind: "join", id: "all", dependsOn: ["a", "b", "c", "d", "e"] },
      ],
      result: { kind: "step", stepId: "all", path: [] },
    });
    const runtime = createScheduledWorkflowRuntime(base());
    const run = await runtime.submit(definition, { input: { value: 1 }, idempotencyKey: "fan" });
    const driving = runtime.runUntilSettled(definition, run.id);
    await four.promise;
    // The fifth step waits for a slot: admitted (its cost reserved) but not claimed.
    const during = await runtime.inspect(run.id);
    expect(Object.values(during.steps).filter((step) => step.status === "dispatching")).toHaveLength(5);
    expect((await runtime.events(run.id)).filter((e) => e.type === "job.started")).toHaveLength(4);
    release.resolve({ value: 1 });
    expect((await driving).status).toBe("succeeded");
    expect(most).toBe(4);
    await runtime.close();
  });
});

describe("store calls that do not answer", () => {
  it("fails a call after storageTimeoutMs with STORAGE_UNAVAILABLE, and never dispatches a step whose start did not answer", async () => {
    let effects = 0;
    const definition = single(
      tool((input) => {
        effects++;
        return input;
      }),
    );
    const claimHangs = hanging(["claim"]);
    const stuck = createScheduledWorkflowRuntime({ ...base(), store: claimHangs.store, storageTimeoutMs: 200 });
    const run = await stuck.submit(definition, { input: { value: 1 }, idempotencyKey: "stuck" });
    await expect(stuck.runUntilSettled(definition, run.id)).rejects.toMatchObject({
      code: "STORAGE_UNAVAILABLE",
      message: expect.stringContaining("within 200 ms"),
    });
    expect(effects).toBe(0);

    const startHangs = hanging(["start"]);
    const unsure = createScheduledWorkflowRuntime({
      ...base(),
      workerId: "unsure",
      store: startHangs.store,
      storageTimeoutMs: 200,
    });
    const { run: second, settled: result } = await submitAndSettle(unsure, definition, { value: 2 }, "no-start");
    expect(result.steps.write).toMatchObject({
      status: "failed",
      receipt: { execution: "not_started" },
      costReserved: 0,
    });
    expect(effects).toBe(0);
    // The start that answers late finds its claim settled: the tool never runs.
    startHangs.release();
    claimHangs.release();
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(effects).toBe(0);
    expect((await unsure.inspect(second.id)).steps.write?.status).toBe("failed");
  });

  it("waits DEFAULT_STORAGE_TIMEOUT_MS (10 s) by default", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    const hung = hanging(["inspect"]);
    const runtime = createScheduledWorkflowRuntime({ ...base(), store: hung.store });
    const id = "a".repeat(64);
    let settled: unknown;
    runtime.inspect(id).then(
      () => {
        settled = "answered";
      },
      (error) => {
        settled = error;
      },
    );
    await vi.advanceTimersByTimeAsync(9_999);
    expect(settled).toBeUndefined();
    await vi.advanceTimersByTimeAsync(1);
    expect(settled).toMatchObject({ code: "STORAGE_UNAVAILABLE", message: expect.stringContaining("10000 ms") });
    hung.release();
  });

  it("keeps a call given up on among maxPendingStorageOperations until it answers", async () => {
    const hung = hanging(["inspect"]);
    const runtime = createScheduledWorkflowRuntime({
      ...base(),
      store: hung.store,
      storageTimeoutMs: 100,
      maxConcurrentRuns: 1,
      maxConcurrentJobs: 1,
      maxPendingStorageOperations: 3,
    });
    const id = "b".repeat(64);
    for (let i = 0; i < 3; i++) {
      await expect(runtime.inspect(id)).rejects.toMatchObject({ message: expect.stringContaining("within 100 ms") });
    }
    // Three calls still unanswered: the next is refused at once, without waiting for the store.
    await expect(runtime.inspect(id)).rejects.toMatchObject({
      code: "STORAGE_UNAVAILABLE",
      message: expect.stringContaining("maxPendingStorageOperations"),
    });
    hung.release();
    await new Promise((resolve) => setTimeout(resolve, 20));
    // They answered: the worker calls the store again (and the store says there is no such run).
    await expect(runtime.inspect(id)).rejects.toMatchObject({ code: "NOT_FOUND" });
  });

  it("gives verifyExecution reconciliationTimeoutMs to answer", async () => {
    const definition = single(tool(() => new Promise(() => {})));
    const first = createScheduledWorkflowRuntime({ ...base(), leaseMs: 1_000 });
    const run = await first.submit(definition, { input: { value: 1 }, idempotencyKey: "reconcile" });
    void first.runUntilSettled(definition, run.id).catch(() => {});
    while (!(await first.events(run.id)).some((event) => event.type === "job.started")) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    await first.cancel(run.id);
    const slow = createScheduledWorkflowRuntime({
      ...base(),
      workerId: "auditor",
      reconciliationTimeoutMs: 100,
      verifyExecution: () => new Promise(() => {}),
    });
    const started = performance.now();
    await expect(slow.reconcile(definition, { id: run.id, nodeId: "write", credential: "c" })).rejects.toMatchObject({
      code: "PERMISSION_DENIED",
    });
    // Refused at its own 100 ms, not at the 30 s default.
    expect(performance.now() - started).toBeLessThan(5_000);
    await first.close();
  });
});

describe("createSqliteStore options", () => {
  it("refuses bad or unknown options with INVALID_INPUT", () => {
    for (const [options, name] of [
      [{ filename: "" }, "filename"],
      [{ filename: 7 }, "filename"],
      [{ filename: "a\0b" }, "filename"],
      [{ filename: "x.sqlite", file: "x" }, "file"],
      [{ filename: "x.sqlite", schema: "airlock" }, "schema"],
    ] as const) {
      expect(() => createSqliteStore(options as never)).toThrowError(
        expect.objectContaining({ code: "INVALID_INPUT", message: expect.stringContaining(name) }),
      );
    }
    expect(() => createSqliteStore(undefined as never)).toThrowError(
      expect.objectContaining({ code: "INVALID_INPUT" }),
    );
  });

  it("keeps a file in WAL mode, and refuses work before initialize and after close", async () => {
    const directory = await mkdtemp(join(tmpdir(), "airlock-options-"));
    try {
      const filename = join(directory, "state.sqlite");
      const file = createSqliteStore({ filename });
      await expect(file.read("s", "i")).rejects.toMatchObject({ code: "STORAGE_UNAVAILABLE" });
      await file.initialize();
      await file.initialize();
      const db = new Database(filename, { readonly: true });
      try {
        expect(db.pragma("journal_mode", { simple: true })).toBe("wal");
      } finally {
        db.close();
      }
      await file.close();
      await expect(file.read("s", "i")).rejects.toMatchObject({ code: "STORAGE_UNAVAILABLE" });
    } finally {
      await rm(directory, { recursive: true, force: true });
    }
  });
});

describe("createPostgresStore options", () => {
  it("refuses bad or unknown options with INVALID_INPUT, and connection strings pg would misread, without echoing them", () => {
    const secret = "postgres://user:SECRET@127.0.0.1:1/db";
    for (const [options, name] of [
      [{ connectionString: "mysql://user:SECRET@127.0.0.1/db" }, "connectionString"],
      [{ connectionString: 5 }, "connectionString"],
      [{ connectionString: "" }, "connectionString"],
      // pg would take each of these for a database name on a host named "base".
      [{ connectionString: "host=127.0.0.1 user=user password=SECRET dbname=db" }, "connectionString"],
      [{ connectionString: "SECRETdb" }, "connectionString"],
      [{ connectionString: "postgres:SECRET@db" }, "connectionString"],
      // pg drops what follows the database of a socket directory.
      [{ connectionString: "/var/run/postgresql db SECRET" }, "connectionString"],
      // pg cannot read these at all: a port past 65535, a broken % escape.
      [{ connectionString: "postgres://user:SECRET@127.0.0.1:99999/db" }, "connectionString"],
      [{ connectionString: "postgres://user:SECRET%FF@127.0.0.1/db" }, "connectionString"],
      [{ connectionString: "postgres://user:SECRET@127.0.0.1/db\n" }, "connectionString"],
      [
        { connectionString: `postgres://user:SECRET@127.0.0.1/${"d".repeat(MAX_CONNECTION_STRING_CHARS)}` },
        "connectionString",
      ],
      [{ connectionString: secret, schema: "Airlock" }, "schema"],
      [{ connectionString: secret, schema: "1st" }, "schema"],
      [{ connectionString: secret, schema: 'a"; DROP SCHEMA x; --' }, "schema"],
      [{ connectionString: secret, schema: "a".repeat(64) }, "schema"],
      [{ connectionString: secret, schema: "" }, "schema"],
      [{ connectionString: secret, filename: "x" }, "filename"],
    ] as const) {
      let thrown: unknown;
      try {
        createPostgresStore(options as never);
      } catch (error) {
        thrown = error;
      }
      expect(thrown).toMatchObject({ code: "INVALID_INPUT", message: expect.stringContaining(name) });
      expect(String((thrown as Error).message)).not.toContain("SECRET");
    }
    expect(() => createPostgresStore(null as never)).toThrowError(expect.objectContaining({ code: "INVALID_INPUT" }));
    expect(() => createPostgresStore({ connectionString: secret, schema: "a".repeat(63) })).not.toThrow();
    for (const connectionString of [
      "postgresql://user:SECRET@[::1]:5432/db?sslmode=disable&application_name=airlock",
      "postgres://user:pass word@host/db",
      "postgres://user:SECRET@/db",
      "POSTGRES://host/db",
      "socket://user:SECRET@/var/run/postgresql?db=db",
      "/var/run/postgresql",
      `postgres://h/${"d".repeat(MAX_CONNECTION_STRING_CHARS - 13)}`,
    ]) {
      expect(() => createPostgresStore({ connectionString })).not.toThrow();
    }
  });

  it.skipIf(socket === undefined)(
    "connects through every form pg reads: a URL with the socket directory as host or ?host=, socket://, and '<directory> <database>'",
    async () => {
      const { directory, port, user, password, database } = socket as NonNullable<typeof socket>;
      const credentials = `${encodeURIComponent(user)}${password === "" ? "" : `:${encodeURIComponent(password)}`}`;
      const forms = [
        `postgres://${credentials}@${encodeURIComponent(directory)}:${port}/${database}`,
        `postgresql:///${database}?host=${directory}&port=${port}&user=${user}${password === "" ? "" : `&password=${password}`}`,
        `socket://${credentials}@${directory}?db=${database}&port=${port}`,
        `${directory} ${database}`,
      ];
      // The last form takes its port, user and password from pg's environment variables, as pg documents.
      const saved = { PGPORT: process.env.PGPORT, PGUSER: process.env.PGUSER, PGPASSWORD: process.env.PGPASSWORD };
      Object.assign(process.env, { PGPORT: port, PGUSER: user, PGPASSWORD: password });
      try {
        for (const connectionString of forms) {
          const schema = freshSchema("airlock_forms");
          const pgStore = createPostgresStore({ connectionString, schema });
          try {
            await pgStore.initialize();
            expect(await pgStore.read("scope", "none")).toBeUndefined();
          } finally {
            await pgStore.close();
            await dropSchema(url as string, schema);
          }
        }
      } finally {
        for (const [key, value] of Object.entries(saved)) {
          if (value === undefined) delete process.env[key];
          else process.env[key] = value;
        }
      }
    },
  );

  it("fails to initialize against no server with STORAGE_UNAVAILABLE, without echoing the URL", async () => {
    const unreachable = createPostgresStore({ connectionString: "postgres://user:SECRET@127.0.0.1:1/db" });
    const error = await unreachable.initialize().catch((caught: unknown) => caught);
    expect(error).toMatchObject({ code: "STORAGE_UNAVAILABLE" });
    expect(String((error as Error).message)).not.toContain("SECRET");
    await unreachable.close();
  });

  it.skipIf(url === undefined)("puts its tables in the schema airlock by default", async () => {
    const admin = url as string;
    // A database of its own, so that the default schema is this test's alone.
    const database = `airlock_defaults_${process.pid}_${Date.now()}`;
    await query(admin, `CREATE DATABASE "${database}"`);
    const target = new URL(admin);
    target.pathname = `/${database}`;
    try {
      expect(DEFAULT_POSTGRES_SCHEMA).toBe("airlock");
      const pgStore = createPostgresStore({ connectionString: target.toString() });
      await pgStore.initialize();
      const runtime = createScheduledWorkflowRuntime({ ...base(), store: pgStore });
      const definition = single(tool());
      const { run, settled } = await submitAndSettle(runtime, definition, { value: 1 }, "default-schema");
      expect(settled.status).toBe("succeeded");
      await runtime.close();
      await pgStore.close();
      const tables = await query(
        target.toString(),
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'airlock' ORDER BY table_name",
      );
      expect(tables.map((row) => row.table_name)).toEqual(["airlock_events", "airlock_records"]);
      const rows = await query(target.toString(), "SELECT id FROM airlock.airlock_records");
      expect(rows.map((row) => row.id)).toEqual([run.id]);
    } finally {
      await query(admin, `DROP DATABASE IF EXISTS "${database}" WITH (FORCE)`);
    }
  });
});
