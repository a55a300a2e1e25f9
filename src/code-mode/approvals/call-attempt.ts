/**
 * One attempt of an execution with single-call approvals: the program runs deterministically on the adapter, wrapped
 * so that every call it makes goes through the journal. A call the journal holds is checked against it (tool and
 * arguments at that number) and answered from it; a new call is journaled as dispatching before it is sent and as
 * settled (with its result number and clock) before the program sees its result; a call that needs a person is
 * journaled as awaiting, and the attempt ends there, waiting. A call that differs from the journal ends the attempt
 * with INTEGRITY_VIOLATION before anything acts; one journaled as dispatching and never marked (the process died in
 * between) is OUTCOME_UNKNOWN for a write or host tool, never sent again.
 *
 * An attempt that pauses after `snapshotMinCalls` calls or more (default SNAPSHOT_MIN_CALLS), on an adapter that declares `snapshots`, captures
 * the run where it waits and keeps the snapshot beside the journal (journal-snapshots.ts); the next attempt restores
 * it rather than running the program from its start, and its calls go through the same journal: those still open at
 * the capture come again first (each checked against its entry and answered from it, or dispatched), then new ones.
 */
import type { JsonValue } from "../../json/index.ts";
import { changesNothing, type Scope } from "../../tools/define.ts";
import { AirlockError, type ErrorCode, statusOf } from "../../tools/errors.ts";
import { parseWithSchema } from "../../tools/validate.ts";
import {
  makeSandboxAdapter,
  type SandboxAdapter,
  type SandboxExecuteRequest,
  type SandboxResult,
  type SandboxSnapshot,
  type SequencedCallResult,
  type ToolCallResult,
} from "../adapter.ts";
import type { AttemptOutcome, WaitingOutcome } from "./attempt-outcome.ts";
import {
  type ApprovalJournalStore,
  type ApprovedCall,
  approvalDigest,
  approvalOf,
  argsOf,
  type Entry,
  foldEntries,
  type JournaledProgram,
  type JournaledTool,
  type JournalState,
  type JournalStatus,
  journalId,
  type Pending,
  readEvents,
  scopeHash,
} from "./call-journal.ts";
import { append, setState } from "./journal-owner.ts";
import { dropSnapshot, type JournalSummary, readSnapshot, storeSnapshot } from "./journal-snapshots.ts";

/** Runs one attempt of the execution on the given adapter, under the given execution id (the executor's own path). */
export type RunAttempt = (adapter: SandboxAdapter, attemptExecutionId: string) => Promise<AttemptOutcome>;

/**
 * Why an attempt stopped before the program ended: a call that needs a person, a call other than the journal's at its
 * number, a decision that is not on the call the program makes, a journal that could not be written.
 */
type Halt =
  | { kind: "paused"; pending: Pending }
  | { kind: "diverged" }
  | { kind: "tampered" }
  | { kind: "lost"; error: unknown };

const never = <T>() => new Promise<T>(() => {});

function blockedResult(message: string): ToolCallResult {
  return Object.freeze({
    status: "blocked" as const,
    error: Object.freeze({ code: "GUARD_BLOCKED" as const, message }),
  });
}

/** Whether a call of `tool` with `input` must wait for a person. */
async function needsApproval(tool: JournaledTool, input: unknown): Promise<boolean> {
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
}

/** What an attempt needs besides the program and its journal: the store, how long a request lives, when to capture. */
export interface AttemptContext {
  readonly store: ApprovalJournalStore;
  readonly ttlMs: number;
  /** Calls before a pause from which the paused run is captured (on an adapter that declares `snapshots`). */
  readonly snapshotMinCalls: number;
}

/** One attempt: replays the journal, runs on, and ends at the end of the program or at a call that needs approval. */
export async function runAttempt(
  { store, ttlMs, snapshotMinCalls }: AttemptContext,
  program: JournaledProgram,
  scope: Scope,
  state: JournalState,
  owner: string,
  attempt: RunAttempt,
  adapter: SandboxAdapter,
): Promise<AttemptOutcome | WaitingOutcome> {
  const sh = scopeHash(scope);
  const id = journalId(state.executionId);
  const finish = async (status: JournalStatus, extra: Partial<JournalState> = {}) => {
    await setState(store, sh, id, (journalState) => {
      if (journalState.owner !== owner) return false;
      Object.assign(journalState, extra, { status, owner: null });
      return true;
    }).catch(() => {});
  };
  // The snapshot of the last pause, when the adapter can restore one: read first, so that one changed at rest fails
  // the execution before anything runs.
  const kept = adapter.snapshots ? (state.snapshot ?? undefined) : undefined;
  let snapshot: SandboxSnapshot | undefined;
  let summary: JournalSummary | undefined;
  if (kept !== undefined) {
    try {
      ({ snapshot, journal: summary } = await readSnapshot(store, sh, state.executionId, kept));
    } catch (error) {
      if ((error as { code?: unknown }).code !== "INTEGRITY_VIOLATION") throw error;
      await finish("failed", { error: { code: "INTEGRITY_VIOLATION", message: (error as Error).message } });
      throw error;
    }
  }
  // From a snapshot, only the journal's events after it are read: its summary holds the entries of the calls the run
  // had open, and the calls it had answered are inside the snapshot.
  const read = await readEvents(store, sh, id, summary?.sequence ?? 0);
  let readTo = read.at(-1)?.sequence ?? summary?.sequence ?? 0;
  let journal = foldEntries(read, summary === undefined ? undefined : new Map(summary.entries));
  const toolsById = new Map(program.tools.map((tool) => [tool.id, tool]));
  const maxArgs = program.limits.maxToolInputBytes;
  let nextSeq = summary?.nextSeq ?? 1;
  let lastNow = Math.max(state.startedAt, summary?.lastNow ?? 0);
  const advance = () => {
    for (const entry of journal.values()) {
      if (entry.state === "settled") {
        nextSeq = Math.max(nextSeq, entry.seq + 1);
        lastNow = Math.max(lastNow, entry.now);
      }
    }
  };
  advance();
  /** What an approval of call `n` binds (the run's ids are the journal's, which `claim` checked against the caller's). */
  const approved = (n: number, tool: JournaledTool, inputDigest: string, expiresAt: number): ApprovedCall => ({
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
  /**
   * Whether the decision the journal holds is a person's decision on exactly the call the program makes now: the
   * approval's digest computed again from this call (the program's tool, version and these arguments) is the one the
   * person decided on, and the decision the state holds is the one recorded with it (`call.decided`). A store whose
   * rows were changed after the decision fails here, before anything is sent.
   */
  const decidedAsIs = (pending: Pending, entry: Entry, tool: JournaledTool | undefined, argsDigest: string) =>
    tool !== undefined &&
    pending.decision !== null &&
    pending.toolId === tool.id &&
    pending.version === tool.version &&
    pending.inputDigest === argsDigest &&
    pending.digest === approvalDigest(approved(pending.n, tool, argsDigest, pending.expiresAt)) &&
    entry.decided?.digest === pending.digest &&
    entry.decided.decision === pending.decision;
  /** Set when the sandbox could not restore the snapshot: the whole journal, read before the run's first call. */
  let wholeJournal: Promise<void> | undefined;
  // Without a snapshot, the journaled calls settled from the first on are answered ahead, with the run; each is still
  // checked below. (A snapshot the sandbox cannot restore has its run answered call by call.)
  const answered: SequencedCallResult[] = [];
  for (let entry = journal.get(1); snapshot === undefined && entry?.state === "settled" && entry.result !== null; ) {
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
  /** The snapshot the run continues, once the adapter said it restored it. */
  let restored: SandboxSnapshot | undefined;
  /** The snapshot of this attempt's pause, if it took one. */
  let captured: SandboxSnapshot | null = null;

  const wrapped = makeSandboxAdapter(
    {
      id: adapter.id,
      version: adapter.version,
      qualification: adapter.qualification,
      languages: adapter.languages,
      deterministic: true,
      isAvailable: () => adapter.isAvailable(),
      execute: async (request: SandboxExecuteRequest): Promise<SandboxResult> => {
        const stop = new AbortController();
        const capture = new AbortController();
        let captureDone: () => void = () => {};
        const captureSettled = new Promise<void>((resolve) => {
          captureDone = resolve;
        });
        /**
         * Stops the run; the first reason is the attempt's. A pause that keeps a snapshot stops it once the snapshot
         * was taken (or refused), and a later pause (another call that needs approval, asked in the same turn) leaves
         * that to it.
         */
        const halt = (reason: Halt, keep = false) => {
          const first = halted === null;
          halted ??= reason;
          if (first && keep) {
            capture.abort();
            void captureSettled.then(() => stop.abort());
          } else if (first || reason.kind !== "paused") stop.abort();
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
          return track(append(store, sh, id, owner, "call.settled", data).then(() => ({ result, seq, now })));
        };
        const dispatch = (n: number, toolId: string, input: unknown, argsDigest: string, journaled: boolean) =>
          track(
            (async () => {
              if (!journaled) await append(store, sh, id, owner, "call.dispatching", { n, toolId, argsDigest });
              const result = await request.tools.call(toolId, input);
              return settle(n, result);
            })(),
          );
        /** The snapshot was not restored (another build): the program runs from its start, against the whole journal. */
        const replayWhole = () => {
          wholeJournal = readEvents(store, sh, id).then(
            (events) => {
              journal = foldEntries(events);
              readTo = events.at(-1)?.sequence ?? 0;
              advance();
            },
            (error: unknown) => halt({ kind: "lost", error }),
          );
        };
        let calls = 0;
        /** The number of the program's next call: restored, the calls open at the capture come first, then new ones. */
        const numberOf = (k: number): number => {
          if (restored === undefined) return k;
          const { open } = restored;
          return k <= open.length ? (open[k - 1] as number) : restored.calls + (k - open.length);
        };
        const call = (toolId: string, input: unknown): Promise<SequencedCallResult> => {
          // An adapter that gave the snapshot no word before this call runs the program from its start.
          if (snapshot !== undefined && restored === undefined && wholeJournal === undefined) replayWhole();
          const n = numberOf(++calls);
          if (halted !== null) return never();
          return (async (): Promise<SequencedCallResult> => {
            if (wholeJournal !== undefined) {
              await wholeJournal;
              if (halted !== null) return never();
            }
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
              if (entry.state === "awaiting" && pendingCall?.n === n) {
                // The call a person decided on: sent (or refused) only if it is exactly the call they decided on.
                if (!decidedAsIs(pendingCall, entry, tool, argsDigest)) {
                  halt({ kind: "tampered" });
                  return never();
                }
                if (pendingCall.decision === "rejected") {
                  return settle(n, blockedResult("a person rejected this call"));
                }
                // Journaled as dispatched again, so that a crash from here on leaves it unknown, never repeated.
                return dispatch(n, toolId, input, argsDigest, false);
              }
              if (entry.state === "dispatching") {
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
              // Awaiting, but not the call the journal waited on: asked beside it (a `Promise.all` over several calls
              // that need approval) and decided by nobody, so nothing acted on it. It goes on as a new call: asked
              // now, in a pause of its own.
            }
            if (tool !== undefined && (await needsApproval(tool, input))) {
              const inputDigest = argsDigest;
              // The expiry, and so the digest that binds it, come from the store's clock (see `append`).
              const awaiting = await track(
                append(store, sh, id, owner, "call.awaiting", (now) => {
                  const expiresAt = now + ttlMs;
                  const digest = approvalDigest(approved(n, tool, inputDigest, expiresAt));
                  return { n, toolId, argsDigest, digest, expiresAt };
                }),
              );
              const { digest, expiresAt } = awaiting as { digest: string; expiresAt: number };
              // After many calls the paused run is kept, so that the resume need not replay them.
              const keep = adapter.snapshots && n - 1 >= snapshotMinCalls;
              halt(
                {
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
                },
                keep,
              );
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
              ...(adapter.snapshots
                ? {
                    capture: Object.freeze({
                      signal: capture.signal,
                      done: (taken: SandboxSnapshot | null) => {
                        captured = taken;
                        captureDone();
                      },
                    }),
                  }
                : {}),
              ...(snapshot === undefined
                ? {}
                : {
                    restore: Object.freeze({
                      snapshot,
                      onRestored: (yes: boolean) => {
                        // Heard once, before the first call (a later word changes nothing: see `call`).
                        if (restored !== undefined || wholeJournal !== undefined || calls > 0) return;
                        if (yes) restored = snapshot;
                        else replayWhole();
                      },
                    }),
                  }),
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
  // The snapshot this attempt started from is of no use once the journal has moved on (or ended): its data goes.
  const dropKept = async () => {
    const previous = state.snapshot;
    if (previous !== undefined && previous !== null) await dropSnapshot(store, sh, previous).catch(() => {});
  };
  /** The execution fails with INTEGRITY_VIOLATION, and its journal says why. */
  const integrity = async (message: string): Promise<AttemptOutcome> => {
    const error = { code: "INTEGRITY_VIOLATION" as const, message };
    await finish("failed", { snapshot: null, error });
    await dropKept();
    return { status: statusOf(error.code) as "failed", error, usage: outcome.usage, evidence: outcome.evidence };
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
  if (halted?.kind === "tampered") {
    return integrity(
      "the call a person decided on is not the call the program makes now (the journal changed since the decision); it was not sent",
    );
  }
  if (halted?.kind === "diverged" || (halted === null && unfinished)) {
    return integrity("the program did not replay its journal: another call at a journaled number");
  }
  if (halted?.kind === "paused") {
    const pending = halted.pending;
    const taken = captured as SandboxSnapshot | null;
    /** The journal as the snapshot's run left it (calls that were in flight at the capture settled since). */
    const summarize = async (open: readonly number[]): Promise<JournalSummary> => {
      const tail = await readEvents(store, sh, id, readTo);
      const now = foldEntries(tail, journal);
      const entries: [number, Entry][] = [];
      for (const n of open) {
        const entry = now.get(n);
        if (entry !== undefined) entries.push([n, entry]);
      }
      return { sequence: tail.at(-1)?.sequence ?? readTo, nextSeq, lastNow, entries };
    };
    const ref =
      taken === null
        ? null
        : await summarize(taken.open)
            .then((summary) => storeSnapshot(store, sh, state.executionId, program.digest, pending.n, taken, summary))
            .catch(() => null);
    await finish("waiting", { pending, fingerprint, snapshot: ref });
    await dropKept();
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
  await finish(final.status, {
    pending: null,
    fingerprint,
    snapshot: null,
    error: final.status === "succeeded" ? null : { code: final.error.code, message: final.error.message },
  });
  await dropKept();
  return final;
}

export function refusal(code: ErrorCode, message: string): AttemptOutcome {
  return {
    status: statusOf(code) as "failed",
    error: { code, message },
    usage: {},
    evidence: [],
  };
}

/** An error of the journal's store or owner as an attempt's outcome: its own code, else STORAGE_UNAVAILABLE. */
export function fromError(error: unknown): AttemptOutcome {
  if (error instanceof AirlockError) return refusal(error.code, error.message);
  return refusal("STORAGE_UNAVAILABLE", "the call journal could not be read or written");
}
