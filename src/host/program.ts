/**
 * Runs one program (`async (input, tools) => output`) on a launcher: the primitive that governed code mode builds on.
 * The program sees standard JavaScript and `tools.call(toolId, input)`, which resolves to whatever `call` returns.
 */
import { type RunEndReason, runConfiguration } from "../engine/protocol.ts";
import { Execution } from "./execution.ts";
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
}

/**
 * Calls one program run may make in the VM. Code mode answers calls past a program's own `maxToolCalls` itself
 * (LIMIT_EXCEEDED, without the broker); this bounds what a program can send at all.
 */
export const PROGRAM_MAX_CALLS = 100_000;

/** Every program runs in the same environment: no tools object of the script environment, no globals. */
export const PROGRAM_CONFIGURATION = runConfiguration({ tools: [], globals: [], deterministic: false, program: true });

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
  const execution = new Execution(launcher, {
    request: {
      code: options.source,
      configuration: PROGRAM_CONFIGURATION,
      store: {},
      memoryLimitBytes: options.memoryLimitBytes,
      deadline: Date.now() + options.wallTimeMs,
      cpuLimitMs: options.cpuLimitMs,
      interruptBudget: null,
      maxCalls: PROGRAM_MAX_CALLS,
      deterministic: null,
      program: { input: options.inputJson },
    },
    handler: {
      kind: "tools",
      resolve: (target, toolId) =>
        target === "tool"
          ? { name: toolId, execute: (input, { signal }) => options.call(toolId, input, signal) }
          : undefined,
    },
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
