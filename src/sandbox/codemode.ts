/** The two sandboxes of the core: a warm worker-thread pool (the default), and the calling thread. */
import { INLINE_MAX_STACK_SIZE } from "../engine/limits.ts";
import { loadQuickJSWasm } from "../engine/wasm.ts";
import { DeferredLauncher } from "../host/deferred.ts";
import { InlineLauncher } from "../host/inline.ts";
import type { Launcher } from "../host/launcher.ts";
import type { PoolStats } from "../host/pool.ts";
import { defaultMaxPoolSize, WorkerPool } from "../host/worker-pool.ts";
import type { CodemodeSandboxBaseOptions } from "../types.ts";
import { budgetOption, CodemodeSandboxBase, checkCount, checkOptions } from "./base.ts";

/** VMs one thread keeps for executions that wait on tools at the same time. */
export const DEFAULT_VMS_PER_THREAD = 64;

export interface CodemodeSandboxOptions extends CodemodeSandboxBaseOptions {
  /**
   * Compiled QuickJS module (or a promise of it); default: the installed binary, from `loadQuickJSWasm()`, which
   * instruments its writes so that a reset restores only what an execution wrote. A module compiled otherwise works
   * too, with resets that restore its whole image (slower).
   */
  wasm?: WebAssembly.Module | Promise<WebAssembly.Module>;
  /** Worker entry; default: Airlock's own. Pass a file that imports `airlock-codemode/worker` when Airlock is bundled. */
  workerUrl?: string | URL;
  /** Worker threads kept in the pool; default: the machine's available parallelism. */
  poolSize?: number;
  /**
   * Worker threads at most: the pool grows past `poolSize` when every worker computes (new work never waits behind a
   * computing script) and shrinks back when idle. Default `MAX_POOL_SIZE_PER_CORE` per core.
   */
  maxPoolSize?: number;
  /** VMs per worker for concurrent executions; default `DEFAULT_VMS_PER_THREAD`. */
  maxVmsPerWorker?: number;
}

export interface InlineCodemodeSandboxOptions extends CodemodeSandboxBaseOptions {
  /** As CodemodeSandboxOptions.wasm. */
  wasm?: WebAssembly.Module | Promise<WebAssembly.Module>;
  /** VMs kept on this thread for concurrent executions; default `DEFAULT_VMS_PER_THREAD`. */
  maxVms?: number;
}

/**
 * Runs each execution on a warm pool of worker threads, on a VM in its exact post-prelude state. A script that
 * computes occupies one worker, never the caller's thread, and a worker that does not stop is terminated.
 */
export class CodemodeSandbox extends CodemodeSandboxBase {
  private readonly pool: WorkerPool | DeferredLauncher<WorkerPool>;

  constructor(options: CodemodeSandboxOptions = {}) {
    checkOptions(options, "CodemodeSandbox", ["wasm", "workerUrl", "poolSize", "maxPoolSize", "maxVmsPerWorker"]);
    const size = checkCount(options.poolSize, "poolSize");
    const maxSize = checkMaxPoolSize(options.maxPoolSize, size);
    const budget = budgetOption(options);
    const maxVmsPerWorker = checkCount(options.maxVmsPerWorker, "maxVmsPerWorker") ?? DEFAULT_VMS_PER_THREAD;
    const { workerUrl } = options;
    if (workerUrl !== undefined && typeof workerUrl !== "string" && !(workerUrl instanceof URL)) {
      throw new TypeError("workerUrl must be a path or a URL");
    }
    const make = (module: WebAssembly.Module) =>
      new WorkerPool({ module, size, maxSize, maxVmsPerWorker, workerUrl, budget });
    const pool = withModule(options.wasm, make);
    super(options, pool);
    this.pool = pool;
  }

  /** Resolves once every worker has booted; executions wait for this by themselves. */
  async warm(): Promise<void> {
    await this.pool.warm();
    if (this.pool instanceof DeferredLauncher) await this.pool.inner?.warm();
    await this.warmHost();
  }

  /** Live worker threads. */
  get threadCount(): number {
    const pool = this.pool instanceof DeferredLauncher ? this.pool.inner : this.pool;
    return pool?.threadCount ?? 0;
  }

  /** What the pool did: workers now and at most, workers lost while they had runs, runs moved to another worker. */
  get poolStats(): PoolStats {
    const pool = this.pool instanceof DeferredLauncher ? this.pool.inner : this.pool;
    return pool?.stats ?? { live: 0, peak: 0, lost: 0, moved: 0 };
  }
}

/**
 * Runs executions on the calling thread. A script that computes blocks the caller until it awaits a tool or its
 * deadline interrupts it; a single long built-in call (a huge regular expression) cannot be pre-empted here.
 */
export class InlineCodemodeSandbox extends CodemodeSandboxBase {
  private readonly inline: InlineLauncher | DeferredLauncher<InlineLauncher>;

  constructor(options: InlineCodemodeSandboxOptions = {}) {
    checkOptions(options, "InlineCodemodeSandbox", ["wasm", "maxVms"]);
    const maxVms = checkCount(options.maxVms, "maxVms") ?? DEFAULT_VMS_PER_THREAD;
    const budget = budgetOption(options);
    const make = (module: WebAssembly.Module) =>
      new InlineLauncher({ module, maxStackSize: INLINE_MAX_STACK_SIZE, maxVms, budget });
    const inline = withModule(options.wasm, make);
    super(options, inline);
    this.inline = inline;
  }

  async warm(): Promise<void> {
    await this.inline.warm();
    if (this.inline instanceof DeferredLauncher) await this.inline.inner?.warm();
    await this.warmHost();
  }
}

/** `maxPoolSize`, checked against `poolSize`; undefined: the default for the pool's size. */
export function checkMaxPoolSize(value: unknown, size: number | undefined): number | undefined {
  const max = checkCount(value, "maxPoolSize");
  if (max !== undefined && size !== undefined && max < size) {
    throw new RangeError(`maxPoolSize (${max}) must be at least poolSize (${size})`);
  }
  if (max === undefined && size !== undefined) return defaultMaxPoolSize(size);
  return max;
}

/** The launcher at once for a module (or the default one), or once a promised module has compiled. */
function withModule<L extends Launcher>(
  wasm: WebAssembly.Module | Promise<WebAssembly.Module> | undefined,
  make: (module: WebAssembly.Module) => L,
): L | DeferredLauncher<L> {
  if (wasm === undefined) return make(loadQuickJSWasm());
  if (wasm instanceof WebAssembly.Module) return make(wasm);
  if (typeof (wasm as Promise<unknown>)?.then !== "function") {
    throw new TypeError("wasm must be a WebAssembly.Module or a promise of one, for example loadQuickJSWasm()");
  }
  return new DeferredLauncher(Promise.resolve(wasm).then(make));
}
