/** Runs VMs on the calling thread. A script that computes blocks the caller until it awaits or is interrupted. */

import { placedRequest, sandboxFailure, type VmEvent } from "../engine/protocol.ts";
import { VmRunner } from "../engine/runner.ts";
import type { VmImage } from "../engine/vm.ts";
import type { LaunchedRun, Launcher, LaunchRequest } from "../host/launcher.ts";
import type { GuestMemoryBudget } from "../host/memory-budget.ts";
import { IdMap } from "../platform/id-map.ts";

export interface InlineLauncherOptions {
  module: WebAssembly.Module;
  maxStackSize: number;
  maxVms: number;
  budget: GuestMemoryBudget;
  /** The post-prelude image made beforehand for the module (see sandbox/module.ts), if any. */
  image?: VmImage;
}

interface InlineRun {
  onEvent(event: VmEvent): void;
  /** Bytes of the budget it holds (its memory limit, once it started). */
  bytes: number;
  /** Its memory limit. */
  wanted: number;
  /** Waiting for memory from the budget. */
  start: (() => void) | undefined;
}

export class InlineLauncher implements Launcher {
  private readonly runs = new IdMap<InlineRun>();
  /** Runs waiting for memory, in order. */
  private readonly waiting: number[] = [];
  private readonly runner: VmRunner;
  private readonly ready: Promise<void>;
  private readonly unlisten: () => void;
  private nextExec = 0;
  private closed = false;
  private booted = false;

  constructor(private readonly options: InlineLauncherOptions) {
    this.runner = new VmRunner({ ...options, emit: (event) => this.dispatch(event) });
    this.ready = this.runner.init().then(() => {
      this.booted = true;
    });
    // A failed boot is reported by each launch; keep it from surfacing as an unhandled rejection meanwhile.
    this.ready.catch(() => {});
    this.unlisten = options.budget.onRelease(() => this.startWaiting());
  }

  launch(request: LaunchRequest, onEvent: (event: VmEvent) => void): LaunchedRun {
    const exec = ++this.nextExec;
    const bytes = request.memoryLimitBytes;
    const run: InlineRun = { onEvent, bytes: 0, wanted: bytes, start: undefined };
    this.runs.set(exec, run);
    let started = false;
    const go = () => {
      if (!this.runs.has(exec)) return;
      if (this.closed) {
        this.fail(exec, "the sandbox is closed");
        return;
      }
      started = true;
      this.runner.handle({
        type: "run",
        request: placedRequest(request, { exec, slot: 0, random: null, journal: false, replayClock: null }),
      });
    };
    const failed = (error: unknown) => this.fail(exec, `the VM could not start: ${(error as Error).message}`);
    const begin = () => {
      // Start synchronously once the runner is up, so a trivial execution needs no extra turn of the event loop.
      if (this.booted) go();
      else this.ready.then(go, failed);
    };
    const budget = this.options.budget;
    if (bytes > budget.totalBytes) {
      queueMicrotask(() =>
        this.fail(
          exec,
          `the execution's memory limit of ${bytes} bytes is more than the host's guest-memory budget of ${budget.totalBytes} bytes (maxTotalMemoryBytes)`,
        ),
      );
    } else if (this.waiting.length === 0 && budget.tryReserve(bytes)) {
      run.bytes = bytes;
      begin();
    } else {
      run.start = () => {
        run.bytes = run.wanted;
        begin();
      };
      this.waiting.push(exec);
    }
    return {
      settle: (id, outcome, seq, now) => this.runner.handle({ type: "settle", exec, id, outcome, seq, now }),
      stop: (reason) => {
        if (started) this.runner.handle({ type: "stop", exec, reason });
        else this.forget(exec);
      },
      capture: () => {
        if (started) this.runner.handle({ type: "snapshot", exec });
      },
    };
  }

  /** Starts runs that waited for memory, in order, while it is there. */
  private startWaiting(): void {
    while (this.waiting.length > 0) {
      const exec = this.waiting[0] as number;
      const run = this.runs.get(exec);
      if (!run?.start) {
        this.waiting.shift();
        continue;
      }
      if (!this.options.budget.tryReserve(run.wanted)) return;
      this.waiting.shift();
      const start = run.start;
      run.start = undefined;
      start();
    }
  }

  /** Resolves once the first VM is booted. */
  warm(): Promise<void> {
    return this.ready;
  }

  async close(): Promise<void> {
    this.closed = true;
    this.unlisten();
    for (const exec of this.waiting.splice(0)) this.fail(exec, "the sandbox is closed");
    this.runner.close();
  }

  private dispatch(event: VmEvent): void {
    const run = this.runs.get(event.exec);
    if (!run) return;
    if (event.type === "done") this.forget(event.exec);
    run.onEvent(event);
  }

  /** The run's VM is done (or it never started): its memory goes back to the budget. */
  private forget(exec: number): void {
    const run = this.runs.get(exec);
    if (!run) return;
    this.runs.delete(exec);
    if (run.bytes > 0) this.options.budget.release(run.bytes);
  }

  private fail(exec: number, message: string): void {
    this.dispatch(sandboxFailure(exec, message));
  }
}
