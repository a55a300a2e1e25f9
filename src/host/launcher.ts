/**
 * A launcher decides WHERE a VM runs (the calling thread, or VM sides the pool keeps: worker threads, child
 * processes, a transport); the host side of an execution is the same for all of them and talks to the launcher only
 * through this interface.
 */
import type { CallOutcome, StopReason, UnplacedRequest, VmEvent } from "../engine/protocol.ts";

/**
 * A run request before the launcher placed it: the launcher assigns its ids, seeds it (so that a rebuilt run reads
 * the same random numbers), and says whether its VM side keeps a journal.
 */
export type LaunchRequest = UnplacedRequest;

/** What every request says: its code, its configuration, its memory limit and its calls at most. */
type RequiredFields = "code" | "configuration" | "memoryLimitBytes" | "maxCalls";

/**
 * A run request with every field written out (an object spread of this size takes V8's slow path, several microseconds
 * a run): `fields`, and for the rest an empty store and null, that is no deadline, no CPU limit, no interrupt budget,
 * not deterministic, no answers ahead, no snapshot, a script rather than a program.
 */
export function launchRequest(fields: Pick<LaunchRequest, RequiredFields> & Partial<LaunchRequest>): LaunchRequest {
  return {
    code: fields.code,
    configuration: fields.configuration,
    store: fields.store ?? {},
    memoryLimitBytes: fields.memoryLimitBytes,
    deadline: fields.deadline ?? null,
    cpuLimitMs: fields.cpuLimitMs ?? null,
    interruptBudget: fields.interruptBudget ?? null,
    maxCalls: fields.maxCalls,
    deterministic: fields.deterministic ?? null,
    answers: fields.answers ?? null,
    restore: fields.restore ?? null,
    program: fields.program ?? null,
  };
}

export interface LaunchedRun {
  /** Hands a call's outcome to the VM; `seq` and `now` only in deterministic runs. */
  settle(id: number, outcome: CallOutcome, seq: number | null, now: number | null): void;
  /** Ends the run in the VM. The launcher force-stops a VM side that does not comply. */
  stop(reason: StopReason): void;
  /**
   * Asks the VM side to capture the run between two of its turns (the `snapshot` command): a `snapshot` event answers,
   * unless the run ends first.
   */
  capture(): void;
}

export interface Launcher {
  /**
   * Starts a run. Every event of the run reaches `onEvent`, ending with exactly one `done` (also when the VM side
   * fails: then a `sandbox` error). `caller` is whose run it is (`execute`'s `caller`, undefined for none): a launcher
   * that keeps callers apart (the process tier) never has two callers' runs on one VM side at once.
   */
  launch(request: LaunchRequest, onEvent: (event: VmEvent) => void, caller?: unknown): LaunchedRun;
  /** Stops every run (each ends with `done`) and releases threads, processes and VMs. */
  close(): Promise<void>;
}
