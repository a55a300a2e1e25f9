/**
 * VMs on a warm pool of worker threads: the scheduler (pool.ts) over worker channels. Each worker boots once
 * (module, prelude, image) and then runs many executions, each on its own post-prelude VM; executions waiting on
 * tools do not block each other, new work avoids a worker that computes, and a worker that does not stop a run in
 * time is terminated, its other executions rebuilt elsewhere.
 */
import type { RunConfiguration, VmEvent } from "../engine/protocol.ts";
import type { LaunchedRun, Launcher, LaunchRequest } from "../host/launcher.ts";
import type { GuestMemoryBudget } from "../host/memory-budget.ts";
import { PeerPool, type PoolStats } from "../host/pool.ts";
import { cores, defaultMaxPoolSize } from "../host/pool-options.ts";
import { openWorkerChannel } from "./channel.ts";

/** Time a worker has to boot. */
const BOOT_TIMEOUT_MS = 30_000;

export interface WorkerPoolOptions {
  module: WebAssembly.Module;
  /** Worker threads kept; default: the machine's available parallelism. */
  size?: number;
  /** Worker threads at most, when every one computes; default MAX_POOL_SIZE_PER_CORE per core (at least `size`). */
  maxSize?: number;
  /** VMs per worker, for executions that wait on tools concurrently. */
  maxVmsPerWorker: number;
  workerUrl?: string | URL;
  budget: GuestMemoryBudget;
}

export class WorkerPool implements Launcher {
  private readonly pool: PeerPool;
  readonly size: number;

  constructor(options: WorkerPoolOptions) {
    this.size = options.size ?? cores();
    this.pool = new PeerPool({
      open: () =>
        openWorkerChannel({ module: options.module, maxVms: options.maxVmsPerWorker, workerUrl: options.workerUrl }),
      size: this.size,
      maxSize: options.maxSize ?? defaultMaxPoolSize(this.size),
      capacity: options.maxVmsPerWorker,
      what: "worker",
      budget: options.budget,
      bootTimeoutMs: BOOT_TIMEOUT_MS,
    });
  }

  /** Resolves once every worker has booted and run its warm-up, primed with `prime` (see PeerPool.warm). */
  warm(prime?: RunConfiguration): Promise<void> {
    return this.pool.warm(prime);
  }

  /** Live worker threads (for tests and monitoring). */
  get threadCount(): number {
    return this.pool.peerCount;
  }

  get stats(): PoolStats {
    return this.pool.stats;
  }

  launch(request: LaunchRequest, onEvent: (event: VmEvent) => void): LaunchedRun {
    return this.pool.launch(request, onEvent);
  }

  close(): Promise<void> {
    return this.pool.close();
  }
}
