import type { CodemodeError } from "../types.ts";

/** Limits of the script environment. Each is enforced inside the VM and checked again on the host. */

/** Characters of text and base64 image data a script may output in one execution. */
export const MAX_OUTPUT_CHARS = 16 * 1024 * 1024;
/** Output items (text, console and image) a script may produce in one execution. */
export const MAX_OUTPUT_ITEMS = 100_000;
/** Characters of JSON one `store()` value may have. */
export const MAX_STORE_VALUE_CHARS = 256 * 1024;
/** Characters all stored keys and the JSON of their values together may have. */
export const MAX_STORE_TOTAL_CHARS = 1024 * 1024;
/** Characters of JSON one value crossing the VM boundary may have: tool arguments, tool results, the return value. */
export const MAX_VALUE_CHARS = 16 * 1024 * 1024;
/** Characters of an error's message, name and stack that leave the VM; longer ones are cut, ending in "…". */
export const MAX_ERROR_MESSAGE_CHARS = 8 * 1024;
export const MAX_ERROR_NAME_CHARS = 256;
export const MAX_ERROR_STACK_CHARS = 32 * 1024;

/**
 * Latest clock value of a deterministic run, in ms since the epoch (in 2554): the VM reads its clock as unsigned 64-bit
 * nanoseconds (WASI), so earlier than 0 or later than this would wrap around to another date.
 */
export const MAX_CLOCK_MS = 18_446_744_073_709;

/** Default of `maxToolCalls`: tool and global calls one sandbox execution may make. */
export const DEFAULT_MAX_TOOL_CALLS = 10_000;
/** The largest `maxToolCalls` a sandbox takes. */
export const MAX_TOOL_CALLS = 1_000_000;

/** Default deadline of an execution. */
export const DEFAULT_TIMEOUT_MS = 300_000;

/**
 * QuickJS's own stack guard. Without one, deep recursion overflows the host's native stack through the wasm and a
 * later dispose aborts the process. The calling thread's stack is smaller than a worker's, so inline VMs get less.
 */
export const INLINE_MAX_STACK_SIZE = 256 * 1024;
/** Stack guard for VMs in worker threads, which run with `WORKER_STACK_SIZE_MB` of native stack. */
export const WORKER_MAX_STACK_SIZE = 512 * 1024;
export const WORKER_STACK_SIZE_MB = 8;

/**
 * Bytes of a paused program's VM memory (its pages that are not all zero) one snapshot holds at most: the heap may
 * reach the program's `memoryBytes`, and a larger VM is not captured (its program resumes by replay). As base64 in a
 * message or a stored record it takes a third more, within every channel's and store's limits.
 */
export const MAX_SNAPSHOT_BYTES = 8 * 1024 * 1024;

/** Free heap the post-prelude image keeps, so that ordinary allocations do not grow the memory. */
export const IMAGE_HEAP_HEADROOM_BYTES = 1024 * 1024;

/** Promise jobs drained between two checks of the deadline and the abort flag. */
export const JOBS_PER_INTERRUPT_CHECK = 256;

/** Cuts `text` to `max` characters, marking the cut with "…" (the prelude's `clip` does the same inside the VM). */
export function clip(text: string, max: number): string {
  if (text.length <= max) return text;
  // Not between the two halves of a surrogate pair.
  const end = isHighSurrogate(text.charCodeAt(max - 1)) ? max - 1 : max;
  return `${text.slice(0, end)}…`;
}

function isHighSurrogate(code: number): boolean {
  return code >= 0xd800 && code <= 0xdbff;
}

/** An error cut to the limits above (it may come from a VM that does not keep them). */
export function clipError(error: CodemodeError): CodemodeError {
  const clipped: CodemodeError = { kind: error.kind, message: clip(error.message, MAX_ERROR_MESSAGE_CHARS) };
  if (error.name !== undefined) clipped.name = clip(error.name, MAX_ERROR_NAME_CHARS);
  if (error.stack !== undefined) clipped.stack = clip(error.stack, MAX_ERROR_STACK_CHARS);
  return clipped;
}

/**
 * Default interrupt budget where clocks stand still while a script computes (Workers), pi-codemode's: about 2 s of a
 * tight loop on a laptop and about 10 s on Cloudflare.
 */
export const DEFAULT_INTERRUPT_BUDGET = 100_000;
/**
 * The interrupt budget counts polls in pi-codemode's unit, so that a budget means what it means there: one every
 * 10,000 of QuickJS's ticks (QuickJS-NG's own rate, QUICKJS_POLL_TICKS in engine/wasm/interrupt-poll.ts) and one every
 * BUDGET_POLL_JOBS promise jobs. Airlock's engine polls ten times as often (INTERRUPT_POLL_TICKS) and between batches
 * of JOBS_PER_INTERRUPT_CHECK jobs, and charges each of its polls the part of a budget poll it stands for, counted in
 * BUDGET_SHARES-ths of one (a whole number for both kinds).
 */
export const BUDGET_SHARES = 500;
/** Promise jobs a budget poll stands for (pi-codemode's engine polls between every 50 jobs). */
export const BUDGET_POLL_JOBS = 50;
/** The largest interrupt budget a sandbox accepts. */
export const MAX_INTERRUPT_BUDGET = 1_000_000_000;

/** Default memory limit of one VM on Workers (in a Durable Object, or inline): an isolate's VMs share its 128 MB. */
export const DEFAULT_REMOTE_MEMORY_LIMIT_BYTES = 32 * 1024 * 1024;
