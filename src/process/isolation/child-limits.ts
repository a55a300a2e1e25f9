/**
 * What a child of the process tier may use: its rlimits (the option as checked, and as the launch helper sets them),
 * its address space, stack and heap, and the node flags that keep it within them.
 */
import { checkInteger, refuseUnknownOptions } from "../../platform/options.ts";
import { type HelperLimit, RLIMIT } from "./helper.ts";

export interface ProcessLimits {
  /** RLIMIT_CPU of a child, in seconds of CPU time over its whole life (it retires itself at 80%). Default 600. */
  cpuSeconds?: number;
  /**
   * RLIMIT_AS of a child, in bytes. Default: NODE_ADDRESS_SPACE_BYTES for node itself plus, for each VM a child may
   * keep, its wasm memory's reservation (the VM memory limit plus WASM_MEMORY_HEADROOM_BYTES).
   */
  addressSpaceBytes?: number;
  /** RLIMIT_NOFILE of a child. Default 64. */
  openFiles?: number;
  /** RLIMIT_NPROC of a child (processes and threads of the sandbox's user). Default 32. */
  processes?: number;
}

/**
 * Address space node needs for itself (measured: ~1.0 GiB of reservations right after start, code space and heap
 * included), with room for its heap to grow to the cap.
 */
export const NODE_ADDRESS_SPACE_BYTES = 2 * 1024 * 1024 * 1024;
/** A VM's wasm memory beyond its heap limit: the QuickJS stack, static data and allocator slack. */
export const WASM_MEMORY_HEADROOM_BYTES = 64 * 1024 * 1024;
const WASM_PAGE = 65536;
export const DEFAULT_LIMITS: Omit<Required<ProcessLimits>, "addressSpaceBytes"> = {
  cpuSeconds: 600,
  openFiles: 64,
  processes: 32,
};
export const DEFAULT_HEAP_MB = 256;
/** RLIMIT_STACK of a child; V8 is told it has a little less (CHILD_STACK_KB) on the main thread. */
const CHILD_STACK_BYTES = 16 * 1024 * 1024;
const CHILD_STACK_KB = 7800;

/** The wasm pages a VM's memory may reach: its limit plus the headroom, at most the 4 GiB of a 32-bit memory. */
export function wasmPagesFor(memoryLimitBytes: number): number {
  return Math.min(65536, Math.ceil((memoryLimitBytes + WASM_MEMORY_HEADROOM_BYTES) / WASM_PAGE));
}

export function checkLimits(
  limits: ProcessLimits | undefined,
  wasmPages: number,
  maxVms: number,
): Required<ProcessLimits> {
  if (limits !== undefined && (limits === null || typeof limits !== "object")) {
    throw new TypeError("isolation.limits must be an object");
  }
  const out = { ...DEFAULT_LIMITS, addressSpaceBytes: NODE_ADDRESS_SPACE_BYTES + maxVms * wasmPages * WASM_PAGE };
  if (limits !== undefined) refuseUnknownOptions(limits, "isolation.limits", Object.keys(out));
  for (const key of Object.keys(out) as (keyof ProcessLimits)[]) {
    const value = limits?.[key];
    if (value === undefined) continue;
    out[key] = checkInteger(value, `isolation.limits.${key}`, 1, Infinity);
  }
  if (out.addressSpaceBytes < 2 * 1024 * 1024 * 1024) {
    throw new RangeError("isolation.limits.addressSpaceBytes must be at least 2 GiB: node alone reserves about 1 GiB");
  }
  if (out.openFiles < 16) throw new RangeError("isolation.limits.openFiles must be at least 16");
  if (out.processes < 12) throw new RangeError("isolation.limits.processes must be at least 12: node runs ~10 threads");
  return out;
}

/** The rlimits as the launch helper sets them. */
export function helperLimits(limits: Required<ProcessLimits>): HelperLimit[] {
  const same = (resource: number, value: number | bigint) => ({ resource, soft: BigInt(value), hard: BigInt(value) });
  return [
    { resource: RLIMIT.CPU, soft: BigInt(limits.cpuSeconds), hard: BigInt(limits.cpuSeconds + 5) },
    same(RLIMIT.FSIZE, 0),
    same(RLIMIT.STACK, CHILD_STACK_BYTES),
    same(RLIMIT.CORE, 0),
    same(RLIMIT.NPROC, limits.processes),
    same(RLIMIT.NOFILE, limits.openFiles),
    same(RLIMIT.MEMLOCK, 0),
    same(RLIMIT.AS, limits.addressSpaceBytes),
  ];
}

/**
 * Node's flags in a child. With an address space limit, wasm memories must not reserve what they never use: by
 * default V8 reserves 10 GiB per memory for guard regions (the trap handler), or else the whole 4 GiB a 32-bit memory
 * may reach. Without the trap handler and with a page cap, each VM reserves exactly its cap, and bounds checks are
 * explicit (measured here: no visible difference per execution).
 */
export function nodeFlags(heapMb: number, wasmPages: number | null): string[] {
  return [
    `--max-old-space-size=${heapMb}`,
    `--stack-size=${CHILD_STACK_KB}`,
    "--no-addons",
    "--disallow-code-generation-from-strings",
    ...(wasmPages !== null ? ["--disable-wasm-trap-handler", `--wasm-max-mem-pages=${wasmPages}`] : []),
  ];
}
