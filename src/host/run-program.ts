/**
 * Runs one program (`async (input, tools) => output`) on a launcher: the primitive that governed code mode builds on.
 * The program sees standard JavaScript and `tools.call(toolId, input)`, which resolves to whatever `call` returns.
 */

import {
  type CallOutcome,
  checkSnapshot,
  type PreAnswer,
  type RunEndReason,
  runConfiguration,
  type VmSnapshot,
} from "../engine/protocol.ts";
import { base64ToBytes, bytesToBase64 } from "../platform/platform.ts";
import { type CallHandler, Execution, encodeOutcome } from "./execution.ts";
import { type Launcher, launchRequest } from "./launcher.ts";

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
    /**
     * Once `signal` aborts, the run is captured between two of its turns (where it waits on its calls) and `done` gets
     * the snapshot, or null when the VM side took none (see SnapshotRefusal) or the run ended first; the run goes on.
     */
    capture?: { signal: AbortSignal; done(snapshot: ProgramSnapshot | null): void };
    /**
     * A run captured before: the VM side continues it from there if it can (its key), and `onRestored` hears which,
     * before any call. Restored, the calls open at the capture come again first, in order (`sequencedCall`), then new
     * calls numbered from `snapshot.calls + 1`, and `answered` is not used; else the program runs from its start.
     */
    restore?: { snapshot: ProgramSnapshot; onRestored(restored: boolean): void };
  };
}

/**
 * A program run captured where it waited on its calls: its key (the VM build that can continue it), its calls so far
 * and those open then, and the snapshot itself as bytes (see snapshotBytes).
 */
export interface ProgramSnapshot {
  readonly key: string;
  readonly calls: number;
  readonly open: readonly number[];
  readonly data: Uint8Array;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();
/** Bytes of the header's length at the start of a snapshot's bytes. */
const HEADER_LENGTH_BYTES = 4;

/**
 * A snapshot as bytes: the length of its header (4 bytes, big-endian), the header (the protocol's VmSnapshot as UTF-8
 * JSON, without its memory's bytes), then those bytes as they are: the pages compress better than their base64.
 */
function snapshotBytes(snapshot: VmSnapshot): Uint8Array | undefined {
  const pages = base64ToBytes(snapshot.memory.data);
  if (pages === undefined) return undefined;
  const header = encoder.encode(JSON.stringify({ ...snapshot, memory: { ...snapshot.memory, data: "" } }));
  const bytes = new Uint8Array(HEADER_LENGTH_BYTES + header.byteLength + pages.byteLength);
  new DataView(bytes.buffer).setUint32(0, header.byteLength);
  bytes.set(header, HEADER_LENGTH_BYTES);
  bytes.set(pages, HEADER_LENGTH_BYTES + header.byteLength);
  return bytes;
}

function programSnapshotOf(snapshot: VmSnapshot): ProgramSnapshot | null {
  const data = snapshotBytes(snapshot);
  if (data === undefined) return null;
  return Object.freeze({
    key: snapshot.key,
    calls: snapshot.run.calls,
    open: Object.freeze(snapshot.run.open.map((call) => call.id)),
    data,
  });
}

/** The protocol's snapshot of a ProgramSnapshot, or undefined when its bytes are not one that agrees with it. */
function vmSnapshotOf(snapshot: ProgramSnapshot): VmSnapshot | undefined {
  const { data } = snapshot;
  let parsed: VmSnapshot;
  try {
    const length = new DataView(data.buffer, data.byteOffset, data.byteLength).getUint32(0);
    const header = JSON.parse(decoder.decode(data.subarray(HEADER_LENGTH_BYTES, HEADER_LENGTH_BYTES + length)));
    const pages = data.subarray(HEADER_LENGTH_BYTES + length);
    parsed = { ...header, memory: { ...header.memory, data: bytesToBase64(pages) } };
    checkSnapshot(parsed, "the snapshot");
  } catch {
    return undefined;
  }
  const open = parsed.run.open.map((call) => call.id);
  const agrees =
    parsed.key === snapshot.key &&
    parsed.run.calls === snapshot.calls &&
    open.length === snapshot.open.length &&
    open.every((id, i) => id === snapshot.open[i]);
  return agrees ? parsed : undefined;
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
  const restore = replay?.restore === undefined ? null : (vmSnapshotOf(replay.restore.snapshot) ?? null);
  let execution: Execution | undefined;
  /** The VM continues the snapshot: the request's answers are for a run from the start. */
  let restored = false;
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
          onStarted: (fingerprint, fromSnapshot) => {
            restored = fromSnapshot;
            replay.restore?.onRestored(fromSnapshot);
            replay.onFingerprint?.(fingerprint);
          },
          onCall: ({ id, name, args }) => {
            replay.sequencedCall(name, args).then(
              ({ value, seq, now }) => {
                // A run that ended meanwhile (stopped, timed out) takes no more results.
                if (execution === undefined || execution.finished) return;
                const answer = restored ? undefined : answers?.[id - 1];
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
    request: launchRequest({
      code: options.source,
      configuration: replay === undefined ? PROGRAM_CONFIGURATION : DETERMINISTIC_PROGRAM_CONFIGURATION,
      memoryLimitBytes: options.memoryLimitBytes,
      deadline: Date.now() + options.wallTimeMs,
      cpuLimitMs: options.cpuLimitMs,
      maxCalls: PROGRAM_MAX_CALLS,
      deterministic: replay === undefined ? null : { startedAt: replay.startedAt, seed: replay.seed },
      answers,
      restore,
      program: { input: options.inputJson },
    }),
    handler,
    signal: options.signal,
    timeoutMs: options.wallTimeMs,
    onEnd: () => {},
  });
  const capture = replay?.capture;
  if (capture !== undefined) {
    const started = execution;
    const onCapture = () =>
      started.capture().then((snapshot) => capture.done(snapshot === null ? null : programSnapshotOf(snapshot)));
    if (capture.signal.aborted) void onCapture();
    else capture.signal.addEventListener("abort", () => void onCapture(), { once: true });
  }
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
