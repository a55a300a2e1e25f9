/**
 * The broker: `invokeTool` runs one tool call under the host's rules and never throws. In order: the input must be
 * JSON within limits, the `onCall` hook sees the call (and may refuse it), every required permission must be granted
 * (exact strings, no wildcards), the input must match the tool's schema, the tool's guards must allow it, its cost
 * must fit the budget; then the tool runs with the trusted scope and a signal, and its output must be JSON within
 * limits and match its schema.
 *
 * Refused input is INVALID_INPUT (not JSON, over maxInputBytes, a `__proto__` key, or not matching the schema) and
 * refused output INVALID_OUTPUT, the message naming the rule. Guards and the tool see a deep-frozen input and scope.
 *
 * Once a tool has started, only its own answer settles the call. A `none` or `read` tool that throws is TOOL_FAILED,
 * and one that is cancelled or times out CANCELLED or TIMEOUT; a `write` or `host` tool that throws, or does not
 * answer by then, may have acted before it failed, so it ends as OUTCOME_UNKNOWN, and its cost stays held on the
 * budget as unknown.
 */
import type { z } from "zod";
import { type JsonValue, MAX_JSON_BYTES, tryCopyJson } from "../json/index.ts";
import { optionKeys, unknownOption } from "../platform/options.ts";
import { Budget, isCount } from "./budget.ts";
import {
  type AnyTool,
  changesNothing,
  handlerOf,
  isTool,
  requiredPermissions,
  type Scope,
  type Tool,
  type ToolContext,
} from "./define.ts";
import { AirlockError, type FailedOutcome, failure, type Outcome } from "./errors.ts";
import { parseWithSchema } from "./validate.ts";

/** Time a guard or the onCall hook has to answer. */
export const GUARD_TIMEOUT_MS = 5_000;
/** Time a tool has to settle after its signal aborted, before its call is given up. */
export const TOOL_ABORT_GRACE_MS = 1_000;
/** Bytes of JSON a scope may have. */
export const MAX_SCOPE_BYTES = 64 * 1024;
/** Characters of a run id or call id. */
export const MAX_ID_CHARS = 256;

/** What the `onCall` hook sees of a call. `input` is a frozen JSON copy; `scope` is the trusted scope. */
export interface ToolCallInfo {
  readonly runId: string;
  readonly callId: string;
  readonly toolId: string;
  readonly toolVersion: string;
  readonly effects: AnyTool["effects"];
  readonly scope: Scope;
  readonly input: JsonValue;
}

/**
 * `undefined`, `true` or `{ allow: true }` lets the call go on; `false` or `{ allow: false }` refuses it with
 * PERMISSION_DENIED, or with LIMIT_EXCEEDED when `code` says so (a rate limit).
 */
export type OnCallDecision =
  | undefined
  | boolean
  | { readonly allow: boolean; readonly code?: "PERMISSION_DENIED" | "LIMIT_EXCEEDED" };

/** Sees every call that reaches the broker, for rate limits and audit, and can refuse it. */
// biome-ignore lint/suspicious/noConfusingVoidType: a hook that only observes returns nothing.
export type OnCallHook = (call: ToolCallInfo) => OnCallDecision | void | Promise<OnCallDecision | void>;

export interface InvokeToolOptions {
  runId: string;
  callId: string;
  /** The trusted scope; the tool sees a frozen copy. */
  scope: Scope;
  signal?: AbortSignal;
  permissions: { readonly allow: readonly string[] };
  budget: Budget;
  onCall?: OnCallHook;
  /** Bytes of the input's JSON; default `MAX_JSON_BYTES`. */
  maxInputBytes?: number;
  /** Bytes of the output's JSON; default `MAX_JSON_BYTES`. */
  maxOutputBytes?: number;
  /**
   * Called once every check passed and the cost is reserved, right before the tool runs (a durable runtime persists
   * the dispatch here). If it rejects, the tool never runs: the reservation is released and the call is CANCELLED.
   */
  beforeDispatch?: () => Promise<void>;
}

/**
 * invokeTool's options, and the other fields of a code-mode call context (not used here), so that a broker can pass
 * `{ ...context, permissions, budget }` on.
 */
const INVOKE_KEYS = [
  ...optionKeys<InvokeToolOptions>({
    runId: true,
    callId: true,
    scope: true,
    signal: true,
    permissions: true,
    budget: true,
    onCall: true,
    maxInputBytes: true,
    maxOutputBytes: true,
    beforeDispatch: true,
  }),
  "executionId",
  "programId",
  "programDigest",
  "caller",
];

/** Cost a settled call spent or left unknown, for outcomes made here (read by the code-mode executor). */
export interface CallCost {
  readonly spentMicros: number;
  readonly unknownMicros: number;
}
const costs = new WeakMap<object, CallCost>();

/** A call's cost as its tool reported it: open while the tool runs, at most `maxMicros` (its tool's cost). */
interface CostReport {
  readonly maxMicros: number;
  open: boolean;
  cost?: CallCost;
}
/** The reports of running calls, by the context each call's tool was given. */
const reports = new WeakMap<ToolContext, CostReport>();

/**
 * For Airlock's own tools whose cost is known only once they ran (a durable code phase reserves its program's most and
 * is charged what its calls cost): the call is charged `spentMicros`, `unknownMicros` stays held as unknown and the
 * rest of its reservation is given back. Once, while the call runs, within its tool's `costMicros`; a call whose tool
 * reports nothing costs its whole `costMicros`. A report that breaks these rules is refused (INTEGRITY_VIOLATION);
 * one for a context `invokeTool` did not make (a handler called directly) has no call to charge and changes nothing.
 */
export function reportCallCost(context: ToolContext, cost: CallCost): void {
  const report = reports.get(context);
  if (report === undefined) return;
  const { spentMicros, unknownMicros } = cost;
  if (
    !report.open ||
    report.cost !== undefined ||
    !isCount(spentMicros) ||
    !isCount(unknownMicros) ||
    spentMicros + unknownMicros > report.maxMicros
  ) {
    throw new AirlockError("INTEGRITY_VIOLATION", "a call's cost was reported twice, late, or past its tool's cost");
  }
  report.cost = Object.freeze({ spentMicros, unknownMicros });
}

/** The cost recorded for an outcome that `invokeTool` returned, if it did. */
export function costOfOutcome(outcome: unknown): CallCost | undefined {
  return typeof outcome === "object" && outcome !== null ? costs.get(outcome) : undefined;
}

function withCost<T extends Outcome<unknown>>(outcome: T, spentMicros: number, unknownMicros: number): T {
  costs.set(outcome, { spentMicros, unknownMicros });
  return outcome;
}

export function isId(value: unknown): value is string {
  return typeof value === "string" && value.length > 0 && value.length <= MAX_ID_CHARS;
}

/** Checks and freezes a scope; `undefined` when it is not a JSON object with a string `principalId`. */
export function copyScope(value: unknown): Scope | undefined {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return undefined;
  const copied = tryCopyJson(value, { maxBytes: MAX_SCOPE_BYTES }, { freeze: true });
  if (!copied.ok) return undefined;
  const scope = copied.json.value as Record<string, JsonValue>;
  if (typeof scope.principalId !== "string" || scope.principalId.length === 0) return undefined;
  return scope as unknown as Scope;
}

function byteOption(value: unknown): number | undefined {
  if (value === undefined) return MAX_JSON_BYTES;
  return typeof value === "number" && Number.isSafeInteger(value) && value >= 1 ? value : undefined;
}

type Settled = { kind: "value"; value: unknown } | { kind: "error" } | { kind: "pending" };

/** Resolves when `promise` settles, `signal` aborts or `ms` pass, whichever is first. */
function race(
  promise: Promise<unknown>,
  ms: number | undefined,
  signal?: AbortSignal,
): Promise<Settled | { kind: "aborted" }> {
  return new Promise((resolve) => {
    let done = false;
    const finish = (result: Settled | { kind: "aborted" }) => {
      if (done) return;
      done = true;
      if (timer !== undefined) clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      resolve(result);
    };
    const onAbort = () => finish({ kind: "aborted" });
    const timer = ms === undefined ? undefined : setTimeout(() => finish({ kind: "pending" }), ms);
    if (signal?.aborted) onAbort();
    else signal?.addEventListener("abort", onAbort, { once: true });
    promise.then(
      (value) => finish({ kind: "value", value }),
      () => finish({ kind: "error" }),
    );
  });
}

function isAbortSignal(value: unknown): value is AbortSignal {
  return value instanceof AbortSignal;
}

const NEVER_ABORTED = new AbortController().signal;

const cancelledBeforeStart = () => failure("CANCELLED", "the call was cancelled before the tool started");

/** Runs one tool call under the host's rules. Never throws; every refusal is an outcome with a public code. */
export async function invokeTool<I extends z.ZodType, O extends z.ZodType>(
  tool: Tool<I, O>,
  input: unknown,
  options: InvokeToolOptions,
): Promise<Outcome<z.output<O>>> {
  try {
    return (await invoke(tool as AnyTool, input, options)) as Outcome<z.output<O>>;
  } catch {
    // Only a bug could get here; the call's fate is then not known.
    return failure("OUTCOME_UNKNOWN", "the broker failed while handling the call");
  }
}

async function invoke(tool: AnyTool, input: unknown, options: InvokeToolOptions): Promise<Outcome<unknown>> {
  // ---- configuration (synchronous, so the input is copied before the caller can change it) ----
  if (!isTool(tool)) return failure("INVALID_CONFIG", "invokeTool accepts only tools made by defineTool");
  if (typeof options !== "object" || options === null) {
    return failure("INVALID_CONFIG", "invokeTool needs options { runId, callId, scope, permissions, budget }");
  }
  const unknown = unknownOption(options, "invokeTool", INVOKE_KEYS);
  if (unknown !== undefined) return failure("INVALID_CONFIG", unknown);
  const { runId, callId, signal, budget, onCall, beforeDispatch } = options;
  if (!isId(runId) || !isId(callId)) {
    return failure("INVALID_CONFIG", `runId and callId must be strings of 1-${MAX_ID_CHARS} characters`);
  }
  const scope = copyScope(options.scope);
  if (scope === undefined) {
    return failure(
      "INVALID_CONFIG",
      `scope must be a JSON object of at most ${MAX_SCOPE_BYTES} bytes with a non-empty string principalId`,
    );
  }
  const allow = options.permissions?.allow;
  if (!Array.isArray(allow) || !allow.every((p) => typeof p === "string")) {
    return failure("INVALID_CONFIG", "permissions.allow must be an array of strings");
  }
  if (!(budget instanceof Budget)) return failure("INVALID_CONFIG", "budget must be a Budget");
  if (signal !== undefined && !isAbortSignal(signal)) return failure("INVALID_CONFIG", "signal must be an AbortSignal");
  if (onCall !== undefined && typeof onCall !== "function")
    return failure("INVALID_CONFIG", "onCall must be a function");
  if (beforeDispatch !== undefined && typeof beforeDispatch !== "function")
    return failure("INVALID_CONFIG", "beforeDispatch must be a function");
  const maxInputBytes = byteOption(options.maxInputBytes);
  const maxOutputBytes = byteOption(options.maxOutputBytes);
  if (maxInputBytes === undefined || maxOutputBytes === undefined) {
    return failure("INVALID_CONFIG", "maxInputBytes and maxOutputBytes must be positive integers");
  }
  if (signal?.aborted) return cancelledBeforeStart();

  // ---- input: JSON within limits ----
  const copied = tryCopyJson(input, { maxBytes: maxInputBytes }, { freeze: true });
  if (!copied.ok) {
    return failure(
      "INVALID_INPUT",
      `the tool input was refused (maxInputBytes ${maxInputBytes}): ${copied.error.message}`,
    );
  }
  const jsonInput = copied.json.value;

  // ---- the onCall hook sees every call ----
  if (onCall !== undefined) {
    const info: ToolCallInfo = Object.freeze({
      runId,
      callId,
      toolId: tool.id,
      toolVersion: tool.version,
      effects: tool.effects,
      scope,
      input: jsonInput,
    });
    let pending: Promise<unknown>;
    try {
      pending = Promise.resolve(onCall(info));
    } catch {
      pending = Promise.reject(new Error("onCall threw"));
    }
    const answer = await race(pending, GUARD_TIMEOUT_MS, signal);
    if (answer.kind === "aborted") return cancelledBeforeStart();
    if (answer.kind !== "value")
      return failure("GUARD_UNAVAILABLE", "the onCall hook failed or did not answer in time");
    const refused = refusal(answer.value);
    if (refused === null) return failure("GUARD_UNAVAILABLE", "the onCall hook gave an answer that is not a decision");
    if (refused !== undefined) {
      return refused === "LIMIT_EXCEEDED"
        ? failure("LIMIT_EXCEEDED", "the onCall hook refused the call: a rate or usage limit was reached")
        : failure("PERMISSION_DENIED", "the onCall hook refused the call");
    }
  }

  // ---- permissions: exact strings ----
  const granted = new Set(allow);
  for (const permission of requiredPermissions(tool)) {
    if (!granted.has(permission)) {
      return failure("PERMISSION_DENIED", `the call needs the permission '${permission}', which was not granted`);
    }
  }

  // ---- input schema ----
  const parsed = await parseWithSchema(tool.input, jsonInput);
  if (!parsed.ok) return failure("INVALID_INPUT", "the input does not match the tool's input schema");
  if (signal?.aborted) return cancelledBeforeStart();
  // The schema's output is a new value: guards and the tool get it frozen, so none of them can change what the next sees.
  const validInput = deepFreeze(parsed.value);

  const guardContext: ToolContext = Object.freeze({ runId, callId, scope, signal: signal ?? NEVER_ABORTED });

  // ---- guards ----
  for (const guard of tool.guards) {
    let pending: Promise<unknown>;
    try {
      pending = Promise.resolve(guard.check(validInput, guardContext));
    } catch {
      pending = Promise.reject(new Error("guard threw"));
    }
    const answer = await race(pending, GUARD_TIMEOUT_MS, signal);
    if (answer.kind === "aborted") return cancelledBeforeStart();
    if (answer.kind !== "value") {
      return failure("GUARD_UNAVAILABLE", `the guard '${guard.id}' failed or did not answer in time`);
    }
    const value = answer.value;
    const allowed =
      value === true || (typeof value === "object" && value !== null && (value as { allow?: unknown }).allow === true);
    const denied =
      value === false ||
      (typeof value === "object" && value !== null && (value as { allow?: unknown }).allow === false);
    if (!allowed && !denied)
      return failure("GUARD_UNAVAILABLE", `the guard '${guard.id}' gave an answer that is not a decision`);
    if (denied) return failure("GUARD_BLOCKED", `the guard '${guard.id}' blocked the call`);
  }

  // ---- budget ----
  const reservation = budget.reserve(tool.costMicros);
  if (reservation === undefined) {
    return failure("BUDGET_EXCEEDED", "the call would pass the budget's maxCalls or maxCostMicros");
  }
  if (signal?.aborted) {
    reservation.release();
    return cancelledBeforeStart();
  }

  if (beforeDispatch !== undefined) {
    let dispatched = false;
    try {
      await beforeDispatch();
      dispatched = true;
    } catch {
      // The caller could not record the dispatch: the tool must not run.
    }
    if (!dispatched) {
      reservation.release();
      return failure("CANCELLED", "the call was not dispatched");
    }
  }

  // ---- the tool runs ----
  const controller = new AbortController();
  let stopCause: "cancelled" | "timeout" | undefined;
  const onAbort = () => {
    stopCause ??= "cancelled";
    controller.abort(signal?.reason);
  };
  signal?.addEventListener("abort", onAbort, { once: true });
  const timer = setTimeout(() => {
    stopCause ??= "timeout";
    controller.abort(new Error("the tool timed out"));
  }, tool.timeoutMillis);
  const toolContext: ToolContext = Object.freeze({ runId, callId, scope, signal: controller.signal });
  const report: CostReport = { maxMicros: tool.costMicros, open: true };
  reports.set(toolContext, report);
  let running: Promise<unknown>;
  try {
    running = Promise.resolve(handlerOf(tool)(validInput, toolContext));
  } catch (error) {
    running = Promise.reject(error);
  }
  running.catch(() => {});
  let settled = await race(running, undefined, controller.signal);
  if (settled.kind === "aborted") settled = (await race(running, TOOL_ABORT_GRACE_MS)) as Settled;
  clearTimeout(timer);
  signal?.removeEventListener("abort", onAbort);
  report.open = false;

  /** Settles the reservation as the tool reported, else as `spent`/`unknown` of its whole cost say. */
  const charged = <T extends Outcome<unknown>>(outcome: T, spent: boolean): T => {
    const cost =
      report.cost ??
      (spent ? { spentMicros: tool.costMicros, unknownMicros: 0 } : { spentMicros: 0, unknownMicros: tool.costMicros });
    reservation.settle(cost.spentMicros, cost.unknownMicros);
    return withCost(outcome, cost.spentMicros, cost.unknownMicros);
  };
  const writes = !changesNothing(tool.effects);
  if (stopCause !== undefined && (settled.kind !== "value" || !writes)) {
    if (writes) {
      return charged(
        failure(
          "OUTCOME_UNKNOWN",
          `the ${tool.effects} tool was stopped (${stopCause === "timeout" ? "timeoutMillis" : "cancelled"}) before it answered`,
        ),
        false,
      );
    }
    return charged(
      stopCause === "timeout"
        ? failure("TIMEOUT", `the tool did not answer within its timeoutMillis of ${tool.timeoutMillis} ms`)
        : failure("CANCELLED", "the call was cancelled while the tool ran"),
      true,
    );
  }
  if (settled.kind !== "value") {
    // A write or host tool may have acted before it threw: nobody knows whether its effect happened.
    if (writes) {
      return charged(
        failure("OUTCOME_UNKNOWN", `the ${tool.effects} tool threw; whether its effect happened is unknown`),
        false,
      );
    }
    return charged(failure("TOOL_FAILED", "the tool failed"), true);
  }
  return charged(await checkOutput(tool, settled.value, maxOutputBytes), true);
}

async function checkOutput(tool: AnyTool, raw: unknown, maxBytes: number): Promise<Outcome<unknown>> {
  const copied = tryCopyJson(raw, { maxBytes }, {});
  if (!copied.ok) return outputRefused(maxBytes, copied.error.message);
  const parsed = await parseWithSchema(tool.output, copied.json.value);
  if (!parsed.ok) return failure("INVALID_OUTPUT", "the tool's output does not match its output schema");
  const final = tryCopyJson(parsed.value, { maxBytes }, { freeze: true });
  if (!final.ok) return outputRefused(maxBytes, final.error.message);
  return Object.freeze({ status: "succeeded" as const, output: final.json.value });
}

function outputRefused(maxBytes: number, message: string): FailedOutcome {
  return failure("INVALID_OUTPUT", `the tool's output was refused (maxOutputBytes ${maxBytes}): ${message}`);
}

/** Freezes a value and, through its arrays and plain objects, everything in it. */
function deepFreeze<T>(value: T): T {
  if (typeof value !== "object" || value === null || Object.isFrozen(value)) return value;
  Object.freeze(value);
  const proto = Object.getPrototypeOf(value);
  if (Array.isArray(value) || proto === Object.prototype || proto === null) {
    for (const item of Object.values(value)) deepFreeze(item);
  }
  return value;
}

function refusal(value: unknown): "PERMISSION_DENIED" | "LIMIT_EXCEEDED" | undefined | null {
  if (value === undefined || value === true) return undefined;
  if (value === false) return "PERMISSION_DENIED";
  if (typeof value === "object" && value !== null) {
    const { allow, code } = value as { allow?: unknown; code?: unknown };
    if (allow === true) return undefined;
    if (allow === false) return code === "LIMIT_EXCEEDED" ? "LIMIT_EXCEEDED" : "PERMISSION_DENIED";
  }
  return null;
}
