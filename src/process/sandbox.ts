/**
 * `ProcessCodemodeSandbox`: the worker pool moved into child processes that the operating system isolates. Tools
 * stay in the host; only the VMs and the bridge live in the children.
 */
import { fileURLToPath } from "node:url";
import type { PoolStats } from "../host/pool.ts";
import { cores, countOption, maxPoolSizeOption } from "../host/pool-options.ts";
import { budgetOption, CodemodeSandboxBase, checkOptions, DEFAULT_MEMORY_LIMIT_BYTES } from "../sandbox/base.ts";
import type { CodemodeSandboxBaseOptions } from "../types.ts";
import { type ProcessIsolationOptions, type ProcessProtections, resolveIsolation } from "./isolation/resolve.ts";
import { ProcessPool } from "./launcher.ts";

/** VMs one child keeps for executions that wait on tools at the same time. */
export const DEFAULT_VMS_PER_CHILD = 64;

export interface ProcessCodemodeSandboxOptions extends CodemodeSandboxBaseOptions {
  /** Child processes kept in the pool; default: the machine's available parallelism. */
  poolSize?: number;
  /** Child processes at most, when every child computes (see CodemodeSandboxOptions.maxPoolSize). */
  maxPoolSize?: number;
  /** VMs per child for concurrent executions; default `DEFAULT_VMS_PER_CHILD`. */
  maxVmsPerChild?: number;
  /** How the children are isolated; default: bubblewrap with seccomp and rlimits on Linux. */
  isolation?: ProcessIsolationOptions;
  /**
   * Child entry (absolute path or file URL); default: Airlock's own `dist/process/vm-side.js`. Its directory is bound
   * read-only into the sandbox. For hosts that move Airlock's files, and for tests that stand in a misbehaving child.
   */
  childEntry?: string | URL;
}

/**
 * Runs each execution in a warm pool of child processes, each on a VM in its exact post-prelude state. On Linux the
 * children run under bubblewrap (user, pid, net, ipc, uts and mount namespaces, a minimal read-only root, an empty
 * environment), a seccomp filter and rlimits, or under gVisor. Construction fails when a protection asked for is not
 * available, unless `isolation.allowDegraded` is set; `protections` reports what is active.
 */
export class ProcessCodemodeSandbox extends CodemodeSandboxBase {
  private readonly pool: ProcessPool;
  /** The protections every child of this sandbox runs under. */
  readonly protections: ProcessProtections;

  constructor(options: ProcessCodemodeSandboxOptions = {}) {
    checkOptions(options, "ProcessCodemodeSandbox", [
      "poolSize",
      "maxPoolSize",
      "maxVmsPerChild",
      "isolation",
      "childEntry",
    ]);
    const size = countOption(options.poolSize, "poolSize") ?? cores();
    const maxSize = maxPoolSizeOption(options.maxPoolSize, size);
    const budget = budgetOption(options);
    const maxVms = countOption(options.maxVmsPerChild, "maxVmsPerChild") ?? DEFAULT_VMS_PER_CHILD;
    const memoryLimitBytes =
      typeof options.memoryLimitBytes === "number" && options.memoryLimitBytes > 0
        ? options.memoryLimitBytes
        : DEFAULT_MEMORY_LIMIT_BYTES;
    const entry = options.childEntry === undefined ? undefined : toPath(options.childEntry);
    const isolation = resolveIsolation(options.isolation ?? {}, { maxVms, memoryLimitBytes, entry });
    const pool = new ProcessPool({ size, maxSize, capacity: maxVms, plan: isolation.plan, budget });
    super(options, pool);
    this.pool = pool;
    this.protections = isolation.protections;
  }

  /** Resolves once every child has booted; executions wait for this by themselves. Rejects if a child cannot boot. */
  async warm(): Promise<void> {
    await this.pool.warm(this.warmConfiguration());
    await this.warmHost();
  }

  /** What the pool did (see CodemodeSandbox.poolStats). */
  get poolStats(): PoolStats {
    return this.pool.stats;
  }

  /** Live child processes. */
  get processCount(): number {
    return this.pool.processCount;
  }

  /** Host process ids of the live children (the outermost process of each: bwrap, runsc or node). */
  get pids(): number[] {
    return this.pool.pids;
  }
}

function toPath(value: string | URL): string {
  if (value instanceof URL) return fileURLToPath(value);
  if (typeof value !== "string") throw new TypeError("childEntry must be a path or a file URL");
  return value.startsWith("file:") ? fileURLToPath(value) : value;
}
