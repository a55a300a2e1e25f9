/**
 * Single-call approvals: a program runs until it reaches a call a person must approve, then it waits, from any
 * process, for as long as the request lives; after the decision it continues from where it stopped.
 *
 * How: such a program runs deterministically (its clock comes from its results, its randomness from a journaled seed,
 * its results are applied in sequence), and every call is journaled in a durable store: the entry is written before
 * the call is dispatched and marked with its result (and that result's sequence number and clock) before the program
 * sees it. To continue, the program is run again from the start and every journaled call is answered from the
 * journal, so nothing that already ran runs again. A replay that issues another call at the same number (another
 * tool, other arguments) fails with INTEGRITY_VIOLATION instead of acting; a call journaled as dispatched but never
 * marked (the process died in between) is OUTCOME_UNKNOWN for a write or host tool, and never sent again.
 */
import { randomUUID } from "node:crypto";
import {
  domainDigest,
  domainDigestOfCopy,
  type JsonObject,
  type JsonValue,
  MAX_JSON_BYTES,
  tryCopyJson,
} from "../json/index.ts";
import { optionKeys, unknownOption } from "../options.ts";
import { type AnyTool, changesNothing, type Scope } from "../tools/define.ts";
import { AirlockError, configError, type ErrorCode, statusOf } from "../tools/errors.ts";
import { parseWithSchema } from "../tools/validate.ts";
import {
  makeSandboxAdapter,
  type SandboxAdapter,
  type SandboxExecuteRequest,
  type SandboxResult,
  type SequencedCallResult,
  type ToolCallResult,
} from "./adapter.ts";
import type { ExecutionEvidence } from "./evidence.ts";
import type { CodeProgramLimits } from "./program.ts";

/** How long an approval request lives before the paused execution expires. */
export const DEFAULT_CALL_APPROVAL_TTL_MS = 60 * 60 * 1000;
/** Longest `ttlMs`. */
export const MAX_CALL_APPROVAL_TTL_MS = 30 * 24 * 60 * 60 * 1000;
/** Time `verifyHuman` has to answer. */
export const APPROVAL_VERIFY_TIMEOUT_MS = 30_000;
/** Journal entries read back at most (two per call of a program of at most 100,000 calls). */
export const MAX_JOURNAL_ENTRIES = 200_010;
export const JOURNAL_KIND = "code-journal";
/** How long past its program's wall time a crashed attempt holds its journal before another process may take over. */
export const JOURNAL_HOLD_GRACE_MS = 5_000;

/** A stored record as workflow stores keep them (the structural part this module needs). */
interface JournalRecord {
  readonly scope: string;
  readonly id: string;
  readonly kind: string;
  readonly version: number;
  readonly state: JsonObject;
}
interface JournalEvent {
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

export interface ApprovingHuman {
  readonly id: string;
  readonly projectId: string;
  readonly canApprove: boolean;
}

export interface CodeApprovalsOptions {
  /** An initialized workflow store. */
  store: ApprovalJournalStore;
  /** Checks a person's credential; the scope's `projectId` must be theirs and `canApprove` true. */
  verifyHuman: (credential: unknown) => ApprovingHuman | Promise<ApprovingHuman>;
  /** Default `DEFAULT_CALL_APPROVAL_TTL_MS`. */
  ttlMs?: number;
}

const OPTION_KEYS = optionKeys<CodeApprovalsOptions>({ store: true, verifyHuman: true, ttlMs: true });

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

export interface ApprovalDecision {
  readonly scope: Scope;
  readonly executionId: string;
  readonly digest: string;
  readonly credential: unknown;
}

type JournalStatus =
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

interface Pending {
  n: number;
  toolId: string;
  version: string;
  inputDigest: string;
  digest: string;
  expiresAt: number;
  /** Set by approve or reject; kept until the awaited call was answered, also across a takeover. */
  decision: "approved" | "rejected" | null;
  humanId: string | null;
  /** The call's exact arguments (absent when they are not JSON within `maxToolInputBytes`). */
  input?: JsonValue;
}

interface JournalState {
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
}

/** Why an attempt stopped before the program ended. */
type Halt = { kind: "paused"; pending: Pending } | { kind: "diverged" } | { kind: "lost"; error: unknown };

/** A journaled call, as the entries of the journal say. */
interface Entry {
  toolId: string;
  argsDigest: string;
  state: "dispatching" | "settled" | "awaiting";
  seq: number;
  now: number;
  result: ToolCallResult | null;
}

export type AttemptOutcome =
  | { status: "succeeded"; output: unknown; usage: object; evidence: readonly ExecutionEvidence[] }
  | {
      status: "failed" | "blocked" | "cancelled" | "outcome_unknown";
      error: { code: ErrorCode; message: string };
      usage: object;
      evidence: readonly ExecutionEvidence[];
      programError?: unknown;
    };

/** Runs one attempt of the execution on the given adapter, under the given execution id (the executor's own path). */
export type RunAttempt = (adapter: SandboxAdapter, attemptExecutionId: string) => Promise<AttemptOutcome>;

export interface WaitingOutcome {
  readonly status: "waiting";
  readonly approval: CallApproval;
  readonly usage: object;
  readonly evidence: readonly ExecutionEvidence[];
}

const never = <T>() => new Promise<T>(() => {});
const isCount = (value: unknown): value is number =>
  typeof value === "number" && Number.isSafeInteger(value) && value >= 0;

const scopeHash = (scope: Scope) => domainDigest("airlock:scope:v1", scope);
const journalId = (executionId: string) => domainDigest("airlock:call-journal:v1", { executionId });

/** A call's arguments: their digest, and their JSON copy when they have one within `maxBytes`. */
function argsOf(input: unknown, maxBytes: number): { digest: string; json: JsonValue | undefined } {
  const copied = tryCopyJson(input, { maxBytes });
  // Digested from the copy's canonical text: a resume digests every journaled call's arguments.
  if (copied.ok) return { digest: domainDigestOfCopy("airlock:call-args:v1", copied.json), json: copied.json.value };
  return { digest: domainDigest("airlock:call-args:v1", { refused: copied.error.rule }), json: undefined };
}

function checkJournal(record: JournalRecord): JournalState {
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
    typeof state.status !== "string"
  ) {
    throw new AirlockError("STORAGE_UNAVAILABLE", "a stored call journal does not check out");
  }
  return state;
}

function foldEntries(events: readonly JournalEvent[]): Map<number, Entry> {
  const entries = new Map<number, Entry>();
  for (const event of events) {
    const data = event.data as Record<string, unknown>;
    const n = data.n;
    if (!isCount(n)) continue;
    if (event.type === "call.dispatching" || event.type === "call.awaiting") {
      entries.set(n, {
        toolId: String(data.toolId),
        argsDigest: String(data.argsDigest),
        state: event.type === "call.dispatching" ? "dispatching" : "awaiting",
        seq: 0,
        now: 0,
        result: null,
      });
    } else if (event.type === "call.settled") {
      const entry = entries.get(n);
      if (entry === undefined || !isCount(data.seq) || typeof data.now !== "number") {
        throw new AirlockError("STORAGE_UNAVAILABLE", "a call journal marks a call it never wrote");
      }
      entries.set(n, {
        ...entry,
        state: "settled",
        seq: data.seq,
        now: data.now,
        result: data.result as ToolCallResult,
      });
    }
  }
  return entries;
}

/** The approval a pending call asks for, as callers see it. */
function approvalOf(executionId: string, pending: Pending): CallApproval {
  return Object.freeze({
    callId: `${executionId}:call:${pending.n}`,
    tool: pending.toolId,
    version: pending.version,
    inputDigest: pending.inputDigest,
    digest: pending.digest,
    expiresAt: pending.expiresAt,
  });
}

function blockedResult(message: string): ToolCallResult {
  return Object.freeze({
    status: "blocked" as const,
    error: Object.freeze({ code: "GUARD_BLOCKED" as const, message }),
  });
}

export interface CallApprovals {
  execute(
    program: JournaledProgram,
    input: JournalInput,
    context: { runId: string; executionId: string; scope: Scope },
    attempt: RunAttempt,
    adapter: SandboxAdapter,
  ): Promise<AttemptOutcome | WaitingOutcome>;
  resume(
    program: JournaledProgram,
    input: JournalInput,
    context: { runId: string; executionId: string; scope: Scope },
    attempt: RunAttempt,
    adapter: SandboxAdapter,
  ): Promise<AttemptOutcome | WaitingOutcome>;
  decide(decision: ApprovalDecision, verdict: "approved" | "rejected"): Promise<{ status: "approved" | "rejected" }>;
}

export function createCallApprovals(options: CodeApprovalsOptions): CallApprovals {
  if (typeof options !== "object" || options === null) throw configError("approvals needs { store, verifyHuman }");
  const unknown = unknownOption(options, "approvals", OPTION_KEYS);
  if (unknown !== undefined) throw configError(unknown);
  const { store, verifyHuman } = options;
  for (const method of ["create", "read", "mutate", "events"] as const) {
    if (typeof store?.[method] !== "function") {
      throw configError("approvals.store must be a workflow store (createSqliteStore or createPostgresStore)");
    }
  }
  if (typeof verifyHuman !== "function") throw configError("approvals.verifyHuman must be a function");
  const ttlMs = options.ttlMs ?? DEFAULT_CALL_APPROVAL_TTL_MS;
  if (!Number.isSafeInteger(ttlMs) || ttlMs < 1 || ttlMs > MAX_CALL_APPROVAL_TTL_MS) {
    throw configError(`approvals.ttlMs must be an integer from 1 to ${MAX_CALL_APPROVAL_TTL_MS}`);
  }

  const needsApproval = async (tool: JournaledTool, input: unknown): Promise<boolean> => {
    const approval = tool.approval;
    if (approval === "never") return false;
    if (approval === "always" || tool.input === undefined) return true;
    const parsed = await parseWithSchema(tool.input, input);
    // Input the tool would refuse needs nobody's approval: the broker refuses it.
    if (!parsed.ok) return false;
    try {
      return approval(parsed.value) !== false;
    } catch {
      return true;
    }
  };

  /**
   * Writes one change of the journal as its owner, and gives back what it wrote; another owner or status means this
   * process lost it. `data` may be made from the store's clock: times that decide something (an approval's expiry)
   * must be the store's, which on PostgreSQL is the database's, the same for every worker whatever its own clock says.
   */
  const append = async (
    scope: string,
    id: string,
    owner: string,
    type: string,
    data: JsonObject | ((now: number) => JsonObject),
  ): Promise<JsonObject> => {
    let written: JsonObject | undefined;
    const result = await store.mutate(scope, id, (record, now) => {
      const state = checkJournal(record);
      if (state.owner !== owner || state.status !== "running") {
        throw new AirlockError("CONFLICT", "another process took this execution over");
      }
      written = typeof data === "function" ? data(now) : data;
      return { state: record.state, events: [{ type, data: written }] };
    });
    if (result === undefined || written === undefined) {
      throw new AirlockError("STORAGE_UNAVAILABLE", "the call journal is gone");
    }
    return written;
  };

  const setState = async (scope: string, id: string, edit: (state: JournalState, now: number) => boolean) => {
    let current: JournalState | undefined;
    const result = await store.mutate(scope, id, (record, now) => {
      const state = structuredClone(checkJournal(record));
      if (!edit(state, now)) {
        current = state;
        return null;
      }
      current = state;
      return {
        state: state as unknown as JsonObject,
        events: [{ type: "journal.status", data: { status: state.status } }],
      };
    });
    if (result === undefined) throw new AirlockError("NOT_FOUND", "no paused execution of that id in this scope");
    return current as JournalState;
  };

  /** One attempt: replays the journal, runs on, and ends at the end of the program or at a call that needs approval. */
  async function runAttempt(
    program: JournaledProgram,
    scope: Scope,
    state: JournalState,
    owner: string,
    attempt: RunAttempt,
    adapter: SandboxAdapter,
  ): Promise<AttemptOutcome | WaitingOutcome> {
    const sh = scopeHash(scope);
    const id = journalId(state.executionId);
    const events: JournalEvent[] = [];
    for (;;) {
      const page = await store.events(sh, id, events.at(-1)?.sequence ?? 0);
      if (page.length === 0) break;
      events.push(...page);
      if (events.length > MAX_JOURNAL_ENTRIES) throw new AirlockError("LIMIT_EXCEEDED", "the call journal is too long");
    }
    const journal = foldEntries(events);
    const toolsById = new Map(program.tools.map((tool) => [tool.id, tool]));
    const maxArgs = program.limits.maxToolInputBytes;
    let nextSeq = 1;
    let lastNow = state.startedAt;
    for (const entry of journal.values()) {
      if (entry.state === "settled") {
        nextSeq = Math.max(nextSeq, entry.seq + 1);
        lastNow = Math.max(lastNow, entry.now);
      }
    }
    // The journaled calls settled from the first on are answered ahead, with the run; each is still checked below.
    const answered: SequencedCallResult[] = [];
    for (let entry = journal.get(1); entry?.state === "settled" && entry.result !== null; ) {
      answered.push(Object.freeze({ result: entry.result, seq: entry.seq, now: entry.now }));
      entry = journal.get(answered.length + 1);
    }
    const pendingCall = state.pending;
    // Set from the calls' callbacks; read after the attempt.
    let halted = null as Halt | null;
    let replayedUnknown = 0;
    const consumed = new Set<number>();
    const inFlight = new Set<Promise<void>>();
    let fingerprint: string | null = state.fingerprint;

    const wrapped = makeSandboxAdapter(
      {
        id: adapter.id,
        version: adapter.version,
        qualification: adapter.qualification,
        deterministic: true,
        isAvailable: () => adapter.isAvailable(),
        execute: async (request: SandboxExecuteRequest): Promise<SandboxResult> => {
          const stop = new AbortController();
          const halt = (reason: Halt) => {
            halted ??= reason;
            stop.abort();
          };
          // Journal writes and dispatches under way: an attempt ends only once they are settled and recorded.
          const track = <T>(work: Promise<T>): Promise<T> => {
            const settled = work.then(
              () => {},
              () => {},
            );
            inFlight.add(settled);
            settled.then(() => inFlight.delete(settled));
            return work;
          };
          const settle = (n: number, result: ToolCallResult): Promise<SequencedCallResult> => {
            const seq = nextSeq++;
            const now = Math.max(Date.now(), lastNow);
            lastNow = now;
            const data = { n, seq, now, result: result as unknown as JsonValue };
            return track(append(sh, id, owner, "call.settled", data).then(() => ({ result, seq, now })));
          };
          const dispatch = (n: number, toolId: string, input: unknown, argsDigest: string, journaled: boolean) =>
            track(
              (async () => {
                if (!journaled) await append(sh, id, owner, "call.dispatching", { n, toolId, argsDigest });
                const result = await request.tools.call(toolId, input);
                return settle(n, result);
              })(),
            );
          let calls = 0;
          const call = (toolId: string, input: unknown): Promise<SequencedCallResult> => {
            const n = ++calls;
            if (halted !== null) return never();
            return (async (): Promise<SequencedCallResult> => {
              const args = argsOf(input, maxArgs);
              const argsDigest = args.digest;
              const entry = journal.get(n);
              const tool = toolsById.get(toolId);
              if (entry !== undefined) {
                consumed.add(n);
                if (entry.toolId !== toolId || entry.argsDigest !== argsDigest) {
                  halt({ kind: "diverged" });
                  return never();
                }
                if (entry.state === "settled" && entry.result !== null) {
                  return { result: entry.result, seq: entry.seq, now: entry.now };
                }
                if (entry.state === "awaiting") {
                  if (pendingCall === null || pendingCall.n !== n || pendingCall.decision === null) {
                    halt({ kind: "diverged" });
                    return never();
                  }
                  if (pendingCall.decision === "rejected") {
                    return settle(n, blockedResult("a person rejected this call"));
                  }
                  // Journaled as dispatched again, so that a crash from here on leaves it unknown, never repeated.
                  return dispatch(n, toolId, input, argsDigest, false);
                }
                // Journaled as dispatched and never marked: the process died in between.
                if (tool !== undefined && changesNothing(tool.effects))
                  return dispatch(n, toolId, input, argsDigest, true);
                replayedUnknown++;
                return settle(
                  n,
                  Object.freeze({
                    status: "outcome_unknown" as const,
                    error: Object.freeze({
                      code: "OUTCOME_UNKNOWN" as const,
                      message: "the outcome of the tool call is unknown",
                    }),
                  }),
                );
              }
              if (tool !== undefined && (await needsApproval(tool, input))) {
                const inputDigest = argsDigest;
                // The expiry, and so the digest that binds it, come from the store's clock (see `append`).
                const awaiting = await track(
                  append(sh, id, owner, "call.awaiting", (now) => {
                    const expiresAt = now + ttlMs;
                    const digest = domainDigest("airlock:call-approval:v1", {
                      scope: sh,
                      runId: state.runId,
                      executionId: state.executionId,
                      programDigest: program.digest,
                      n,
                      tool: tool.id,
                      version: tool.version,
                      inputDigest,
                      expiresAt,
                    });
                    return { n, toolId, argsDigest, digest, expiresAt };
                  }),
                );
                const { digest, expiresAt } = awaiting as { digest: string; expiresAt: number };
                halt({
                  kind: "paused",
                  pending: {
                    n,
                    toolId,
                    version: tool.version,
                    inputDigest,
                    digest,
                    expiresAt,
                    decision: null,
                    humanId: null,
                    // What the person approves, for whoever shows the request (`airlock runs show`, the gateway).
                    ...(args.json === undefined ? {} : { input: args.json }),
                  },
                });
                return never();
              }
              return dispatch(n, toolId, input, argsDigest, false);
            })().catch((error: unknown) => {
              halt({ kind: "lost", error });
              return never<SequencedCallResult>();
            });
          };
          const result = await adapter.execute(
            Object.freeze({
              ...request,
              signal: AbortSignal.any([request.signal, stop.signal]),
              deterministic: Object.freeze({
                startedAt: state.startedAt,
                seed: state.seed,
                answered: Object.freeze(answered),
                call,
                onFingerprint: (value: string) => {
                  if (fingerprint !== null && fingerprint !== value) halt({ kind: "diverged" });
                  fingerprint = value;
                },
              }),
            }),
          );
          // Calls dispatched before a pause finish and are journaled: the person decides on a settled past.
          while (inFlight.size > 0) await Promise.race(inFlight);
          return result;
        },
      },
      {},
    );

    const attemptId = state.attempts <= 1 ? state.executionId : `${state.executionId}/resume-${state.attempts - 1}`;
    const outcome = await attempt(wrapped, attemptId);
    const unfinished = [...journal.keys()].some((n) => !consumed.has(n));
    const finish = async (status: JournalStatus, extra: Partial<JournalState> = {}) => {
      await setState(sh, id, (journalState) => {
        if (journalState.owner !== owner) return false;
        Object.assign(journalState, extra, { status, owner: null });
        return true;
      }).catch(() => {});
    };
    const integrity = (): AttemptOutcome => {
      const code = "INTEGRITY_VIOLATION";
      return {
        status: statusOf(code) as "failed",
        error: { code, message: "the program did not replay its journal: another call at a journaled number" },
        usage: outcome.usage,
        evidence: outcome.evidence,
      };
    };
    if (halted?.kind === "lost") {
      const code: ErrorCode =
        (halted.error as { code?: unknown })?.code === "CONFLICT" ? "CONFLICT" : "STORAGE_UNAVAILABLE";
      return {
        status: "failed",
        error: { code, message: "the call journal could not be written; the execution stopped before acting" },
        usage: outcome.usage,
        evidence: outcome.evidence,
      };
    }
    if (halted?.kind === "diverged" || (halted === null && unfinished)) {
      await finish("failed");
      return integrity();
    }
    if (halted?.kind === "paused") {
      const pending = halted.pending;
      await finish("waiting", { pending, fingerprint });
      return Object.freeze({
        status: "waiting" as const,
        approval: approvalOf(state.executionId, pending),
        usage: outcome.usage,
        evidence: outcome.evidence,
      });
    }
    // The program cannot hide a call whose outcome is unknown, replayed or not.
    const final: AttemptOutcome =
      replayedUnknown > 0 && outcome.status === "succeeded"
        ? {
            status: "outcome_unknown",
            error: {
              code: "OUTCOME_UNKNOWN",
              message: "the outcome of a tool call is unknown, so the effects of the execution are unknown",
            },
            usage: outcome.usage,
            evidence: outcome.evidence,
          }
        : outcome;
    await finish(final.status, { pending: null, fingerprint });
    return final;
  }

  const claim = async (
    program: JournaledProgram,
    context: { runId: string; executionId: string; scope: Scope },
    input: JournalInput,
    create: boolean,
  ): Promise<{ state: JournalState; owner: string } | WaitingOutcome | AttemptOutcome> => {
    const sh = scopeHash(context.scope);
    const id = journalId(context.executionId);
    const owner = randomUUID();
    const inputDigest = domainDigest("airlock:code-input:v1", input.canonical);
    // A running attempt holds the journal at most for the program's wall time and the executor's graces.
    const holdMs = program.limits.wallTimeMillis + JOURNAL_HOLD_GRACE_MS;
    if (create) {
      const state: JournalState = {
        format: 1,
        kind: JOURNAL_KIND,
        scope: context.scope,
        runId: context.runId,
        executionId: context.executionId,
        programDigest: program.digest,
        inputDigest,
        startedAt: Date.now(),
        seed: Math.floor(Math.random() * 0x1_0000_0000),
        ...(input.kept === undefined ? {} : { kept: input.kept }),
        fingerprint: null,
        status: "running",
        owner,
        leaseUntil: Date.now() + holdMs,
        attempts: 1,
        pending: null,
      };
      const { created } = await store.create({
        scope: sh,
        id,
        kind: JOURNAL_KIND,
        idempotencyKey: context.executionId,
        definitionHash: program.digest,
        state: state as unknown as JsonObject,
        events: [{ type: "journal.status", data: { status: "running" } }],
      });
      if (!created) throw new AirlockError("CONFLICT", "the executionId was used before; use a new one");
      // The hold is the store's time, like an approval's expiry (see `append`), and a new record gets none: it is
      // made with this process's clock and held again at once from the store's, so that another worker judges it
      // by the database's clock however far this machine's is off.
      const held = await store.mutate(sh, id, (record, now) => {
        const journal = checkJournal(record);
        if (journal.owner !== owner || journal.status !== "running") {
          throw new AirlockError("CONFLICT", "another process took this execution over");
        }
        state.leaseUntil = now + holdMs;
        return { state: { ...record.state, leaseUntil: state.leaseUntil }, events: [] };
      });
      if (held === undefined) throw new AirlockError("STORAGE_UNAVAILABLE", "the call journal is gone");
      return { state, owner };
    }
    let waiting: WaitingOutcome | AttemptOutcome | undefined;
    const state = await setState(sh, id, (journal, now) => {
      if (
        journal.runId !== context.runId ||
        journal.programDigest !== program.digest ||
        journal.inputDigest !== inputDigest
      ) {
        throw new AirlockError("CONFLICT", "the journal belongs to another run, program or input");
      }
      if (journal.status === "waiting" && journal.pending !== null) {
        if (journal.pending.expiresAt <= now) {
          journal.status = "expired";
          journal.owner = null;
          return true;
        }
        const pending = journal.pending;
        waiting = Object.freeze({
          status: "waiting" as const,
          approval: approvalOf(journal.executionId, pending),
          usage: {},
          evidence: [],
        });
        return false;
      }
      if (journal.status === "expired") return false;
      const takeover = journal.status === "running" && journal.leaseUntil <= now;
      if (journal.status !== "approved" && journal.status !== "rejected" && !takeover) {
        throw new AirlockError("CONFLICT", `the execution is ${journal.status} and cannot be resumed`);
      }
      // `approved` and `rejected` keep their word for the replay; only the owner and the lease change.
      journal.owner = owner;
      journal.leaseUntil = now + holdMs;
      journal.attempts += 1;
      return true;
    });
    if (waiting !== undefined) return waiting;
    if (state.status === "expired") {
      return {
        status: "failed",
        error: { code: "TIMEOUT", message: "the approval request expired before a person decided" },
        usage: {},
        evidence: [],
      };
    }
    return { state, owner };
  };

  /** Moves an approved or rejected journal to running for its replay, keeping the decision for the awaited call. */
  const startReplay = async (sh: string, id: string, owner: string): Promise<JournalState> =>
    setState(sh, id, (journal) => {
      if (journal.owner !== owner) throw new AirlockError("CONFLICT", "another process took this execution over");
      journal.status = "running";
      return true;
    });

  /** A first attempt (`resume` false), or the continuation of a decided or abandoned one. */
  const start = async (
    resume: boolean,
    ...[program, input, context, attempt, adapter]: Parameters<CallApprovals["execute"]>
  ): Promise<AttemptOutcome | WaitingOutcome> => {
    if (!adapter.deterministic) {
      return refusal(
        "UNSUPPORTED_PROFILE",
        "single-call approvals need an adapter that runs programs deterministically",
      );
    }
    try {
      const claimed = await claim(program, context, input, !resume);
      if (!("owner" in claimed)) return claimed;
      const state = resume
        ? await startReplay(scopeHash(context.scope), journalId(context.executionId), claimed.owner)
        : claimed.state;
      return await runAttempt(program, context.scope, state, claimed.owner, attempt, adapter);
    } catch (error) {
      return fromError(error);
    }
  };

  return {
    execute: (...args) => start(false, ...args),
    resume: (...args) => start(true, ...args),

    async decide(decision, verdict) {
      if (typeof decision !== "object" || decision === null)
        throw configError("approve needs { scope, executionId, digest, credential }");
      const { scope, executionId, digest, credential } = decision;
      if (
        typeof executionId !== "string" ||
        executionId.length === 0 ||
        typeof digest !== "string" ||
        !/^[a-f0-9]{64}$/.test(digest)
      ) {
        throw new AirlockError("INVALID_INPUT", "approve needs an executionId and the 64-hex digest of the approval");
      }
      const copied = tryCopyJson(scope, { maxBytes: MAX_JSON_BYTES });
      if (!copied.ok || typeof (scope as { projectId?: unknown })?.projectId !== "string") {
        throw new AirlockError("INVALID_INPUT", "approvals need a scope with a projectId");
      }
      const human = await verifyApprover(verifyHuman, credential, scope.projectId as string);
      const sh = scopeHash(copied.json.value as Scope);
      let expired = false;
      await setState(sh, journalId(executionId), (journal, now) => {
        if (journal.status !== "waiting" || journal.pending === null || journal.pending.digest !== digest) {
          throw new AirlockError("CONFLICT", "the digest is not the pending approval of that execution");
        }
        if (journal.pending.expiresAt <= now) {
          journal.status = "expired";
          expired = true;
          return true;
        }
        journal.status = verdict;
        journal.pending = { ...journal.pending, decision: verdict, humanId: human.id };
        return true;
      });
      if (expired) throw new AirlockError("CONFLICT", "the approval request expired");
      return { status: verdict };
    },
  };
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
      pending === null || typeof pending !== "object"
        ? null
        : Object.freeze({
            ...approvalOf(state.executionId, pending),
            ...(pending.input === undefined ? {} : { input: pending.input }),
          }),
  });
}

/**
 * Asks `verifyHuman` about a credential: the person must belong to `projectId` and be allowed to approve, else
 * PERMISSION_DENIED (also when the verifier throws or takes longer than `APPROVAL_VERIFY_TIMEOUT_MS`). Only the
 * person's id is kept by whoever records the decision; the credential goes nowhere.
 */
export async function verifyApprover(
  verifyHuman: ((credential: unknown) => ApprovingHuman | Promise<ApprovingHuman>) | undefined,
  credential: unknown,
  projectId: string,
): Promise<ApprovingHuman> {
  if (typeof verifyHuman !== "function") throw new AirlockError("PERMISSION_DENIED", "there is no verifyHuman to ask");
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    const human = await Promise.race([
      Promise.resolve().then(() => verifyHuman(credential)),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error("timed out")), APPROVAL_VERIFY_TIMEOUT_MS);
      }),
    ]);
    const { id, projectId: project, canApprove } = human ?? ({} as ApprovingHuman);
    if (typeof id !== "string" || id.length === 0 || id.length > 256 || project !== projectId || canApprove !== true) {
      throw new Error("refused");
    }
    return Object.freeze({ id, projectId: project, canApprove });
  } catch {
    throw new AirlockError(
      "PERMISSION_DENIED",
      "the credential does not belong to a person who may approve in this project",
    );
  } finally {
    clearTimeout(timer);
  }
}

function refusal(code: ErrorCode, message: string): AttemptOutcome {
  return {
    status: statusOf(code) as "failed",
    error: { code, message },
    usage: {},
    evidence: [],
  };
}

function fromError(error: unknown): AttemptOutcome {
  if (error instanceof AirlockError) return refusal(error.code, error.message);
  return refusal("STORAGE_UNAVAILABLE", "the call journal could not be read or written");
}
