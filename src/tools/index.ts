/** Typed tools and the broker: the root entry's governed-tools part (re-exported by `src/index.ts`). */
export { z } from "zod";
export {
  type CopiedJson,
  canonicalJson,
  copyJson,
  JsonBoundsError,
  type JsonErrorCode,
  type JsonLimits,
  type JsonObject,
  type JsonPrimitive,
  type JsonRule,
  type JsonValue,
  jsonDigest,
  MAX_JSON_BYTES,
  MAX_JSON_DEPTH,
  MAX_JSON_VALUES,
  parseJson,
} from "../json/index.ts";
export { Budget, type BudgetReservation, MAX_BUDGET_CALLS } from "./budget.ts";
export {
  type AnyTool,
  DEFAULT_TOOL_TIMEOUT_MS,
  defineTool,
  type GuardDecision,
  isTool,
  MAX_COST_MICROS,
  MAX_TOOL_TIMEOUT_MS,
  type Scope,
  type Tool,
  type ToolApproval,
  type ToolContext,
  type ToolDefinition,
  type ToolEffect,
  type ToolGuard,
} from "./define.ts";
export {
  AirlockError,
  ERROR_CODES,
  type ErrorCode,
  type FailedOutcome,
  type FailureStatus,
  type Outcome,
  type OutcomeError,
  type OutcomeStatus,
  type SucceededOutcome,
} from "./errors.ts";
export {
  GUARD_TIMEOUT_MS,
  type InvokeToolOptions,
  invokeTool,
  MAX_SCOPE_BYTES,
  type OnCallDecision,
  type OnCallHook,
  TOOL_ABORT_GRACE_MS,
  type ToolCallInfo,
} from "./invoke.ts";
export {
  type Caller,
  type CallerInvokeOptions,
  type CallerTools,
  createToolRegistry,
  type ToolRegistry,
  type ToolRegistryOptions,
} from "./registry.ts";
