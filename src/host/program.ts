/**
 * Runs one program (`async (input, tools) => output`) on a launcher: the primitive that governed code mode builds on.
 * The program sees standard JavaScript and `tools.call(toolId, input)`, which resolves to whatever `call` returns.
 */
import { type CallOutcome, type PreAnswer, type RunEndReason, runConfiguration } from "../engine/protocol.ts";
import { type CallHandler, Execution, encodeOutcome } from "./execution.ts";
import type { Launcher } from "./launcher.ts";

export interface ProgramRunOptions {
  /** A function expression, `async (input, tools) => ...`. */
  source: string;
  /** The program's input, already validated: JSON text. */
  inputJson: string;
  memoryLimitBytes: number;
  /** Time the program may compute; waiting on tools does not count. */
  cpuLimitMs: number;
  /** Wall-clock deadline of the whole run, tools included. */
  wallTimeMs: number;
  signal?: AbortSignal;
  /** Answers `tools.call(toolId, input)`; the resolved value (JSON) is what the program receives. */
  call(toolId: string, input: unknown, signal: AbortSignal): Promise<unknown>;
  /**
   * A replayable run: the clock starts at `startedAt` and moves only to the `now` of each result, randomness is
   * seeded, and results are applied in their `seq` order (1, 2, ...), so the same results give the same calls. Calls
   * are then answered by `sequencedCall`, not `call`.
   */
  deterministic?: {
    startedAt: number;
    seed: number;
    sequencedCall(toolId: string, input: unknown): Promise<{ value: unknown; seq: number; now: number }>;
    /** The engine's fingerprint (its versions, prelude hash and memory limit): a replay must run on the same. */
    onFingerprint?(fingerprint: string): void;
    /**
     * Results known before the run (a resume's journaled calls): result i answers call i + 1. They travel with the
     * request (up to PRE_ANSWER_MAX_CHARS), so the VM does not wait for the host on each; `sequencedCall` is still
     * made for every call, in order, and must give the same number, or the run stops.
     */
    answered?: readonly { value: unknown; seq: number; now: number }[];
  };
}

/** Characters of JSON results a run request carries as answers at most; later calls are answered one by one. */
export const PRE_ANSWER_MAX_CHARS = 4 * 1024 * 1024;

/** The answers of a request: the first results that encode, up to PRE_ANSWER_MAX_CHARS in all. */
function preAnswers(answered: readonly { value: unknown; seq: number; now: number }[] | undefined): PreAnswer[] | null {
  if (answered === undefined || answered.length === 0) return null;
  const answers: PreAnswer[] = [];
  let chars = 0;
  for (const { value, seq, now } of answered) {
    let outcome: CallOutcome;
    try {
      outcome = encodeOutcome({ ok: true, value });
    } catch {
      // Answered by its own call, which fails the run the same way.
      break;
    }
    chars += 64 + (outcome.ok ? (outcome.value?.length ?? 0) : 0);
    if (chars > PRE_ANSWER_MAX_CHARS) break;
    answers.push({ outcome, seq, now });
  }
  return answers.length === 0 ? null : answers;
}

/**
 * Calls one program run may make in the VM. Code mode answers calls past a program's own `maxToolCalls` itself
 * (LIMIT_EXCEEDED, without the broker); this bounds what a program can send at all.
 */
export const PROGRAM_MAX_CALLS = 100_000;

/** Every program runs in the same environment: no tools object of the script environment, no globals. */
export const PROGRAM_CONFIGURATION = runConfiguration({ tools: [], globals: [], deterministic: false, program: true });
const DETERMINISTIC_PROGRAM_CONFIGURATION = runConfiguration({
  tools: [],
  globals: [],
  deterministic: true,
  program: true,
});

/** What a replayable program run offers: `tools.call` with any tool id (the caller checks it), and no globals. */
const PROGRAM_DECLARED = Object.freeze({
  tools: Object.freeze({ has: () => true }),
  globals: Object.freeze({ has: () => false }),
});

export type ProgramFailureReason =
  | "program_error"
  /** It waits on a promise nothing can settle: the engine says so, and the program threw nothing. */
  | "stalled"
  | "cpu_limit"
  | "memory_limit"
  | "timeout"
  | "aborted"
  | "sandbox_error";

export type ProgramRunResult =
  | { status: "succeeded"; output: unknown; cpuMs: number }
  | {
      status: "failed";
      reason: ProgramFailureReason;
      programError?: { name: string; message: string };
      message: string;
    };

export function runProgram(launcher: Launcher, options: ProgramRunOptions): Promise<ProgramRunResult> {
  const replay = options.deterministic;
  const answers = preAnswers(replay?.answered);
  let execution: Execution | undefined;
  const handler: CallHandler =
    replay === undefined
      ? {
          kind: "tools",
          resolve: (target, toolId) =>
            target === "tool"
              ? { name: toolId, execute: (input, { signal }) => options.call(toolId, input, signal) }
              : undefined,
        }
      : {
          kind: "deterministic",
          declared: PROGRAM_DECLARED,
          onStarted: (fingerprint) => replay.onFingerprint?.(fingerprint),
          onCall: ({ id, name, args }) => {
            replay.sequencedCall(name, args).then(
              ({ value, seq, now }) => {
                // A run that ended meanwhile (stopped, timed out) takes no more results.
                if (execution === undefined || execution.finished) return;
                const answer = answers?.[id - 1];
                if (answer !== undefined) {
                  // The VM applied the request's answer; the caller must have given that very result.
                  if (answer.seq !== seq) execution.stop("aborted", "a call was answered ahead with another result");
                  return;
                }
                try {
                  execution.deliver(seq, now, id, { ok: true, value });
                } catch {
                  // Numbers that cannot be applied (a journal that does not fit the run) end it, never the host.
                  execution.stop("aborted", "a result could not be applied in sequence");
                }
              },
              () => {},
            );
          },
        };
  execution = new Execution(launcher, {
    request: {
      code: options.source,
      configuration: replay === undefined ? PROGRAM_CONFIGURATION : DETERMINISTIC_PROGRAM_CONFIGURATION,
      store: {},
      memoryLimitBytes: options.memoryLimitBytes,
      deadline: Date.now() + options.wallTimeMs,
      cpuLimitMs: options.cpuLimitMs,
      interruptBudget: null,
      maxCalls: PROGRAM_MAX_CALLS,
      deterministic: replay === undefined ? null : { startedAt: replay.startedAt, seed: replay.seed },
      answers,
      program: { input: options.inputJson },
    },
    handler,
    signal: options.signal,
    timeoutMs: options.wallTimeMs,
    onEnd: () => {},
  });
  return execution.result.then((result): ProgramRunResult => {
    if (result.ok) return { status: "succeeded", output: result.value, cpuMs: 0 };
    const { name, message } = result.error;
    const reason = FAILURE_REASONS[execution.reason ?? "vm_failed"];
    if (reason === "program_error") {
      return { status: "failed", reason, programError: { name: name ?? "Error", message }, message };
    }
    return { status: "failed", reason, message };
  });
}

/** How code mode names the way a run ended (without reading error texts). */
const FAILURE_REASONS: Record<RunEndReason, ProgramFailureReason> = {
  returned: "sandbox_error",
  threw: "program_error",
  stalled: "stalled",
  cpu_limit: "cpu_limit",
  memory_limit: "memory_limit",
  deadline: "timeout",
  stopped: "aborted",
  vm_failed: "sandbox_error",
};
