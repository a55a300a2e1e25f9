/**
 * Outcomes of an execution: their shape, the usage they carry, and how a sandbox's answer becomes one (its failure
 * reason mapped to a public code, its output checked as JSON within limits and against the output schema).
 */
import { JsonBoundsError, type JsonValue, parseJson, tryCopyJson } from "../json/index.ts";
import { type ErrorCode, type FailureStatus, type OutcomeError, statusOf } from "../tools/errors.ts";
import { parseWithSchema } from "../tools/validate.ts";
import { type ProgramErrorInfo, SANDBOX_FAILURE_REASONS, type SandboxFailureReason } from "./adapter.ts";
import type { ExecutionEvidence } from "./evidence.ts";
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
  | {
      readonly status: "succeeded";
      readonly output: T;
      readonly usage: CodeUsage;
      /** A receipt for every call handed to the broker, in the order they were. */
      readonly evidence: readonly ExecutionEvidence[];
    }
  | {
      readonly status: FailureStatus;
      readonly error: OutcomeError;
      /** Set when the program itself threw: its own text, cut to 128 and 1,024 characters. Treat it as output. */
      readonly programError?: ProgramErrorInfo;
      readonly usage: CodeUsage;
      readonly evidence: readonly ExecutionEvidence[];
    };

/** The evidence of an execution that handed no call to the broker. */
export const NO_EVIDENCE: readonly ExecutionEvidence[] = Object.freeze([]);

/** `text` cut to `max` UTF-16 code units, never leaving half a surrogate pair. */
export function clip(text: string, max: number): string {
  if (text.length <= max) return text;
  let cut = text.slice(0, max);
  const last = cut.charCodeAt(cut.length - 1);
  if (last >= 0xd800 && last <= 0xdbff) cut = cut.slice(0, -1);
  return cut;
}

export function failed(
  code: ErrorCode,
  message: string,
  programError: ProgramErrorInfo | undefined,
  usage: CodeUsage,
  evidence: readonly ExecutionEvidence[] = NO_EVIDENCE,
): CodeExecutionOutcome<never> {
  const error = Object.freeze({ code, message });
  return Object.freeze(
    programError === undefined
      ? { status: statusOf(code), error, usage, evidence }
      : { status: statusOf(code), error, programError, usage, evidence },
  );
}

/** A sandbox's answer as the executor admitted it: exact plain data, read once. */
export type AdmittedAnswer =
  | { readonly status: "succeeded"; readonly output: unknown }
  | { readonly status: "succeeded"; readonly outputJson: string }
  | {
      readonly status: "failed";
      readonly reason: SandboxFailureReason | undefined;
      readonly programError: ProgramErrorInfo | undefined;
    };

/**
 * The own fields of a plain object whose keys are all in `allowed` and are all data properties (read without running
 * any getter), or undefined for anything else: a class instance, a proxy, an accessor, a symbol or unknown key.
 */
function plainFields(value: unknown, allowed: readonly string[]): Record<string, unknown> | undefined {
  if (typeof value !== "object" || value === null) return undefined;
  try {
    const proto = Object.getPrototypeOf(value);
    if (proto !== Object.prototype && proto !== null) return undefined;
    const descriptors = Object.getOwnPropertyDescriptors(value);
    const fields: Record<string, unknown> = Object.create(null);
    for (const key of Reflect.ownKeys(descriptors)) {
      const descriptor = descriptors[key as string] as PropertyDescriptor;
      if (typeof key !== "string" || !allowed.includes(key) || !("value" in descriptor) || !descriptor.enumerable) {
        return undefined;
      }
      fields[key] = descriptor.value;
    }
    return fields;
  } catch {
    return undefined;
  }
}

/** What a program threw, from exactly `{ name, message }` of two strings; anything else gives none. */
function admitProgramError(value: unknown): ProgramErrorInfo | undefined {
  const fields = plainFields(value, ["name", "message"]);
  if (fields === undefined || typeof fields.name !== "string" || typeof fields.message !== "string") return undefined;
  return Object.freeze({
    name: clip(fields.name, MAX_PROGRAM_ERROR_NAME_CHARS),
    message: clip(fields.message, MAX_PROGRAM_ERROR_MESSAGE_CHARS),
  });
}

/**
 * Admits a sandbox's answer only as exact plain data: `{ status: "succeeded", output }` (or `outputJson`, a string),
 * or `{ status: "failed", reason?, programError? }` with a known reason. Anything else (an unknown reason, an extra
 * field, a success that also says why it failed, a getter) is unreadable: undefined. `programError` is kept only for
 * a `program_error`.
 */
export function admitAnswer(value: unknown): AdmittedAnswer | undefined {
  const fields = plainFields(value, ["status", "output", "outputJson", "reason", "programError"]);
  if (fields === undefined) return undefined;
  const keys = Object.keys(fields);
  if (fields.status === "succeeded") {
    if (keys.length !== 2) return undefined;
    if ("output" in fields) return Object.freeze({ status: "succeeded" as const, output: fields.output });
    if (typeof fields.outputJson === "string") {
      return Object.freeze({ status: "succeeded" as const, outputJson: fields.outputJson });
    }
    return undefined;
  }
  if (fields.status !== "failed" || "output" in fields || "outputJson" in fields) return undefined;
  const reason = fields.reason;
  if (reason !== undefined && !SANDBOX_FAILURE_REASONS.includes(reason as SandboxFailureReason)) return undefined;
  return Object.freeze({
    status: "failed" as const,
    reason: reason as SandboxFailureReason | undefined,
    programError: reason === "program_error" ? admitProgramError(fields.programError) : undefined,
  });
}

/**
 * The outcome of a sandbox's admitted answer (the run was not stopped and no call is unknown). `usage` is read when
 * the outcome is made, after the output schema ran; `evidence` holds the receipts of the calls, all settled by then.
 */
export async function outcomeOfAnswer(
  program: AnyCodeProgram,
  answer: AdmittedAnswer | undefined,
  usage: () => CodeUsage,
  evidence: readonly ExecutionEvidence[],
): Promise<CodeExecutionOutcome<unknown>> {
  const limits = program.limits;
  const fail = (code: ErrorCode, message: string, programError?: ProgramErrorInfo) =>
    failed(code, message, programError, usage(), evidence);
  if (answer === undefined) return fail("TOOL_FAILED", "the sandbox failed or gave an answer Airlock cannot read");
  if (answer.status === "failed") {
    switch (answer.reason) {
      case "program_error":
        return fail("TOOL_FAILED", "the program threw an error (see programError)", answer.programError);
      case "cpu_limit":
        return fail("LIMIT_EXCEEDED", `the program computed longer than its limit cpuMillis of ${limits.cpuMillis} ms`);
      case "memory_limit":
        return fail(
          "LIMIT_EXCEEDED",
          `the program ran out of memory at its limit memoryBytes of ${limits.memoryBytes} bytes`,
        );
      case "invalid_output":
        return fail(
          "INVALID_OUTPUT",
          `the program returned a value that is not JSON within its limit maxOutputBytes of ${limits.maxOutputBytes}`,
        );
      case "unsupported_program":
        return fail("UNSUPPORTED_PROFILE", "the sandbox adapter cannot run this program's language or imports");
      case "sandbox_error":
        return fail("TOOL_FAILED", "the sandbox failed");
      default:
        return fail("TOOL_FAILED", "the program or its sandbox failed; the adapter did not say why");
    }
  }

  // ---- output: JSON within maxOutputBytes, then the output schema ----
  const bounds = { maxBytes: limits.maxOutputBytes };
  let output: JsonValue;
  try {
    if ("outputJson" in answer) output = parseJson(answer.outputJson, bounds).value;
    else {
      const copied = tryCopyJson(answer.output, bounds);
      if (!copied.ok) throw copied.error;
      output = copied.json.value;
    }
  } catch (error) {
    // Only the JSON checks' own messages name a rule; any other error's text is not Airlock's.
    const rule = error instanceof JsonBoundsError ? `: ${error.message}` : "";
    return fail(
      "INVALID_OUTPUT",
      `the program's output is not JSON within its limit maxOutputBytes of ${limits.maxOutputBytes}${rule}`,
    );
  }
  const parsed = await parseWithSchema(program.output, output);
  if (!parsed.ok) return fail("INVALID_OUTPUT", "the program's output does not match its output schema");
  return Object.freeze({ status: "succeeded" as const, output: parsed.value, usage: usage(), evidence });
}
