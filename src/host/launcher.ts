/**
 * A launcher decides WHERE a VM runs (the calling thread, a worker thread, a child process); the host side of an
 * execution is the same for all of them and talks to the launcher only through this interface.
 */
import {
  type CallOutcome,
  type RunRequest,
  type StopReason,
  sandboxFailure,
  type VmEvent,
} from "../engine/protocol.ts";

/** A run request before the launcher assigned its ids. */
export type LaunchRequest = Omit<RunRequest, "exec" | "slot">;

export interface LaunchedRun {
  /** Hands a call's outcome to the VM; `seq` and `now` only in deterministic runs. */
  settle(id: number, outcome: CallOutcome, seq: number | null, now: number | null): void;
  /** Ends the run in the VM. The launcher force-stops a VM side that does not comply. */
  stop(reason: StopReason): void;
}

export interface Launcher {
  /**
   * Starts a run. Every event of the run reaches `onEvent`, ending with exactly one `done` (also when the VM side
   * fails: then a `sandbox` error).
   */
  launch(request: LaunchRequest, onEvent: (event: VmEvent) => void): LaunchedRun;
  /** Stops every run (each ends with `done`) and releases threads, processes and VMs. */
  close(): Promise<void>;
}

/** A launcher's record of one run on a VM side: where its events go, and the timer of a pending stop. */
export interface RunEntry {
  onEvent(event: VmEvent): void;
  stopTimer?: ReturnType<typeof setTimeout>;
}

/** Ends every run of a VM side that is gone or was killed, each with a `sandbox` error, and forgets them. */
export function failRuns(runs: Map<number, RunEntry>, reason: string): void {
  const open = [...runs];
  runs.clear();
  for (const [exec, entry] of open) {
    if (entry.stopTimer) clearTimeout(entry.stopTimer);
    entry.onEvent(sandboxFailure(exec, reason));
  }
}

/**
 * Arms a stopped run's grace period: when it runs out the VM side is killed, unless it is computing another run's
 * turn. A stop waits behind that turn (the VM side reads nothing meanwhile), whose own deadline bounds it: the grace
 * then starts again, so that one run's stop does not end the others.
 */
export function armStopGrace(entry: RunEntry, graceMs: number, computesAnother: () => boolean, kill: () => void): void {
  entry.stopTimer = setTimeout(() => {
    if (computesAnother()) armStopGrace(entry, graceMs, computesAnother, kill);
    else kill();
  }, graceMs);
  entry.stopTimer.unref?.();
}
