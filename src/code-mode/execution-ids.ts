/**
 * Execution ids an executor has seen: one that is running or among the last `EXECUTION_ID_MEMORY` finished is refused
 * (CONFLICT), so that a retry with a stale id fails instead of reusing its call ids.
 */

/** Finished execution ids the executor remembers to refuse their reuse (CONFLICT). */
export const EXECUTION_ID_MEMORY = 100_000;

/** Execution ids that are running or recently finished. */
export class ExecutionIds {
  private readonly running = new Set<string>();
  private readonly finished = new Set<string>();
  private readonly ring: (string | undefined)[];
  private next = 0;

  constructor(private readonly size: number) {
    this.ring = new Array(size);
  }

  claim(id: string): boolean {
    if (this.running.has(id) || this.finished.has(id)) return false;
    this.running.add(id);
    return true;
  }

  finish(id: string): void {
    this.running.delete(id);
    const evicted = this.ring[this.next];
    if (evicted !== undefined) this.finished.delete(evicted);
    this.ring[this.next] = id;
    this.next = (this.next + 1) % this.size;
    this.finished.add(id);
  }
}
