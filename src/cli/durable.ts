/**
 * What the store commands of runs-commands.ts do, loaded only when one of them runs: the stores and workflow modules (and the
 * schema library they use) stay out of every other command's start.
 */
import { existsSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { createCallApprovals, MAX_CALL_APPROVAL_TTL_MS } from "../code-mode/approvals/call-approvals.ts";
import { JOURNAL_KIND } from "../code-mode/approvals/call-journal.ts";
import { type ApprovingHuman, verifyApprover } from "../code-mode/approvals/decisions.ts";
import type { Scope } from "../tools/define.ts";
import { AirlockError } from "../tools/errors.ts";
import { isStepId } from "../workflows/definition.ts";
import { createPostgresStore } from "../workflows/postgres.ts";
import type { StoredRecord } from "../workflows/records.ts";
import { RUN_KIND, runStateOf, snapshotOf } from "../workflows/run-state.ts";
import { createSqliteStore } from "../workflows/sqlite.ts";
import type { WorkflowStore } from "../workflows/store.ts";
import { APPROVER_CREDENTIAL_ENV, EXIT_FAILED, EXIT_OK, LIST_LIMIT, UsageError } from "./args.ts";
import type { CliIo } from "./command.ts";

export interface StoreFlags {
  store?: string;
  schema?: string;
  json?: boolean;
}

type Verify = (credential: unknown) => ApprovingHuman | Promise<ApprovingHuman>;

/**
 * The store of `--store`, initialized, and how a command line names it (a SQLite file by its absolute path, a
 * PostgreSQL URL without its password). `create`: a missing SQLite file is made (the gateway's), else it is refused.
 */
async function openNamedStore(
  values: { store?: string; schema?: string },
  io: CliIo,
  create: boolean,
): Promise<{ store: WorkflowStore; shown: string }> {
  const target = values.store;
  if (target === undefined) throw new UsageError("--store is required");
  let store: WorkflowStore;
  let shown: string;
  if (/^postgres(ql)?:\/\//.test(target)) {
    try {
      store = createPostgresStore({
        connectionString: target,
        ...(values.schema === undefined ? {} : { schema: values.schema }),
      });
    } catch (error) {
      // The URL is checked above; what is left to refuse is the schema name.
      if (error instanceof AirlockError && error.code === "INVALID_INPUT") throw new UsageError(`--${error.message}`);
      throw error;
    }
    shown = withoutPassword(target);
  } else {
    if (values.schema !== undefined) throw new UsageError("--schema is for PostgreSQL stores only");
    const filename = resolve(io.cwd, target);
    // A mistyped path must not become a new, empty store.
    if (!create && !existsSync(filename)) throw new UsageError(`no store file at ${filename}`);
    if (create && !existsSync(dirname(filename))) throw new UsageError(`--store: no directory ${dirname(filename)}`);
    store = createSqliteStore({ filename });
    shown = filename;
  }
  try {
    await store.initialize();
  } catch (error) {
    await store.close().catch(() => {});
    throw error;
  }
  return { store, shown };
}

async function openStore(values: { store?: string; schema?: string }, io: CliIo): Promise<WorkflowStore> {
  return (await openNamedStore(values, io, false)).store;
}

/** The gateway's store (`airlock serve --store`): a SQLite file is created when missing. */
export function openGatewayStore(values: { store?: string; schema?: string }, io: CliIo) {
  return openNamedStore(values, io, true);
}

/** A connection URL as it may be shown: without its password. */
function withoutPassword(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password === "") return url;
    parsed.password = "";
    return parsed.toString();
  } catch {
    return "postgres://...";
  }
}

export { MAX_CALL_APPROVAL_TTL_MS };

async function withStore(
  values: { store?: string; schema?: string },
  io: CliIo,
  body: (store: WorkflowStore) => Promise<number>,
): Promise<number> {
  let store: WorkflowStore | undefined;
  try {
    store = await openStore(values, io);
    return await body(store);
  } catch (error) {
    // A store that cannot be reached is a failure to report, as a refused decision is, not a crash.
    if (error instanceof AirlockError) {
      io.stderr(`airlock: ${error.code}: ${error.message}\n`);
      return EXIT_FAILED;
    }
    throw error;
  } finally {
    await store?.close();
  }
}

async function loadVerifier(path: string | undefined, io: CliIo): Promise<Verify> {
  if (path === undefined) throw new UsageError("--verifier <module> is required: a module exporting verifyHuman");
  const file = resolve(io.cwd, path);
  if (!existsSync(file)) throw new UsageError(`no verifier module at ${file}`);
  const loaded = (await import(pathToFileURL(file).href)) as { verifyHuman?: unknown; default?: unknown };
  const verify = loaded.verifyHuman ?? loaded.default;
  if (typeof verify !== "function") throw new UsageError(`${path} exports no verifyHuman function`);
  return verify as Verify;
}

/** A run by its id or a unique prefix of at least 8 characters of it, or a program by its execution id. */
async function findRecord(store: WorkflowStore, id: string): Promise<StoredRecord> {
  const records = [
    ...(await store.list({ kind: RUN_KIND, limit: LIST_LIMIT })),
    ...(await store.list({ kind: JOURNAL_KIND, limit: LIST_LIMIT })),
  ].filter(
    (record) =>
      journalExecution(record) === id || (record.kind === RUN_KIND && id.length >= 8 && record.id.startsWith(id)),
  );
  if (records.length === 0) throw new AirlockError("NOT_FOUND", "no run or paused program with that id");
  if (records.length > 1) throw new UsageError("that prefix names more than one run; give more of the id");
  return records[0] as StoredRecord;
}

function journalExecution(record: StoredRecord): string | undefined {
  const id = record.state.executionId;
  return record.kind === JOURNAL_KIND && typeof id === "string" ? id : undefined;
}

const time = (ms: unknown) => (typeof ms === "number" ? new Date(ms).toISOString() : "-");

function summary(record: StoredRecord): Record<string, unknown> {
  if (record.kind === RUN_KIND) {
    const run = runStateOf(record.state);
    return {
      kind: "workflow",
      id: record.id,
      name: `${run.workflow.id}@${run.workflow.version}`,
      status: run.status,
      version: record.version,
    };
  }
  return {
    kind: "program",
    id: journalExecution(record),
    name: String(record.state.programDigest),
    status: String(record.state.status),
    version: record.version,
  };
}

interface Waiting {
  kind: "workflow" | "program";
  run: string;
  node: string;
  tool: string;
  digest: string;
  expiresAt: string;
}

function waitingOf(record: StoredRecord): Waiting[] {
  if (record.kind === RUN_KIND) {
    const run = runStateOf(record.state);
    return run.nodes.flatMap((node) => {
      const step = run.steps[node.id];
      if (step?.status !== "waiting" || step.approval === null) return [];
      return [
        {
          kind: "workflow" as const,
          run: record.id,
          node: node.id,
          tool: `${node.toolId}@${node.toolVersion}`,
          digest: step.approval.digest,
          expiresAt: time(step.approval.expiresAt),
        },
      ];
    });
  }
  const pending = record.state.pending as Record<string, unknown> | null;
  if (record.state.status !== "waiting" || pending === null || typeof pending !== "object") return [];
  return [
    {
      kind: "program",
      run: journalExecution(record) as string,
      node: `call:${pending.n}`,
      tool: `${pending.toolId}@${pending.version}`,
      digest: String(pending.digest),
      expiresAt: time(pending.expiresAt),
    },
  ];
}

function table(rows: Record<string, unknown>[], columns: string[]): string {
  if (rows.length === 0) return "";
  const widths = columns.map((column) => Math.max(column.length, ...rows.map((row) => String(row[column]).length)));
  const line = (cells: string[]) =>
    `${cells
      .map((cell, i) => cell.padEnd(widths[i] as number))
      .join("  ")
      .trimEnd()}\n`;
  return (
    line(columns.map((column) => column.toUpperCase())) +
    rows.map((row) => line(columns.map((c) => String(row[c])))).join("")
  );
}

export async function runsAction(values: StoreFlags, io: CliIo, action: "list" | "show", id: string | undefined) {
  return withStore(values, io, async (store) => {
    if (action === "list") {
      const records = [
        ...(await store.list({ kind: RUN_KIND, limit: LIST_LIMIT })),
        ...(await store.list({ kind: JOURNAL_KIND, limit: LIST_LIMIT })),
      ];
      const rows = records.map(summary);
      io.stdout(values.json ? `${JSON.stringify(rows, null, 2)}\n` : table(rows, ["kind", "id", "name", "status"]));
      return EXIT_OK;
    }
    const record = await findRecord(store, id as string);
    const events = await store.events(record.scope, record.id);
    const shown =
      record.kind === RUN_KIND
        ? { kind: "workflow", ...snapshotOf(record.id, record.version, runStateOf(record.state)), events }
        : // The journal's own `kind` field ("code-journal") would hide the label.
          { ...record.state, kind: "program", events };
    io.stdout(`${JSON.stringify(shown, null, 2)}\n`);
    return EXIT_OK;
  });
}

export async function approvalsAction(values: StoreFlags, io: CliIo) {
  return withStore(values, io, async (store) => {
    const rows = [
      ...(await store.list({ kind: RUN_KIND, status: "waiting", limit: LIST_LIMIT })),
      ...(await store.list({ kind: JOURNAL_KIND, status: "waiting", limit: LIST_LIMIT })),
    ].flatMap(waitingOf);
    io.stdout(
      values.json
        ? `${JSON.stringify(rows, null, 2)}\n`
        : table(rows as unknown as Record<string, unknown>[], ["kind", "run", "node", "tool", "digest", "expiresAt"]),
    );
    return EXIT_OK;
  });
}

export async function decideAction(
  values: StoreFlags & { verifier?: string },
  io: CliIo,
  verdict: "approved" | "rejected",
  runId: string,
  node: string,
  digest: string,
) {
  const name = verdict === "approved" ? "approve" : "reject";
  const verifyHuman = await loadVerifier(values.verifier, io);
  // From the environment: the command line is visible to other users of the machine.
  const credential = process.env[APPROVER_CREDENTIAL_ENV];
  if (credential === undefined || credential === "") {
    throw new UsageError(`set ${APPROVER_CREDENTIAL_ENV} to the deciding person's credential`);
  }
  return withStore(values, io, async (store) => {
    const record = await findRecord(store, runId);
    if (record.kind === RUN_KIND) {
      if (!isStepId(node)) throw new UsageError(`${node} is not a step id`);
      const run = runStateOf(record.state);
      const human = await verifyApprover(verifyHuman, credential, String(run.scope.projectId));
      const access = { scope: record.scope, id: record.id, policy: run.policy };
      const command = { ...access, nodeId: node, digest, humanId: human.id };
      const changed =
        verdict === "approved" ? await store.workflows.approve(command) : await store.workflows.reject(command);
      io.stdout(
        `${name === "approve" ? "approved" : "rejected"} ${node} of run ${record.id} (now ${runStateOf(changed.state).status})\n`,
      );
      return EXIT_OK;
    }
    const pending = record.state.pending as { n?: unknown } | null;
    if (pending === null || node !== `call:${pending.n}`) {
      throw new AirlockError("CONFLICT", `the program does not wait at ${node}`);
    }
    const approvals = createCallApprovals({ store, verifyHuman });
    await approvals.decide(
      { scope: record.state.scope as Scope, executionId: journalExecution(record) as string, digest, credential },
      verdict,
    );
    io.stdout(`${name === "approve" ? "approved" : "rejected"} ${node} of execution ${journalExecution(record)}\n`);
    return EXIT_OK;
  });
}
