/**
 * The process tier's launcher: the scheduler (host/pool.ts) over child channels. Each child boots once (module,
 * prelude, image) and then runs many executions; one that breaks the protocol, floods its channel or does not stop a
 * run in time is killed once with SIGKILL (its process group), and its other executions are rebuilt in another child.
 */
import type { RunConfiguration, VmEvent } from "../engine/protocol.ts";
import type { LaunchedRun, Launcher, LaunchRequest } from "../host/launcher.ts";
import type { GuestMemoryBudget } from "../host/memory-budget.ts";
import { PeerPool, type PoolStats, REMOTE_STOP_GRACE_MS } from "../host/pool.ts";
import { type ChildChannel, type ChildPlan, openChildChannel } from "./channel.ts";

/** Time a child has to boot before it counts as failed. */
const BOOT_TIMEOUT_MS = 30_000;

export interface ProcessPoolOptions {
  size: number;
  maxSize: number;
  /** Runs one child takes at once (its VMs). */
  capacity: number;
  /** Builds the plan of each new child (called for replacements too). */
  plan: () => ChildPlan;
  budget: GuestMemoryBudget;
  stopGraceMs?: number;
  maxFrameBytes?: number;
}

export class ProcessPool implements Launcher {
  private readonly pool: PeerPool;
  private readonly channels = new Set<ChildChannel>();
  readonly size: number;

  constructor(options: ProcessPoolOptions) {
    this.size = options.size;
    this.pool = new PeerPool({
      open: () => {
        const channel = openChildChannel(options.plan(), options.maxFrameBytes);
        this.channels.add(channel);
        channel.process.once("exit", () => this.channels.delete(channel));
        return channel;
      },
      size: options.size,
      maxSize: options.maxSize,
      capacity: options.capacity,
      what: "child process",
      budget: options.budget,
      bootTimeoutMs: BOOT_TIMEOUT_MS,
      stopGraceMs: options.stopGraceMs ?? REMOTE_STOP_GRACE_MS,
      // A child is a boundary the operating system keeps: one that a program broke out of holds no other caller's runs.
      separateCallers: true,
    });
  }

  /**
   * Resolves once every child has booted and run its warm-up, primed with `prime` (see PeerPool.warm); rejects with
   * the reason of the first that could not.
   */
  warm(prime?: RunConfiguration): Promise<void> {
    return this.pool.warm(prime);
  }

  /** Live child processes (for tests and monitoring). */
  get processCount(): number {
    return this.pool.peerCount;
  }

  /** Host pids of the live children (for tests and monitoring). */
  get pids(): number[] {
    return this.pool.livePeers
      .map((peer) => (peer.channel as ChildChannel).process.pid)
      .filter((pid): pid is number => pid !== undefined);
  }

  get stats(): PoolStats {
    return this.pool.stats;
  }

  launch(request: LaunchRequest, onEvent: (event: VmEvent) => void, caller?: unknown): LaunchedRun {
    return this.pool.launch(request, onEvent, caller);
  }

  close(): Promise<void> {
    return this.pool.close();
  }
}
