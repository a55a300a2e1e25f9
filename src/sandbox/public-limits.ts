/**
 * The limits of the script sandbox that a user reads: its defaults and its bounds, each a named constant, written once
 * here for the root entry and the portable one (docs/sandbox.md, Limits, says what each bounds).
 */
export {
  DEFAULT_INTERRUPT_BUDGET,
  DEFAULT_MAX_TOOL_CALLS,
  DEFAULT_REMOTE_MEMORY_LIMIT_BYTES,
  DEFAULT_TIMEOUT_MS,
  INLINE_MAX_STACK_SIZE,
  MAX_CLOCK_MS,
  MAX_ERROR_MESSAGE_CHARS,
  MAX_ERROR_NAME_CHARS,
  MAX_ERROR_STACK_CHARS,
  MAX_INTERRUPT_BUDGET,
  MAX_OUTPUT_CHARS,
  MAX_OUTPUT_ITEMS,
  MAX_STORE_TOTAL_CHARS,
  MAX_STORE_VALUE_CHARS,
  MAX_TOOL_CALLS,
  MAX_VALUE_CHARS,
} from "../engine/limits.ts";
export { MAX_JOURNAL_CLOCK_READS } from "../engine/protocol.ts";
export { MAX_JOURNAL_CHARS } from "../host/journal.ts";
export { DEFAULT_GUEST_MEMORY_SHARE } from "../host/memory-budget.ts";
export { DEFAULT_VMS_PER_THREAD } from "../host/pool-options.ts";
export { DEFAULT_MEMORY_LIMIT_BYTES, MAX_MEMORY_LIMIT_BYTES, MIN_MEMORY_LIMIT_BYTES } from "./base.ts";
