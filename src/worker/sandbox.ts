/** The sandbox of the core on Node and Bun: a warm pool of worker threads (the default). */
import { prebuiltImage, vmImageOf } from "../engine/prebuilt-image.ts";
import { loadQuickJSWasm } from "../engine/wasm/load.ts";
import { DeferredLauncher } from "../host/deferred.ts";
import type { PoolStats } from "../host/pool.ts";
import { cores, countOption, DEFAULT_VMS_PER_THREAD, maxPoolSizeOption } from "../host/pool-options.ts";
import { budgetOption, CodemodeSandboxBase, checkOptions } from "../sandbox/base.ts";
import { useDefaultQuickJSWasm, withModule } from "../sandbox/module.ts";
import type { CodemodeSandboxBaseOptions } from "../types.ts";
import { WorkerPool } from "./launcher.ts";

// On Node and Bun the sandboxes default to the installed QuickJS binary, read from disk.
useDefaultQuickJSWasm(
  () => loadQuickJSWasm(),
  (module) => {
    const image = prebuiltImage(module);
    return image && vmImageOf(image);
  },
);

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

/**
 * Runs each execution on a warm pool of worker threads, on a VM in its exact post-prelude state. A script that
 * computes occupies one worker, never the caller's thread, and a worker that does not stop is terminated.
 */
export class CodemodeSandbox extends CodemodeSandboxBase {
  private readonly pool: WorkerPool | DeferredLauncher<WorkerPool>;

  constructor(options: CodemodeSandboxOptions = {}) {
    checkOptions(options, "CodemodeSandbox", ["wasm", "workerUrl", "poolSize", "maxPoolSize", "maxVmsPerWorker"]);
    const size = countOption(options.poolSize, "poolSize") ?? cores();
    const maxSize = maxPoolSizeOption(options.maxPoolSize, size);
    const budget = budgetOption(options);
    const maxVmsPerWorker = countOption(options.maxVmsPerWorker, "maxVmsPerWorker") ?? DEFAULT_VMS_PER_THREAD;
    const { workerUrl } = options;
    if (workerUrl !== undefined && typeof workerUrl !== "string" && !(workerUrl instanceof URL)) {
      throw new TypeError("workerUrl must be a path or a URL");
    }
    const make = (module: WebAssembly.Module) =>
      new WorkerPool({ module, size, maxSize, maxVmsPerWorker, workerUrl, budget });
    const pool = withModule(options.wasm, make, "CodemodeSandbox");
    super(options, pool);
    this.pool = pool;
  }

  /** Resolves once every worker has booted; executions wait for this by themselves. */
  async warm(): Promise<void> {
    const prime = this.warmConfiguration();
    if (this.pool instanceof DeferredLauncher) {
      await this.pool.warm();
      await this.pool.inner?.warm(prime);
    } else await this.pool.warm(prime);
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
