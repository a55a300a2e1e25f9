/**
 * Airlock: code mode for TypeScript. The root entry: the script sandboxes and their limits, the names pi-codemode has
 * at its root (declarations, source parsing, identifiers), typed tools and the broker with Mayura's names, and traces.
 * The other parts have their own entries: `/declarations`, `/source`, `/code-mode`, `/workflows`, `/mcp`, `/ai`.
 */

export {
  DEFAULT_INPUT_SCHEMA_MAX_CHARS,
  type RenderDeclarationsOptions,
  renderDeclarations,
  renderToolOutputType,
  renderToolSignature,
  resolveSchemaRef,
  schemaToType,
} from "./declarations/index.ts";
export { WasmRewriteError } from "./engine/wasm/binary.ts";
export { type LoadQuickJSWasmOptions, loadQuickJSWasm } from "./engine/wasm/load.ts";
export type { PoolStats } from "./host/pool.ts";
export { MAX_POOL_SIZE_PER_CORE } from "./host/pool-options.ts";
export { InlineCodemodeSandbox, type InlineCodemodeSandboxOptions } from "./inline/sandbox.ts";
export type { JsonValue } from "./json/index.ts";
export { isIdentifier, toCodemodeIdentifier } from "./platform/identifier.ts";
export * from "./process/index.ts";
export type { CodemodeRemote } from "./remote/channel.ts";
export {
  type CodemodeServeOptions,
  RemoteCodemodeSandbox,
  type RemoteCodemodeSandboxOptions,
  serveCodemodeRemote,
} from "./remote/sandbox.ts";
export type {
  CodemodeRemoteExchange,
  CodemodeRemoteMessage,
  CodemodeRemoteReply,
  CodemodeRemoteRequest,
} from "./remote/vm-side.ts";
export { CodemodeSandboxBase } from "./sandbox/base.ts";
export * from "./sandbox/public-limits.ts";
export {
  CODEMODE_OPTIONS_PREFIX,
  CODEMODE_SOURCE_GRAMMAR,
  CodemodeSourceError,
  type CodemodeSourceOptions,
  type ParsedCodemodeSource,
  parseCodemodeSource,
} from "./source/index.ts";
export { Budget } from "./tools/budget.ts";
export {
  type AnyTool,
  DEFAULT_TOOL_TIMEOUT_MS,
  defineTool,
  type GuardDecision,
  isTool,
  MAX_TOOL_TIMEOUT_MS,
  type Scope,
  type Tool,
  type ToolApproval,
  type ToolContext,
  type ToolDefinition,
  type ToolEffect,
  type ToolGuard,
} from "./tools/define.ts";
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
} from "./tools/errors.ts";
export {
  GUARD_TIMEOUT_MS,
  type InvokeToolOptions,
  invokeTool,
  MAX_SCOPE_BYTES,
  type OnCallDecision,
  type OnCallHook,
  TOOL_ABORT_GRACE_MS,
  type ToolCallInfo,
} from "./tools/invoke.ts";
export {
  type Caller,
  type CallerInvokeOptions,
  type CallerTools,
  createToolRegistry,
  type ToolRegistry,
  type ToolRegistryOptions,
} from "./tools/registry.ts";
export { z } from "./tools/z.ts";
export {
  MAX_TRACE_VALUE_CHARS,
  setTraceOptions,
  TRACER_NAME,
  type TraceOptions,
  tracingAvailable,
} from "./tracing/index.ts";
export type * from "./types.ts";
export { CodemodeSandbox, type CodemodeSandboxOptions } from "./worker/sandbox.ts";
