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
 *
 * The parts: the journal's record format, fold and checks (call-journal.ts), holding and writing it (journal-owner.ts),
 * one attempt of the program over it (call-attempt.ts), and a person's decision (decisions.ts). This file
 * puts them together behind `createCallApprovals`, which the executor uses.
 */
import { integerOption, optionKeys, refuseUnknownOptions } from "../../platform/options.ts";
import type { Scope } from "../../tools/define.ts";
import { CONFIG_OPTION_ERRORS, configError } from "../../tools/errors.ts";
import type { SandboxAdapter } from "../adapter.ts";
import { CODE_PROGRAM_LIMIT_RANGES } from "../program.ts";
import type { AttemptOutcome, WaitingOutcome } from "./attempt-outcome.ts";
import { fromError, type RunAttempt, refusal, runAttempt } from "./call-attempt.ts";
import {
  type ApprovalJournalStore,
  type JournaledProgram,
  type JournalInput,
  journalId,
  scopeHash,
} from "./call-journal.ts";
import { type ApprovalDecision, decide, type VerifyHuman } from "./decisions.ts";
import { claim, release, startReplay, type TakenFrom } from "./journal-owner.ts";
import { SNAPSHOT_MIN_CALLS } from "./journal-snapshots.ts";

/** How long an approval request lives before the paused execution expires. */
export const DEFAULT_CALL_APPROVAL_TTL_MS = 60 * 60 * 1000;
/** Longest `ttlMs`. */
export const MAX_CALL_APPROVAL_TTL_MS = 30 * 24 * 60 * 60 * 1000;

export interface CodeApprovalsOptions {
  /** An initialized workflow store. */
  store: ApprovalJournalStore;
  /** Checks a person's credential; the scope's `projectId` must be theirs and `canApprove` true. */
  verifyHuman: VerifyHuman;
  /** Default `DEFAULT_CALL_APPROVAL_TTL_MS`. */
  ttlMs?: number;
  /**
   * Calls before the paused one from which a paused program is captured, on an adapter that declares `snapshots`, so
   * that its resume restores it instead of replaying them. Default `SNAPSHOT_MIN_CALLS`.
   */
  snapshotMinCalls?: number;
}

const OPTION_KEYS = optionKeys<CodeApprovalsOptions>({
  store: true,
  verifyHuman: true,
  ttlMs: true,
  snapshotMinCalls: true,
});
/** The largest `snapshotMinCalls`: no program may make more calls than this (its largest `maxToolCalls`). */
const MAX_SNAPSHOT_MIN_CALLS = CODE_PROGRAM_LIMIT_RANGES.maxToolCalls[1];

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
  refuseUnknownOptions(options, "approvals", OPTION_KEYS, CONFIG_OPTION_ERRORS);
  const { store, verifyHuman } = options;
  for (const method of ["create", "read", "mutate", "events"] as const) {
    if (typeof store?.[method] !== "function") {
      throw configError("approvals.store must be a workflow store (createSqliteStore or createPostgresStore)");
    }
  }
  if (typeof verifyHuman !== "function") throw configError("approvals.verifyHuman must be a function");
  const ttlMs =
    integerOption(options.ttlMs, "approvals.ttlMs", 1, MAX_CALL_APPROVAL_TTL_MS, CONFIG_OPTION_ERRORS) ??
    DEFAULT_CALL_APPROVAL_TTL_MS;
  const snapshotMinCalls =
    integerOption(
      options.snapshotMinCalls,
      "approvals.snapshotMinCalls",
      0,
      MAX_SNAPSHOT_MIN_CALLS,
      CONFIG_OPTION_ERRORS,
    ) ?? SNAPSHOT_MIN_CALLS;

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
    const sh = scopeHash(context.scope);
    const id = journalId(context.executionId);
    /** The journal as this attempt took it: given back so if the attempt stops before its program runs. */
    let held: { owner: string; taken: TakenFrom } | undefined;
    try {
      const claimed = await claim(store, program, context, input, !resume);
      if (!("owner" in claimed)) return claimed;
      held = { owner: claimed.owner, taken: claimed.taken };
      const state = resume ? await startReplay(store, sh, id, claimed.owner) : claimed.state;
      return await runAttempt(
        { store, ttlMs, snapshotMinCalls },
        program,
        context.scope,
        state,
        claimed.owner,
        attempt,
        adapter,
      );
    } catch (error) {
      if (held !== undefined) await release(store, sh, id, held.owner, held.taken).catch(() => {});
      return fromError(error);
    }
  };

  return {
    execute: (...args) => start(false, ...args),
    resume: (...args) => start(true, ...args),
    decide: (decision, verdict) => decide(store, verifyHuman, decision, verdict),
  };
}
