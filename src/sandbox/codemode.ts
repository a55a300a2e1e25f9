/** The two sandboxes of the core: a warm worker-thread pool (the default), and the calling thread. */
import { INLINE_MAX_STACK_SIZE } from "../engine/limits.ts";
import { loadQuickJSWasm } from "../engine/wasm.ts";
import { InlineLauncher } from "../host/inline.ts";
import { WorkerPool } from "../host/worker-pool.ts";
import type { CodemodeSandboxBaseOptions } from "../types.ts";
import { CodemodeSandboxBase } from "./base.ts";

/** VMs one thread keeps for executions that wait on tools at the same time. */
export const DEFAULT_VMS_PER_THREAD = 64;

export interface CodemodeSandboxOptions extends CodemodeSandboxBaseOptions {
  /** Compiled QuickJS module, usually from `loadQuickJSWasm()`; default: the installed `quickjs-wasi` binary. */
  wasm?: WebAssembly.Module;
  /** Worker entry; default: Airlock's own. Pass a file that imports `airlock/worker` when Airlock is bundled. */
  workerUrl?: string | URL;
  /** Worker threads in the pool; default: the machine's available parallelism. */
  poolSize?: number;
  /** VMs per worker for concurrent executions; default `DEFAULT_VMS_PER_THREAD`. */
  maxVmsPerWorker?: number;
}

export interface InlineCodemodeSandboxOptions extends CodemodeSandboxBaseOptions {
  wasm?: WebAssembly.Module;
  /** VMs kept on this thread for concurrent executions; default `DEFAULT_VMS_PER_THREAD`. */
  maxVms?: number;
}

/**
 * Runs each execution on a warm pool of worker threads, on a VM in its exact post-prelude state. A script that
 * computes occupies one worker, never the caller's thread, and a worker that does not stop is terminated.
 */
export class CodemodeSandbox extends CodemodeSandboxBase {
  private readonly pool: WorkerPool;

  constructor(options: CodemodeSandboxOptions = {}) {
    const pool = new WorkerPool({
      module: options.wasm ?? loadQuickJSWasm(),
      size: checkCount(options.poolSize, "poolSize"),
      maxVmsPerWorker: checkCount(options.maxVmsPerWorker, "maxVmsPerWorker") ?? DEFAULT_VMS_PER_THREAD,
      workerUrl: options.workerUrl,
    });
    super(options, pool);
    this.pool = pool;
  }

  /** Resolves once every worker has booted; executions wait for this by themselves. */
  warm(): Promise<void> {
    return this.pool.warm();
  }

  /** Live worker threads. */
  get threadCount(): number {
    return this.pool.threadCount;
  }
}

/**
 * Runs executions on the calling thread. A script that computes blocks the caller until it awaits a tool or its
 * deadline interrupts it; a single long built-in call (a huge regular expression) cannot be pre-empted here.
 */
export class InlineCodemodeSandbox extends CodemodeSandboxBase {
  private readonly inline: InlineLauncher;

  constructor(options: InlineCodemodeSandboxOptions = {}) {
    const inline = new InlineLauncher({
      module: options.wasm ?? loadQuickJSWasm(),
      maxStackSize: INLINE_MAX_STACK_SIZE,
      maxVms: checkCount(options.maxVms, "maxVms") ?? DEFAULT_VMS_PER_THREAD,
    });
    super(options, inline);
    this.inline = inline;
  }

  warm(): Promise<void> {
    return this.inline.warm();
  }
}

function checkCount(value: unknown, name: string): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== "number" || !Number.isInteger(value) || value < 1 || value > 1024) {
    throw new RangeError(`${name} must be an integer between 1 and 1024, got ${String(value)}`);
  }
  return value;
}
