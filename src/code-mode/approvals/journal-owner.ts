/**
 * Holding a call journal: one process at a time owns an execution (an owner id and a lease in the journal's state),
 * and only its owner writes the journal's events. Here: taking the journal (`claim`: a new one, or a paused or
 * abandoned one to continue), and the owner's writes (`append` an event, `setState`), each one transaction of the
 * store, with the store's clock.
 */
import { randomUUID } from "node:crypto";
import { domainDigest, type JsonObject } from "../../json/index.ts";
import type { Scope } from "../../tools/define.ts";
import { AirlockError } from "../../tools/errors.ts";
import type { AttemptOutcome, WaitingOutcome } from "./attempt-outcome.ts";
import {
  type ApprovalJournalStore,
  approvalOf,
  checkJournal,
  JOURNAL_KIND,
  type JournaledProgram,
  type JournalInput,
  type JournalState,
  journalId,
  scopeHash,
} from "./call-journal.ts";

/** How long past its program's wall time a crashed attempt holds its journal before another process may take over. */
export const JOURNAL_HOLD_GRACE_MS = 5_000;

/**
 * Writes one change of the journal as its owner, and gives back what it wrote; another owner or status means this
 * process lost it. `data` may be made from the store's clock: times that decide something (an approval's expiry)
 * must be the store's, which on PostgreSQL is the database's, the same for every worker whatever its own clock says.
 */
export async function append(
  store: ApprovalJournalStore,
  scope: string,
  id: string,
  owner: string,
  type: string,
  data: JsonObject | ((now: number) => JsonObject),
): Promise<JsonObject> {
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
}

/**
 * Changes the journal's state with `edit` (which returns false to change nothing), and gives back the state. The
 * change is recorded as a `journal.status` event (with the failure's code once it failed), after `events` of the edit's
 * own, if it gives any.
 */
export async function setState(
  store: ApprovalJournalStore,
  scope: string,
  id: string,
  edit: (state: JournalState, now: number) => boolean,
  events: (state: JournalState) => readonly { type: string; data: JsonObject }[] = () => [],
): Promise<JournalState> {
  let current: JournalState | undefined;
  const result = await store.mutate(scope, id, (record, now) => {
    const state = structuredClone(checkJournal(record));
    if (!edit(state, now)) {
      current = state;
      return null;
    }
    current = state;
    const code = state.error?.code;
    return {
      state: state as unknown as JsonObject,
      events: [
        ...events(state),
        {
          type: "journal.status",
          data: code === undefined ? { status: state.status } : { status: state.status, code },
        },
      ],
    };
  });
  if (result === undefined) throw new AirlockError("NOT_FOUND", "no paused execution of that id in this scope");
  return current as JournalState;
}

/**
 * Takes the journal of an execution for one attempt: a new one (`create`), or one to continue (decided, or held by an
 * attempt whose hold has passed). A journal that still waits for a person answers with its approval, an expired one
 * with TIMEOUT.
 */
export async function claim(
  store: ApprovalJournalStore,
  program: JournaledProgram,
  context: { runId: string; executionId: string; scope: Scope },
  input: JournalInput,
  create: boolean,
): Promise<{ state: JournalState; owner: string; taken: TakenFrom } | WaitingOutcome | AttemptOutcome> {
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
    // Given back, a new journal may be taken over at once.
    return { state, owner, taken: { status: "running", leaseUntil: 0, attempts: 1 } };
  }
  let waiting: WaitingOutcome | AttemptOutcome | undefined;
  let taken: TakenFrom | undefined;
  const state = await setState(store, sh, id, (journal, now) => {
    if (
      journal.runId !== context.runId ||
      journal.executionId !== context.executionId ||
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
    taken = { status: journal.status, leaseUntil: journal.leaseUntil, attempts: journal.attempts };
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
  return { state, owner, taken: taken as TakenFrom };
}

/** What `claim` changed of a journal it took, so that `release` can give it back as it was. */
export type TakenFrom = Pick<JournalState, "status" | "leaseUntil" | "attempts">;

/** Moves an approved or rejected journal to running for its replay, keeping the decision for the awaited call. */
export function startReplay(store: ApprovalJournalStore, sh: string, id: string, owner: string): Promise<JournalState> {
  return setState(store, sh, id, (journal) => {
    if (journal.owner !== owner) throw new AirlockError("CONFLICT", "another process took this execution over");
    journal.status = "running";
    return true;
  });
}

/**
 * Gives a journal back as `claim` found it, when the attempt stopped before its program ran: a row that does not check
 * out then leaves the execution as it was (its history says it was tried), to resume once the store is mended.
 */
export async function release(
  store: ApprovalJournalStore,
  sh: string,
  id: string,
  owner: string,
  taken: TakenFrom,
): Promise<void> {
  await setState(store, sh, id, (journal) => {
    if (journal.owner !== owner) return false;
    Object.assign(journal, taken, { owner: null });
    return true;
  });
}
