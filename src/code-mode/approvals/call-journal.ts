/**
 * The call journal of an execution with single-call approvals, as the store keeps it: one record (its state: who owns
 * the execution, its status, seed and clock, the call it waits on) and an append-only list of events, one or two per
 * call the program made (`call.dispatching` or `call.awaiting` before it is acted on, `call.settled` with its result
 * after), and `call.decided` for a person's decision on an awaited call. Here: what the store must offer, the record's
 * format and its check, the digest an approval binds, the fold of the events into one entry per call, and the view
 * callers read before a resume. A row that does not have the format is STORAGE_UNAVAILABLE, before anything runs.
 */
import { domainDigest, domainDigestOfCopy, type JsonObject, type JsonValue, tryCopyJson } from "../../json/index.ts";
import type { AnyTool, Scope } from "../../tools/define.ts";
import { AirlockError, type ErrorCode, isErrorCode, statusOf } from "../../tools/errors.ts";
import type { ToolCallResult } from "../adapter.ts";
import type { CodeProgramLimits } from "../program.ts";

/** Journal entries read back at most (two per call of a program of at most 100,000 calls). */
export const MAX_JOURNAL_ENTRIES = 200_010;
export const JOURNAL_KIND = "code-journal";

/** A stored record as workflow stores keep them (the structural part this module needs). */
export interface JournalRecord {
  readonly scope: string;
  readonly id: string;
  readonly kind: string;
  readonly version: number;
  readonly state: JsonObject;
}
export interface JournalEvent {
  readonly sequence: number;
  readonly type: string;
  readonly data: JsonObject;
}

/** What approvals need of a store: every workflow store (`createSqliteStore`, `createPostgresStore`) has it. */
export interface ApprovalJournalStore {
  create(record: {
    scope: string;
    id: string;
    kind: string;
    idempotencyKey: string;
    definitionHash: string;
    state: JsonObject;
    events?: readonly { type: string; data: JsonObject }[];
  }): Promise<{ record: JournalRecord; created: boolean }>;
  read(scope: string, id: string): Promise<JournalRecord | undefined>;
  mutate(
    scope: string,
    id: string,
    change: (
      record: JournalRecord,
      now: number,
    ) => { state: JsonObject; events: readonly { type: string; data: JsonObject }[] } | null,
  ): Promise<{ record: JournalRecord; changed: boolean } | undefined>;
  events(scope: string, id: string, after?: number): Promise<readonly JournalEvent[]>;
}

/**
 * What the journal reads of a program: its digest, two of its limits, and of its tools the id, version, effects and
 * approval (a code program has them all; the MCP gateway describes its scripts with these alone).
 */
export interface JournaledProgram {
  readonly digest: string;
  readonly limits: Pick<CodeProgramLimits, "wallTimeMillis" | "maxToolInputBytes">;
  readonly tools: readonly JournaledTool[];
}

/** A tool as the journal sees it; `input` is read only for an approval that is a function of the input. */
export type JournaledTool = Pick<AnyTool, "id" | "version" | "effects" | "approval"> & {
  readonly input?: AnyTool["input"];
};

/**
 * An execution's input as the journal binds it: its canonical JSON (digested, so that a resume must give the same),
 * and `kept`, a value the journal stores with it for a caller that resumes from the journal alone (the MCP gateway
 * keeps a session's stored values there, which a new process does not have).
 */
export interface JournalInput {
  readonly canonical: string;
  readonly kept?: JsonValue;
}

/** The call a paused execution waits on. */
export interface CallApproval {
  /** `<executionId>:call:<n>`: the program's n-th call. */
  readonly callId: string;
  readonly tool: string;
  readonly version: string;
  /** Hex SHA-256 of the call's exact input. */
  readonly inputDigest: string;
  /** Hex SHA-256 binding the program, the call's number, tool, version and input, the scope and the expiry. */
  readonly digest: string;
  readonly expiresAt: number;
}

export type JournalStatus =
  | "running"
  | "waiting"
  | "approved"
  | "rejected"
  | "expired"
  | "succeeded"
  | "failed"
  | "blocked"
  | "cancelled"
  | "outcome_unknown";

export type Decision = "approved" | "rejected";

export interface Pending {
  n: number;
  toolId: string;
  version: string;
  inputDigest: string;
  digest: string;
  expiresAt: number;
  /** Set by approve or reject; kept until the awaited call was answered, also across a takeover. */
  decision: Decision | null;
  humanId: string | null;
  /** The call's exact arguments (absent when they are not JSON within `maxToolInputBytes`). */
  input?: JsonValue;
}

function isPending(value: unknown): value is Pending {
  const pending = value as Pending;
  return (
    typeof value === "object" &&
    value !== null &&
    isCount(pending.n) &&
    typeof pending.toolId === "string" &&
    typeof pending.version === "string" &&
    typeof pending.inputDigest === "string" &&
    typeof pending.digest === "string" &&
    Number.isFinite(pending.expiresAt) &&
    (pending.decision === null || pending.decision === "approved" || pending.decision === "rejected") &&
    (pending.humanId === null || typeof pending.humanId === "string")
  );
}

export interface JournalState {
  format: 1;
  kind: typeof JOURNAL_KIND;
  scope: Scope;
  runId: string;
  executionId: string;
  programDigest: string;
  inputDigest: string;
  startedAt: number;
  seed: number;
  /** `JournalInput.kept`, when the caller gave one. */
  kept?: JsonValue;
  fingerprint: string | null;
  status: JournalStatus;
  owner: string | null;
  leaseUntil: number;
  attempts: number;
  pending: Pending | null;
  /** The snapshot of the program where it paused last (journal-snapshots.ts), if one was kept. */
  snapshot?: SnapshotRef | null;
  /** How the execution failed, once it did: what `airlock runs show` and other readers of the journal see. */
  error?: { code: ErrorCode; message: string } | null;
}

/** What the journal's state keeps of a snapshot: where it is, the paused call it was taken at, its digest. */
export interface SnapshotRef {
  id: string;
  n: number;
  digest: string;
}

function isSnapshotRef(value: unknown): value is SnapshotRef {
  const ref = value as SnapshotRef;
  return (
    typeof value === "object" &&
    value !== null &&
    typeof ref.id === "string" &&
    isCount(ref.n) &&
    typeof ref.digest === "string" &&
    Object.keys(value).length === 3
  );
}

/** A journaled call, as the entries of the journal say. */
export interface Entry {
  toolId: string;
  argsDigest: string;
  state: "dispatching" | "settled" | "awaiting";
  seq: number;
  now: number;
  result: ToolCallResult | null;
  /** A person's decision on the call while it awaited one (`call.decided`): the approval's digest and the verdict. */
  decided?: { digest: string; decision: Decision };
}

export const isCount = (value: unknown): value is number =>
  typeof value === "number" && Number.isSafeInteger(value) && value >= 0;

/** The store's key of a scope: journals are kept under it, so another scope finds nothing. */
export const scopeHash = (scope: Scope) => domainDigest("airlock:scope:v1", scope);
export const journalId = (executionId: string) => domainDigest("airlock:call-journal:v1", { executionId });

/** What an approval binds: the program and its run, the call's number, tool, version and exact input, the expiry. */
export interface ApprovedCall {
  /** The journal's scope, as `scopeHash` gives it. */
  scope: string;
  runId: string;
  executionId: string;
  programDigest: string;
  n: number;
  tool: string;
  version: string;
  inputDigest: string;
  expiresAt: number;
}

/** The digest a person approves: the host computes it again from the call it is about to send, and compares. */
export const approvalDigest = (call: ApprovedCall) => domainDigest("airlock:call-approval:v1", call);

/** A call's arguments: their digest, and their JSON copy when they have one within `maxBytes`. */
export function argsOf(input: unknown, maxBytes: number): { digest: string; json: JsonValue | undefined } {
  const copied = tryCopyJson(input, { maxBytes });
  // Digested from the copy's canonical text: a resume digests every journaled call's arguments.
  if (copied.ok) return { digest: domainDigestOfCopy("airlock:call-args:v1", copied.json), json: copied.json.value };
  return { digest: domainDigest("airlock:call-args:v1", { refused: copied.error.rule }), json: undefined };
}

export function checkJournal(record: JournalRecord): JournalState {
  const state = record.state as unknown as JournalState;
  if (
    record.kind !== JOURNAL_KIND ||
    state.format !== 1 ||
    state.kind !== JOURNAL_KIND ||
    typeof state.runId !== "string" ||
    typeof state.executionId !== "string" ||
    typeof state.programDigest !== "string" ||
    typeof state.inputDigest !== "string" ||
    !isCount(state.startedAt) ||
    !isCount(state.seed) ||
    !isCount(state.attempts) ||
    typeof state.status !== "string" ||
    (state.pending !== null && !isPending(state.pending)) ||
    (state.snapshot !== undefined && state.snapshot !== null && !isSnapshotRef(state.snapshot))
  ) {
    throw new AirlockError("STORAGE_UNAVAILABLE", "a stored call journal does not check out");
  }
  return state;
}

/** Reads the events of a journal after sequence number `after` (all by default), in order (up to MAX_JOURNAL_ENTRIES). */
export async function readEvents(
  store: ApprovalJournalStore,
  sh: string,
  id: string,
  after = 0,
): Promise<JournalEvent[]> {
  const events: JournalEvent[] = [];
  for (;;) {
    const page = await store.events(sh, id, events.at(-1)?.sequence ?? after);
    if (page.length === 0) return events;
    events.push(...page);
    if (events.length > MAX_JOURNAL_ENTRIES) throw new AirlockError("LIMIT_EXCEEDED", "the call journal is too long");
  }
}

/** A result as a call ends with it (calls.ts and the gateway write them so): what a journaled answer must be. */
export function isCallResult(value: unknown): value is ToolCallResult {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return false;
  const { status, output, error } = value as { status?: unknown; output?: unknown; error?: unknown };
  const keys = Object.keys(value).length;
  if (status === "succeeded") return output !== undefined && keys === 2;
  if (typeof error !== "object" || error === null || keys !== 2) return false;
  const { code, message } = error as { code?: unknown; message?: unknown };
  return (
    isErrorCode(code) && statusOf(code) === status && typeof message === "string" && Object.keys(error).length === 2
  );
}

const notChecked = () => new AirlockError("STORAGE_UNAVAILABLE", "a stored call journal does not check out");

/**
 * The journal's events as one entry per call number: the last word on each call wins. `from`: the entries the events
 * before these came to (a snapshot's summary of the journal, journal-snapshots.ts), which they go on from. An event
 * that does not have its format, or marks a call the journal never wrote, is STORAGE_UNAVAILABLE.
 */
export function foldEntries(events: readonly JournalEvent[], from?: ReadonlyMap<number, Entry>): Map<number, Entry> {
  const entries = new Map<number, Entry>(from);
  for (const event of events) {
    const data = event.data as Record<string, unknown>;
    const n = data.n;
    if (!event.type.startsWith("call.")) continue;
    if (!isCount(n)) throw notChecked();
    if (event.type === "call.dispatching" || event.type === "call.awaiting") {
      if (typeof data.toolId !== "string" || typeof data.argsDigest !== "string") throw notChecked();
      entries.set(n, {
        toolId: data.toolId,
        argsDigest: data.argsDigest,
        state: event.type === "call.dispatching" ? "dispatching" : "awaiting",
        seq: 0,
        now: 0,
        result: null,
      });
      continue;
    }
    const entry = entries.get(n);
    if (entry === undefined) {
      throw new AirlockError("STORAGE_UNAVAILABLE", "a call journal marks a call it never wrote");
    }
    if (event.type === "call.settled") {
      if (!isCount(data.seq) || typeof data.now !== "number" || !isCallResult(data.result)) throw notChecked();
      const { toolId, argsDigest } = entry;
      entries.set(n, { toolId, argsDigest, state: "settled", seq: data.seq, now: data.now, result: data.result });
    } else if (event.type === "call.decided") {
      const { digest, decision } = data;
      if (
        entry.state !== "awaiting" ||
        typeof digest !== "string" ||
        (decision !== "approved" && decision !== "rejected")
      )
        throw notChecked();
      entries.set(n, { ...entry, decided: { digest, decision } });
    } else throw notChecked();
  }
  return entries;
}

/** The approval a pending call asks for, as callers see it. */
export function approvalOf(executionId: string, pending: Pending): CallApproval {
  return Object.freeze({
    callId: `${executionId}:call:${pending.n}`,
    tool: pending.toolId,
    version: pending.version,
    inputDigest: pending.inputDigest,
    digest: pending.digest,
    expiresAt: pending.expiresAt,
  });
}

/** An execution's journal as a caller checks it before a resume: what ran, its status and the call it waits on. */
export interface CallJournalView {
  readonly runId: string;
  readonly programDigest: string;
  readonly inputDigest: string;
  readonly status: string;
  /** `JournalInput.kept` of the first attempt. */
  readonly kept?: JsonValue;
  /** The call it waits on (or waited on), with its exact arguments when they are JSON within limits. */
  readonly pending: (CallApproval & { readonly input?: JsonValue }) | null;
}

/** The journal of `executionId` in `scope`, or undefined when the store has none. */
export async function readCallJournal(
  store: ApprovalJournalStore,
  scope: Scope,
  executionId: string,
): Promise<CallJournalView | undefined> {
  const record = await store.read(scopeHash(scope), journalId(executionId));
  if (record === undefined) return undefined;
  const state = checkJournal(record);
  const pending = state.pending;
  return Object.freeze({
    runId: state.runId,
    programDigest: state.programDigest,
    inputDigest: state.inputDigest,
    status: state.status,
    ...(state.kept === undefined ? {} : { kept: state.kept }),
    pending:
      pending === null
        ? null
        : Object.freeze({
            ...approvalOf(state.executionId, pending),
            ...(pending.input === undefined ? {} : { input: pending.input }),
          }),
  });
}
