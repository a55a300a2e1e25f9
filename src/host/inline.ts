/** Runs VMs on the calling thread. A script that computes blocks the caller until it awaits or is interrupted. */
import { sandboxFailure, type VmEvent } from "../engine/protocol.ts";
import { VmRunner } from "../engine/runner.ts";
import type { LaunchedRun, Launcher, LaunchRequest } from "./launcher.ts";

export interface InlineLauncherOptions {
  module: WebAssembly.Module;
  maxStackSize: number;
  maxVms: number;
}

export class InlineLauncher implements Launcher {
  private readonly listeners = new Map<number, (event: VmEvent) => void>();
  private readonly runner: VmRunner;
  private readonly ready: Promise<void>;
  private nextExec = 0;
  private closed = false;

  constructor(options: InlineLauncherOptions) {
    this.runner = new VmRunner({ ...options, emit: (event) => this.dispatch(event) });
    this.ready = this.runner.init().then(() => {
      this.booted = true;
    });
    // A failed boot is reported by each launch; keep it from surfacing as an unhandled rejection meanwhile.
    this.ready.catch(() => {});
  }

  launch(request: LaunchRequest, onEvent: (event: VmEvent) => void): LaunchedRun {
    const exec = ++this.nextExec;
    this.listeners.set(exec, onEvent);
    let started = false;
    const go = () => {
      if (!this.listeners.has(exec)) return;
      if (this.closed) {
        this.fail(exec, "the sandbox is closed");
        return;
      }
      started = true;
      this.runner.handle({ type: "run", request: { ...request, exec, slot: 0 } });
    };
    const failed = (error: unknown) => this.fail(exec, `the VM could not start: ${(error as Error).message}`);
    // Start synchronously once the runner is up, so a trivial execution needs no extra turn of the event loop.
    if (this.booted) go();
    else this.ready.then(go, failed);
    return {
      settle: (id, outcome, seq, now) => this.runner.handle({ type: "settle", exec, id, outcome, seq, now }),
      stop: (reason) => {
        if (started) this.runner.handle({ type: "stop", exec, reason });
        else this.listeners.delete(exec);
      },
    };
  }

  private booted = false;

  /** Resolves once the first VM is booted. */
  warm(): Promise<void> {
    return this.ready;
  }

  async close(): Promise<void> {
    this.closed = true;
    this.runner.close();
  }

  private dispatch(event: VmEvent): void {
    const listener = this.listeners.get(event.exec);
    if (!listener) return;
    if (event.type === "done") this.listeners.delete(event.exec);
    listener(event);
  }

  private fail(exec: number, message: string): void {
    this.dispatch(sandboxFailure(exec, message));
  }
}
