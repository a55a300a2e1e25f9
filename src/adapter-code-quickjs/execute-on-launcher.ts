/**
 * Runs a program of the code-mode executor on any launcher of the sandbox core (worker pool, protocol). QuickJS runs
 * JavaScript: a TypeScript program runs as `program.javascript`, its types erased when it was defined; a program with
 * approved imports is `unsupported_program` and never starts.
 *
 * The program's source is wrapped so that, inside the VM:
 * - its return value is turned into JSON text: a value that is not JSON (a BigInt, a cycle, `undefined`, a function,
 *   a number that is not finite, a Map or other object that is not a plain object or array, `undefined` or a function
 *   in an array) is reported as `invalid_output` rather than turned into other data (`NaN` into `null`, a Set into
 *   `{}`); `undefined` object members are left out, as JSON does, and values with `toJSON` (a Date) are what it
 *   returns. A text over the program's `maxOutputBytes` is cut to one character more than the limit before it leaves
 *   the VM, so the host never holds an oversized output;
 * - what it throws is reported as `programError` from plain strings only: a thrown string is the message; of a
 *   thrown object, its `name` and `message` when they are strings (`Error` and an empty message otherwise, also when
 *   reading them throws); another thrown primitive is its `String()`. Deep recursion, in the program or in a
 *   built-in, is the catchable `InternalError: stack overflow` of Mayura's contract. An `InternalError` the program
 *   throws is left to the engine, which alone knows whether an allocation was really refused.
 * The executor checks every envelope again; a program that forges the wrapper's answer only fails itself.
 */
import type { SandboxDeterministicRun, SandboxExecuteRequest, SandboxResult } from "../code-mode/adapter.ts";
import { MAX_PROGRAM_ERROR_MESSAGE_CHARS, MAX_PROGRAM_ERROR_NAME_CHARS } from "../code-mode/outcome.ts";
import type { CodeLanguage } from "../code-mode/program.ts";
import type { Launcher } from "../host/launcher.ts";
import { runProgram } from "../host/run-program.ts";

/** The languages `executeOnLauncher` runs: JavaScript, and TypeScript as its JavaScript with the types erased. */
export const QUICKJS_LANGUAGES: readonly CodeLanguage[] = Object.freeze(["javascript", "typescript"]);

/** The VM's own wall-clock deadline trails the executor's, which is the one that ends an execution. */
export const VM_WALL_SLACK_MS = 1_000;

/** QuickJS-NG's error for a call stack past its limit, which Mayura's contract names `InternalError: stack overflow`. */
const STACK_OVERFLOW_MESSAGE = "Maximum call stack size exceeded";

/**
 * The intrinsics the wrapper uses are captured before the program runs. The wrapper and the program share line 1, so
 * line numbers in the program's stack stay exact; the program's source is evaluated outside the wrapper's scope.
 * Envelopes: `{ j }` the output's JSON text, `{ r: "not_json" }`, `{ e: [name, message] }` what the program threw.
 */
export function wrapProgramSource(source: string, maxOutputBytes: number): string {
  return (
    `((stringify, isFinite, isArray, protoOf, plain, internal, range, program) => { ` +
    `const strict = function (key, v) { ` +
    `if (typeof v === "number") { if (!isFinite(v)) throw 0; } ` +
    `else if (v === undefined || typeof v === "function" || typeof v === "symbol") { if (isArray(this)) throw 0; } ` +
    `else if (typeof v === "object" && v !== null && !isArray(v)) { const p = protoOf(v); if (p !== plain && p !== null) throw 0; } ` +
    `return v; }; ` +
    `const inherits = (e, proto) => { try { for (let p = protoOf(e); p !== null; p = protoOf(p)) if (p === proto) return true; } catch {} return false; }; ` +
    `const text = (e, key) => { try { const v = e[key]; return typeof v === "string" ? v : undefined; } catch { return undefined; } }; ` +
    `const overflow = (e) => typeof e === "object" && e !== null && inherits(e, range) && text(e, "message") === ${JSON.stringify(STACK_OVERFLOW_MESSAGE)}; ` +
    `const threw = (e) => { let name = "Error", message = ""; ` +
    `if (overflow(e)) { name = "InternalError"; message = "stack overflow"; } ` +
    `else if (typeof e === "string") message = e; ` +
    `else if ((typeof e === "object" && e !== null) || typeof e === "function") { name = text(e, "name") ?? "Error"; message = text(e, "message") ?? ""; } ` +
    `else { try { message = "" + (typeof e === "symbol" ? "Symbol" : e); } catch {} } ` +
    `return { e: [name.slice(0, ${MAX_PROGRAM_ERROR_NAME_CHARS + 1}), message.slice(0, ${MAX_PROGRAM_ERROR_MESSAGE_CHARS + 1})] }; }; ` +
    `const own = (e) => typeof e === "object" && e !== null && !overflow(e) && inherits(e, internal); ` +
    `return async (input, tools) => { let value; ` +
    `try { value = await program(input, tools); } catch (e) { if (own(e)) throw e; return threw(e); } ` +
    `let json; ` +
    `try { json = stringify(value, strict); } catch (e) { if (overflow(e)) return threw(e); if (own(e)) throw e; return { r: "not_json" }; } ` +
    `if (typeof json !== "string") return { r: "not_json" }; ` +
    `return json.length > ${maxOutputBytes} ? { j: json.slice(0, ${maxOutputBytes + 1}) } : { j: json }; }; })` +
    `(JSON.stringify, Number.isFinite, Array.isArray, Object.getPrototypeOf, Object.prototype, InternalError.prototype, RangeError.prototype, ${source}\n)`
  );
}

/** The program error of a `{ e: [name, message] }` envelope, or undefined when it is not one. */
function thrownOf(envelope: { e?: unknown }): { name: string; message: string } | undefined {
  const thrown = envelope.e;
  if (!Array.isArray(thrown) || thrown.length !== 2) return undefined;
  const [name, message] = thrown as unknown[];
  return typeof name === "string" && typeof message === "string" ? { name, message } : undefined;
}

/** The host's replayable run, answered by the executor's sequenced calls. */
function replayable(run: SandboxDeterministicRun) {
  return {
    startedAt: run.startedAt,
    seed: run.seed,
    sequencedCall: async (toolId: string, input: unknown) => {
      const { result, seq, now } = await run.call(toolId, input);
      return { value: result, seq, now };
    },
    onFingerprint: (fingerprint: string) => run.onFingerprint?.(fingerprint),
    answered: run.answered?.map(({ result, seq, now }) => ({ value: result, seq, now })),
    ...(run.capture === undefined ? {} : { capture: run.capture }),
    ...(run.restore === undefined ? {} : { restore: run.restore }),
  };
}

export async function executeOnLauncher(launcher: Launcher, request: SandboxExecuteRequest): Promise<SandboxResult> {
  const { program } = request;
  // A request made without `javascript` (by hand, not by the executor) runs only if its source is JavaScript.
  const javascript =
    typeof program.javascript === "string"
      ? program.javascript
      : program.language === "javascript"
        ? program.source
        : undefined;
  // Programs here import nothing.
  if (javascript === undefined || (program.approvedImports?.length ?? 0) > 0) {
    return { status: "failed", reason: "unsupported_program" };
  }
  const { limits } = program;
  const result = await runProgram(launcher, {
    source: wrapProgramSource(javascript, limits.maxOutputBytes),
    inputJson: request.inputJson,
    memoryLimitBytes: limits.memoryBytes,
    cpuLimitMs: limits.cpuMillis,
    wallTimeMs: limits.wallTimeMillis + VM_WALL_SLACK_MS,
    signal: request.signal,
    call: (toolId, input, signal) => request.tools.call(toolId, input, signal),
    ...(request.deterministic === undefined ? {} : { deterministic: replayable(request.deterministic) }),
  });
  if (result.status === "succeeded") {
    const envelope = result.output as { j?: unknown; e?: unknown } | null;
    if (typeof envelope === "object" && envelope !== null) {
      if (typeof envelope.j === "string") return { status: "succeeded", outputJson: envelope.j };
      const programError = thrownOf(envelope);
      if (programError !== undefined) return { status: "failed", reason: "program_error", programError };
    }
    return { status: "failed", reason: "invalid_output" };
  }
  switch (result.reason) {
    case "program_error":
      return result.programError === undefined
        ? { status: "failed", reason: "program_error" }
        : { status: "failed", reason: "program_error", programError: result.programError };
    case "stalled":
      // A program error, with nothing the program threw to report.
      return { status: "failed", reason: "program_error" };
    case "cpu_limit":
    case "memory_limit":
      return { status: "failed", reason: result.reason };
    default:
      // timeout, aborted, sandbox_error: the executor knows why it stopped the run; anything else is the sandbox's.
      return { status: "failed", reason: "sandbox_error" };
  }
}
