/**
 * Outcomes of an execution: their shape, the usage they carry, and how a sandbox's answer becomes one (its failure
 * reason mapped to a public code, its output checked as JSON within limits and against the output schema).
 */
import { type JsonValue, parseJson, tryCopyJson } from "../json/index.ts";
import { type ErrorCode, type FailureStatus, type OutcomeError, statusOf } from "../tools/errors.ts";
import { parseWithSchema } from "../tools/validate.ts";
import { type ProgramErrorInfo, SANDBOX_FAILURE_REASONS, type SandboxResult } from "./adapter.ts";
import type { AnyCodeProgram } from "./program.ts";

/** Characters of `programError.name` and `programError.message`. */
export const MAX_PROGRAM_ERROR_NAME_CHARS = 128;
export const MAX_PROGRAM_ERROR_MESSAGE_CHARS = 1_024;

export interface CodeUsage {
  /** Calls handed to the broker. */
  readonly toolCalls: number;
  /** Calls whose outcome is unknown. */
  readonly unknownCalls: number;
  /** Cost of calls whose tools ran and answered. */
  readonly knownCostMicros: number;
  /** Cost of calls whose outcome is unknown. */
  readonly unknownCostMicros: number;
  /** The program's maximum possible cost: `maxToolCalls` times its most expensive tool. */
  readonly maximumCostMicros: number;
}

export type CodeExecutionOutcome<T> =
  | { readonly status: "succeeded"; readonly output: T; readonly usage: CodeUsage }
  | {
      readonly status: FailureStatus;
      readonly error: OutcomeError;
      /** Set when the program itself threw: its own text, cut to 128 and 1,024 characters. Treat it as output. */
      readonly programError?: ProgramErrorInfo;
      readonly usage: CodeUsage;
    };

/** `text` cut to `max` UTF-16 code units, never leaving half a surrogate pair. */
export function clip(text: string, max: number): string {
  if (text.length <= max) return text;
  let cut = text.slice(0, max);
  const last = cut.charCodeAt(cut.length - 1);
  if (last >= 0xd800 && last <= 0xdbff) cut = cut.slice(0, -1);
  return cut;
}

export function clipProgramError(value: unknown): ProgramErrorInfo | undefined {
  if (typeof value !== "object" || value === null) return undefined;
  const { name, message } = value as { name?: unknown; message?: unknown };
  return Object.freeze({
    name: clip(typeof name === "string" ? name : "Error", MAX_PROGRAM_ERROR_NAME_CHARS),
    message: clip(typeof message === "string" ? message : "", MAX_PROGRAM_ERROR_MESSAGE_CHARS),
  });
}

export function failed(
  code: ErrorCode,
  message: string,
  programError: ProgramErrorInfo | undefined,
  usage: CodeUsage,
): CodeExecutionOutcome<never> {
  const error = Object.freeze({ code, message });
  return Object.freeze(
    programError === undefined
      ? { status: statusOf(code), error, usage }
      : { status: statusOf(code), error, programError, usage },
  );
}

/**
 * The outcome of a sandbox's answer (the run was not stopped and no call is unknown). `usage` is read when the
 * outcome is made, after the output schema ran.
 */
export async function outcomeOfAnswer(
  program: AnyCodeProgram,
  result: SandboxResult | undefined,
  adapterFailed: boolean,
  usage: () => CodeUsage,
): Promise<CodeExecutionOutcome<unknown>> {
  const limits = program.limits;
  const fail = (code: ErrorCode, message: string, programError?: ProgramErrorInfo) =>
    failed(code, message, programError, usage());
  if (adapterFailed || result === undefined || typeof result !== "object" || result === null) {
    return fail("TOOL_FAILED", "the sandbox failed or gave no answer");
  }
  if (result.status === "failed") {
    const programError = clipProgramError(result.programError);
    const reason =
      result.reason === undefined
        ? programError !== undefined
          ? "program_error"
          : "sandbox_error"
        : SANDBOX_FAILURE_REASONS.includes(result.reason)
          ? result.reason
          : "sandbox_error";
    switch (reason) {
      case "program_error":
        return fail("TOOL_FAILED", "the program threw an error (see programError)", programError);
      case "cpu_limit":
        return fail("LIMIT_EXCEEDED", `the program computed longer than its limit cpuMillis of ${limits.cpuMillis} ms`);
      case "memory_limit":
        return fail(
          "LIMIT_EXCEEDED",
          `the program ran out of memory at its limit memoryBytes of ${limits.memoryBytes} bytes`,
        );
      case "invalid_output":
        return fail("INVALID_OUTPUT", "the program returned a value that is not JSON");
      case "unsupported_program":
        return fail("UNSUPPORTED_PROFILE", "the sandbox adapter cannot run this program");
      default:
        return fail("TOOL_FAILED", "the sandbox failed");
    }
  }
  if (result.status !== "succeeded") return fail("TOOL_FAILED", "the sandbox gave an answer Airlock cannot read");

  // ---- output: JSON within limits, then the output schema ----
  const bounds = { maxBytes: limits.maxOutputBytes };
  let output: JsonValue;
  try {
    if ("outputJson" in result) {
      if (typeof result.outputJson !== "string")
        return fail("TOOL_FAILED", "the sandbox gave an answer Airlock cannot read");
      output = parseJson(result.outputJson, bounds).value;
    } else {
      const copied = tryCopyJson(result.output, bounds);
      if (!copied.ok) throw copied.error;
      output = copied.json.value;
    }
  } catch (error) {
    const { code, message } = error as { code?: string; message?: string };
    if (code === "LIMIT_EXCEEDED") {
      return fail(
        "LIMIT_EXCEEDED",
        `the program's output breaks a limit (maxOutputBytes ${limits.maxOutputBytes}): ${message}`,
      );
    }
    return fail("INVALID_OUTPUT", "the program returned a value that is not JSON");
  }
  const parsed = await parseWithSchema(program.output, output);
  if (!parsed.ok) return fail("INVALID_OUTPUT", "the program's output does not match its output schema");
  return Object.freeze({ status: "succeeded" as const, output: parsed.value, usage: usage() });
}
