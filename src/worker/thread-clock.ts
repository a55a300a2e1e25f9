/**
 * The CPU time of one of this process's threads, from Linux's /proc. The pool judges a worker's turn by it rather
 * than by the wall clock alone: on a machine with more busy threads than cores, a worker that waits for a core looks,
 * by the wall clock, like one that computes, and the pool then moved runs away from it and started spares, which only
 * added threads to the cores' queue (64 trivial executions in flight lost a fifth of their throughput that way).
 * Elsewhere (no /proc) the pool keeps the wall clock.
 */
import { readFileSync, readlinkSync } from "node:fs";

/** The OS id of the calling thread, 0 when this system does not say (no /proc). */
export function currentThreadId(): number {
  try {
    // "<pid>/task/<tid>"
    const id = Number(readlinkSync("/proc/thread-self").split("/").pop());
    return Number.isInteger(id) && id > 0 ? id : 0;
  } catch {
    return 0;
  }
}

/**
 * Milliseconds thread `id` of this process has computed so far, undefined when it cannot be read. The kernel adds to
 * it at each scheduler tick and switch, so for a thread computing right now it lags by up to a tick (1-10 ms).
 */
export function threadCpuMs(id: number): number | undefined {
  try {
    // schedstat: "<ns on a CPU> <ns waiting for one> <timeslices>"
    const ns = Number(readFileSync(`/proc/self/task/${id}/schedstat`, "latin1").split(" ", 1)[0]);
    return Number.isFinite(ns) ? ns / 1e6 : undefined;
  } catch {
    return undefined;
  }
}
