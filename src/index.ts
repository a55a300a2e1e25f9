/** Airlock: code mode for TypeScript. */

export * from "./declarations/index.ts";
export {
  DEFAULT_INTERRUPT_BUDGET,
  DEFAULT_MAX_TOOL_CALLS,
  DEFAULT_TIMEOUT_MS,
  INLINE_MAX_STACK_SIZE,
  MAX_CLOCK_MS,
  MAX_ERROR_MESSAGE_CHARS,
  MAX_ERROR_NAME_CHARS,
  MAX_ERROR_STACK_CHARS,
  MAX_OUTPUT_CHARS,
  MAX_OUTPUT_ITEMS,
  MAX_STORE_TOTAL_CHARS,
  MAX_STORE_VALUE_CHARS,
  MAX_VALUE_CHARS,
} from "./engine/limits.ts";
export { MAX_JOURNAL_CLOCK_READS } from "./engine/protocol.ts";
export type {
  CodemodeRemoteExchange,
  CodemodeRemoteMessage,
  CodemodeRemoteReply,
  CodemodeRemoteRequest,
} from "./engine/remote.ts";
export { MAX_BATCH_CHARS } from "./engine/serve.ts";
export { type LoadQuickJSWasmOptions, loadQuickJSWasm } from "./engine/wasm.ts";
export { WasmRewriteError } from "./engine/wasm-binary.ts";
export { MAX_JOURNAL_CHARS } from "./host/journal.ts";
export { DEFAULT_GUEST_MEMORY_SHARE } from "./host/memory-budget.ts";
export {
  MAX_CRASHES_PER_RUN,
  type PoolStats,
  REMOTE_STOP_GRACE_MS,
  STOP_GRACE_MS,
  STUCK_AFTER_MS,
  WARM_RUNS,
} from "./host/pool.ts";
export type { CodemodeRemote } from "./host/remote.ts";
export { TYPESCRIPT_STRIP_TIMEOUT_MS } from "./host/typescript-thread.ts";
export { MAX_POOL_SIZE_PER_CORE } from "./host/worker-pool.ts";
export { isIdentifier, toCodemodeIdentifier } from "./identifier.ts";
export * from "./process/index.ts";
export { CodemodeSandboxBase, DEFAULT_MEMORY_LIMIT_BYTES, MIN_MEMORY_LIMIT_BYTES } from "./sandbox/base.ts";
export {
  CodemodeSandbox,
  type CodemodeSandboxOptions,
  DEFAULT_VMS_PER_THREAD,
  InlineCodemodeSandbox,
  type InlineCodemodeSandboxOptions,
} from "./sandbox/codemode.ts";
export {
  type CodemodeServeOptions,
  RemoteCodemodeSandbox,
  type RemoteCodemodeSandboxOptions,
  serveCodemodeRemote,
} from "./sandbox/remote.ts";
export * from "./source/index.ts";
export * from "./tools/index.ts";
export {
  MAX_TRACE_VALUE_CHARS,
  setTraceOptions,
  TRACER_NAME,
  type TraceOptions,
  tracingAvailable,
} from "./tracing/index.ts";
export type * from "./types.ts";
