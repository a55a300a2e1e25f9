/**
 * Runs one program (`async (input, tools) => output`) on a launcher: the primitive that governed code mode builds on.
 * The program sees standard JavaScript and `tools.call(toolId, input)`, which resolves to whatever `call` returns.
 */
import { CPU_LIMIT_ERROR, runConfiguration } from "../engine/protocol.ts";
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

/** Every program runs in the same environment: no tools object of the script environment, no globals. */
export const PROGRAM_CONFIGURATION = runConfiguration({ tools: [], globals: [], deterministic: false, program: true });

export type ProgramFailureReason =
  | "program_error"
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
    const { kind, name, message } = result.error;
    if (kind === "timeout") {
      return name === CPU_LIMIT_ERROR
        ? { status: "failed", reason: "cpu_limit", message }
        : { status: "failed", reason: "timeout", message };
    }
    if (kind === "aborted") return { status: "failed", reason: "aborted", message };
    if (kind === "sandbox") return { status: "failed", reason: "sandbox_error", message };
    if (name === "InternalError" && message === "out of memory")
      return { status: "failed", reason: "memory_limit", message };
    return { status: "failed", reason: "program_error", programError: { name: name ?? "Error", message }, message };
  });
}
