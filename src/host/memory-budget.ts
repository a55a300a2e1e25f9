/**
 * The host's budget for guest memory: every execution holds its VM's memory limit from the budget while its VM runs
 * (VMs grow up to their limits, and what they hold outside the heap counts against the same limit), so that many
 * executions together cannot take more of the host's memory than the budget. An execution that does not fit waits
 * for others to end, its deadline still counting.
 */
import { nodeBuiltin } from "../platform/platform.ts";

/** The share of the machine's memory the default budget gives to guests. */
export const DEFAULT_GUEST_MEMORY_SHARE = 0.75;
/** The default budget where the machine's memory cannot be read (Workers): one isolate's 128 MB. */
export const PORTABLE_GUEST_MEMORY_BYTES = 128 * 1024 * 1024;

export class GuestMemoryBudget {
  private used = 0;
  private readonly listeners = new Set<() => void>();

  constructor(readonly totalBytes: number) {
    if (!Number.isSafeInteger(totalBytes) || totalBytes <= 0) {
      throw new RangeError(`maxTotalMemoryBytes must be a positive integer number of bytes, got ${String(totalBytes)}`);
    }
  }

  /** Bytes held now. */
  get usedBytes(): number {
    return this.used;
  }

  /** Takes `bytes` if they fit; false otherwise. */
  tryReserve(bytes: number): boolean {
    if (this.used + bytes > this.totalBytes) return false;
    this.used += bytes;
    return true;
  }

  release(bytes: number): void {
    this.used = Math.max(0, this.used - bytes);
    for (const listener of [...this.listeners]) listener();
  }

  /** Calls `listener` whenever memory is released (a pool then starts executions that wait). */
  onRelease(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
}

let shared: GuestMemoryBudget | undefined;

/**
 * The budget every sandbox shares unless it is given `maxTotalMemoryBytes` of its own:
 * DEFAULT_GUEST_MEMORY_SHARE of the machine's memory.
 */
export function hostMemoryBudget(): GuestMemoryBudget {
  shared ??= new GuestMemoryBudget(machineBudget());
  return shared;
}

/** A sandbox's budget: its own for `maxTotalMemoryBytes`, the shared one otherwise. */
export function budgetFor(maxTotalMemoryBytes: number | undefined): GuestMemoryBudget {
  return maxTotalMemoryBytes === undefined ? hostMemoryBudget() : new GuestMemoryBudget(maxTotalMemoryBytes);
}

function machineBudget(): number {
  const total = nodeBuiltin<{ totalmem(): number }>("os")?.totalmem();
  return total === undefined ? PORTABLE_GUEST_MEMORY_BYTES : Math.floor(total * DEFAULT_GUEST_MEMORY_SHARE);
}
