/** Limits of the script environment. Each is enforced inside the VM and checked again on the host. */

/** Characters of text and base64 image data a script may output in one execution. */
export const MAX_OUTPUT_CHARS = 16 * 1024 * 1024;
/** Output items (text, console and image) a script may produce in one execution. */
export const MAX_OUTPUT_ITEMS = 100_000;
/** Characters of JSON one `store()` value may have. */
export const MAX_STORE_VALUE_CHARS = 256 * 1024;
/** Characters of JSON all stored values together may have. */
export const MAX_STORE_TOTAL_CHARS = 1024 * 1024;
/** Characters of JSON one value crossing the VM boundary may have: tool arguments, tool results, the return value. */
export const MAX_VALUE_CHARS = 16 * 1024 * 1024;

/**
 * Latest clock value of a deterministic run, in ms since the epoch (in 2554): the VM reads its clock as unsigned 64-bit
 * nanoseconds (WASI), so earlier than 0 or later than this would wrap around to another date.
 */
export const MAX_CLOCK_MS = 18_446_744_073_709;

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

/** Free heap the post-prelude image keeps, so that ordinary allocations do not grow the memory. */
export const IMAGE_HEAP_HEADROOM_BYTES = 1024 * 1024;

/** Promise jobs drained between two checks of the deadline and the abort flag. */
export const JOBS_PER_INTERRUPT_CHECK = 256;
