/**
 * Runs a program of the code-mode executor on any launcher of the sandbox core (worker pool, protocol). The
 * program's source is wrapped so that its return value is turned into JSON text inside the VM: a value that is not
 * JSON (a BigInt, a cycle, `undefined`, a function, a number that is not finite, a Map or other object that is not a
 * plain object or array, `undefined` or a function in an array) is reported as `invalid_output` rather than turned
 * into other data (`NaN` into `null`, a Set into `{}`); `undefined` object members are left out, as JSON does, and
 * values with `toJSON` (a Date) are what it returns. A text over the program's
 * `maxOutputBytes` is cut to one character more than the limit before it leaves the VM, so the host never holds an
 * oversized output. The executor checks the text again; a program that forges the wrapper's answer only fails itself.
 */
import type { SandboxDeterministicRun, SandboxExecuteRequest, SandboxResult } from "../code-mode/adapter.ts";
import type { Launcher } from "../host/launcher.ts";
import { runProgram } from "../host/program.ts";

/** The VM's own wall-clock deadline trails the executor's, which is the one that ends an execution. */
export const VM_WALL_SLACK_MS = 1_000;

/**
 * The intrinsics the wrapper uses are captured before the program runs. The wrapper and the program share line 1, so
 * line numbers in the program's stack stay exact; the program's source is evaluated outside the wrapper's scope.
 */
export function wrapProgramSource(source: string, maxOutputBytes: number): string {
  return (
    `((stringify, isFinite, isArray, protoOf, plain, program) => { ` +
    `const strict = function (key, v) { ` +
    `if (typeof v === "number") { if (!isFinite(v)) throw 0; } ` +
    `else if (v === undefined || typeof v === "function" || typeof v === "symbol") { if (isArray(this)) throw 0; } ` +
    `else if (typeof v === "object" && v !== null && !isArray(v)) { const p = protoOf(v); if (p !== plain && p !== null) throw 0; } ` +
    `return v; }; ` +
    `return async (input, tools) => { const value = await program(input, tools); let json; ` +
    `try { json = stringify(value, strict); } catch { return { r: "not_json" }; } ` +
    `if (typeof json !== "string") return { r: "not_json" }; ` +
    `return json.length > ${maxOutputBytes} ? { j: json.slice(0, ${maxOutputBytes + 1}) } : { j: json }; }; })` +
    `(JSON.stringify, Number.isFinite, Array.isArray, Object.getPrototypeOf, Object.prototype, ${source}\n)`
  );
}

function replayable(run: SandboxDeterministicRun) {
  return {
    startedAt: run.startedAt,
    seed: run.seed,
    sequencedCall: async (toolId: string, input: unknown) => {
      const { result, seq, now } = await run.call(toolId, input);
      return { value: result, seq, now };
    },
    onFingerprint: (fingerprint: string) => run.onFingerprint?.(fingerprint),
  };
}

export async function executeOnLauncher(launcher: Launcher, request: SandboxExecuteRequest): Promise<SandboxResult> {
  const { program } = request;
  if (program.language !== "javascript") return { status: "failed", reason: "unsupported_program" };
  const { limits } = program;
  const result = await runProgram(launcher, {
    source: wrapProgramSource(program.source, limits.maxOutputBytes),
    inputJson: request.inputJson,
    memoryLimitBytes: limits.memoryBytes,
    cpuLimitMs: limits.cpuMillis,
    wallTimeMs: limits.wallTimeMillis + VM_WALL_SLACK_MS,
    signal: request.signal,
    call: (toolId, input, signal) => request.tools.call(toolId, input, signal),
    ...(request.deterministic === undefined ? {} : { deterministic: replayable(request.deterministic) }),
  });
  if (result.status === "succeeded") {
    const envelope = result.output as { j?: unknown; r?: unknown } | null;
    if (typeof envelope === "object" && envelope !== null && typeof envelope.j === "string") {
      return { status: "succeeded", outputJson: envelope.j };
    }
    return { status: "failed", reason: "invalid_output" };
  }
  switch (result.reason) {
    case "program_error":
      return result.programError === undefined
        ? { status: "failed", reason: "program_error" }
        : { status: "failed", reason: "program_error", programError: result.programError };
    case "cpu_limit":
    case "memory_limit":
      return { status: "failed", reason: result.reason };
    default:
      // timeout, aborted, sandbox_error: the executor knows why it stopped the run; anything else is the sandbox's.
      return { status: "failed", reason: "sandbox_error" };
  }
}
