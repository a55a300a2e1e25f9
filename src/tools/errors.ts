/**
 * Outcomes and their public error codes. Every `error.message` is written by Airlock and names the rule or limit
 * involved; program text and tool data never go into it.
 */

import type { JsonValue } from "../json/index.ts";
import type { OptionErrors } from "../platform/options.ts";

/** Every public error code, with the status an outcome carrying it has. */
export const ERROR_CODE_STATUS = {
  PERMISSION_DENIED: "blocked",
  BUDGET_EXCEEDED: "blocked",
  GUARD_BLOCKED: "blocked",
  GUARD_UNAVAILABLE: "blocked",
  CANCELLED: "cancelled",
  OUTCOME_UNKNOWN: "outcome_unknown",
  INVALID_CONFIG: "failed",
  INVALID_INPUT: "failed",
  INVALID_OUTPUT: "failed",
  INVALID_JSON: "failed",
  LIMIT_EXCEEDED: "failed",
  TIMEOUT: "failed",
  TOOL_FAILED: "failed",
  UNSUPPORTED_PROFILE: "failed",
  NOT_FOUND: "failed",
  CONFLICT: "failed",
  /** Durable storage failed, timed out, or returned a record that does not check out. */
  STORAGE_UNAVAILABLE: "failed",
  /** A resumed program did not replay its journal exactly (another call, tool or argument at the same number). */
  INTEGRITY_VIOLATION: "failed",
} as const;

export type ErrorCode = keyof typeof ERROR_CODE_STATUS;
export const ERROR_CODES = Object.freeze(Object.keys(ERROR_CODE_STATUS)) as readonly ErrorCode[];

export type FailureStatus = "failed" | "blocked" | "cancelled" | "outcome_unknown";
export type OutcomeStatus = "succeeded" | FailureStatus;

export interface OutcomeError {
  readonly code: ErrorCode;
  /** Written by Airlock; names the rule or limit. Never program text or tool data. */
  readonly message: string;
}

export type SucceededOutcome<T> = { readonly status: "succeeded"; readonly output: T };
export type FailedOutcome = { readonly status: FailureStatus; readonly error: OutcomeError };

/** What a tool call (or anything the broker runs) ended with. */
export type Outcome<T = JsonValue> = SucceededOutcome<T> | FailedOutcome;

export function isErrorCode(value: unknown): value is ErrorCode {
  return typeof value === "string" && Object.hasOwn(ERROR_CODE_STATUS, value);
}

export function statusOf(code: ErrorCode): FailureStatus {
  return ERROR_CODE_STATUS[code];
}

/** A failed outcome whose status follows from its code. */
export function failure(code: ErrorCode, message: string): FailedOutcome {
  return Object.freeze({ status: statusOf(code), error: Object.freeze({ code, message }) });
}

/** Thrown by Airlock's constructors for a bad configuration (`INVALID_CONFIG`) or a refused profile. */
export class AirlockError extends Error {
  override readonly name = "AirlockError";
  constructor(
    readonly code: ErrorCode,
    message: string,
  ) {
    super(message);
  }
}

export function configError(message: string): AirlockError {
  return new AirlockError("INVALID_CONFIG", message);
}

/**
 * How governed programs, their adapters, tools and workflows report a bad option: INVALID_CONFIG, naming the option
 * and never repeating its value (Mayura's; see platform/options.ts).
 */
export const CONFIG_OPTION_ERRORS: OptionErrors = Object.freeze({
  kind: configError,
  range: configError,
  showsValue: false,
});
