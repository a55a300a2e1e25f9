/** A launcher that becomes available later, for example once a `wasm` module passed as a promise has compiled. */
import { type CallOutcome, type StopReason, sandboxFailure, type VmEvent } from "../engine/protocol.ts";
import type { LaunchedRun, Launcher, LaunchRequest } from "./launcher.ts";

export class DeferredLauncher<L extends Launcher = Launcher> implements Launcher {
  /** The launcher once it exists. */
  inner: L | undefined;
  private failure: Error | undefined;
  private readonly ready: Promise<void>;

  constructor(launcher: Promise<L>) {
    this.ready = launcher.then(
      (inner) => {
        this.inner = inner;
      },
      (error: unknown) => {
        this.failure = error instanceof Error ? error : new Error(String(error));
      },
    );
  }

  /** Resolves once the launcher is there (or failed). */
  warm(): Promise<void> {
    return this.ready;
  }

  launch(request: LaunchRequest, onEvent: (event: VmEvent) => void, caller?: unknown): LaunchedRun {
    if (this.inner) return this.inner.launch(request, onEvent, caller);
    // Commands given before the launcher exists are replayed, in order, once it does.
    let run: LaunchedRun | undefined;
    const queued: ((run: LaunchedRun) => void)[] = [];
    let stopped = false;
    void this.ready.then(() => {
      if (stopped) return;
      if (!this.inner) {
        const message = `the sandbox could not start: ${this.failure?.message ?? "unknown error"}`;
        onEvent(sandboxFailure(0, message));
        return;
      }
      run = this.inner.launch(request, onEvent, caller);
      for (const command of queued) command(run);
    });
    return {
      settle: (id: number, outcome: CallOutcome, seq: number | null, now: number | null) => {
        if (run) run.settle(id, outcome, seq, now);
        else queued.push((r) => r.settle(id, outcome, seq, now));
      },
      stop: (reason: StopReason) => {
        if (run) run.stop(reason);
        else stopped = true;
      },
      capture: () => {
        if (run) run.capture();
        else queued.push((r) => r.capture());
      },
    };
  }

  async close(): Promise<void> {
    await this.ready;
    await this.inner?.close();
  }
}
