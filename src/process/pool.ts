/**
 * Runs VMs in a warm pool of child processes. Each child boots once (module, prelude, image) and then runs many
 * executions. The host and a child share no memory: commands and events travel as length-prefixed JSON frames over
 * the child's stdin and stdout, and every frame from the child is validated like untrusted input (known message,
 * exact fields, ids in order). A child that breaks the protocol, floods its channel or does not stop a run in time is
 * killed once with SIGKILL; its open executions end with `sandbox` errors and a new child replaces it off the request
 * path. Its stderr is drained and only a bounded tail is kept for error messages.
 */
import { type ChildProcess, spawn } from "node:child_process";
import type { Readable, Writable } from "node:stream";
import { PROTOCOL_VERSION, ProtocolError, parseVmEvent, sandboxFailure, type VmEvent } from "../engine/protocol.ts";
import {
  armStopGrace,
  failRuns,
  type LaunchedRun,
  type Launcher,
  type LaunchRequest,
  type RunEntry,
} from "../host/launcher.ts";
import { encodeFrame, FrameReader, MAX_FRAME_BYTES } from "./frames.ts";

/** Time a child has to end a stopped run before it is killed. */
export const PROCESS_STOP_GRACE_MS = 250;
/** Bytes of a child's stderr kept for error messages; the rest is dropped as it arrives. */
const STDERR_TAIL_BYTES = 4096;
/** Time a child has to boot before it counts as failed. */
const BOOT_TIMEOUT_MS = 30_000;

/** How to start one child: the command, and bytes to hand it on extra descriptors (3, 4, ...). */
export interface ChildPlan {
  command: string;
  args: string[];
  env: Record<string, string>;
  uid?: number;
  gid?: number;
  /** Written to descriptor 3 + i of the child and then closed. */
  fds: Buffer[];
  /** Written to the child's stdin ahead of the first frame (the launch helper's configuration). */
  stdinPrefix?: Buffer;
  /** Exit statuses that mean something before the child booted (the launch helper's), as error messages. */
  exitReasons?: Record<number, string>;
  /** Runs once the child has exited (removes state a runtime left behind, such as a gVisor container). */
  cleanup?: () => Promise<void> | void;
}

export interface ProcessPoolOptions {
  size: number;
  /** Builds the plan of each new child (called for replacements too). */
  plan: () => ChildPlan;
  stopGraceMs?: number;
  maxFrameBytes?: number;
}

interface ChildRunEntry extends RunEntry {
  deterministic: boolean;
  /** Ids the child gave out so far: each call must carry the next one. */
  lastCallId: number;
  events: number;
  stopping?: boolean;
}

class PoolChild {
  readonly process: ChildProcess;
  readonly runs = new Map<number, ChildRunEntry>();
  readonly ready: Promise<void>;
  readonly exited: Promise<void>;
  dead = false;
  booted = false;
  retiring = false;
  /** The run whose turn the child said it has been computing for a while (see LONG_TURN_MS); null otherwise. */
  busyExec: number | null = null;
  private readonly reader: FrameReader;
  private stderrTail = "";
  private resolveReady!: () => void;
  private rejectReady!: (error: Error) => void;
  private bootTimer: ReturnType<typeof setTimeout> | undefined;
  private cleanup: (() => void) | undefined;

  constructor(
    private readonly pool: ProcessPool,
    plan: ChildPlan,
    maxFrameBytes: number,
  ) {
    this.reader = new FrameReader(maxFrameBytes);
    this.cleanup = plan.cleanup;
    this.ready = new Promise((resolve, reject) => {
      this.resolveReady = resolve;
      this.rejectReady = reject;
    });
    this.ready.catch(() => {});
    const child = spawn(plan.command, plan.args, {
      stdio: ["pipe", "pipe", "pipe", ...plan.fds.map(() => "pipe" as const)],
      env: plan.env,
      // Its own process group: a kill reaches bwrap's sandbox process too while that is still being set up (bwrap
      // arms its parent-death signal only afterwards, so killing the outer process alone could strand it).
      detached: true,
      ...(plan.uid !== undefined ? { uid: plan.uid } : {}),
      ...(plan.gid !== undefined ? { gid: plan.gid } : {}),
    });
    this.process = child;
    // "exit", not "close": a runtime's helper processes may hold the pipes open after the child itself is gone.
    const gone = new Promise<void>((resolve) => {
      child.once("exit", () => resolve());
      child.once("error", () => resolve());
    });
    this.exited = gone.then(async () => {
      const cleanup = this.cleanup;
      this.cleanup = undefined;
      try {
        await cleanup?.();
      } catch {
        // Best effort: nothing is left to fail.
      }
      for (const stream of child.stdio) stream?.destroy();
    });
    child.once("error", (error) => this.kill(`the child process could not start: ${error.message}`));
    child.once("exit", (code, signal) => {
      const how = signal ? `signal ${signal}` : `code ${code}`;
      const known = !this.booted && code !== null ? plan.exitReasons?.[code] : undefined;
      this.kill(`${known ? `${known}: ` : ""}the child process exited with ${how}${this.stderrNote()}`);
    });
    plan.fds.forEach((data, i) => {
      const stream = child.stdio[3 + i] as Writable | null;
      stream?.on("error", () => {});
      stream?.end(data);
    });
    (child.stdin as Writable).on("error", () => {});
    if (plan.stdinPrefix) (child.stdin as Writable).write(plan.stdinPrefix);
    (child.stdout as Readable).on("data", (chunk: Buffer) => this.onData(chunk));
    (child.stderr as Readable).on("data", (chunk: Buffer) => {
      this.stderrTail = (this.stderrTail + chunk.toString("utf8", 0, Math.min(chunk.length, STDERR_TAIL_BYTES))).slice(
        -STDERR_TAIL_BYTES,
      );
    });
    this.bootTimer = setTimeout(() => this.kill("the child process did not boot in time"), BOOT_TIMEOUT_MS);
    this.bootTimer.unref();
  }

  private stderrNote(): string {
    const tail = this.stderrTail.trim().split("\n").slice(-3).join(" | ").slice(-400);
    return tail ? ` (stderr: ${tail})` : "";
  }

  private onData(chunk: Buffer): void {
    if (this.dead) return;
    let messages: unknown[];
    try {
      messages = this.reader.push(chunk);
    } catch (error) {
      this.kill(`the child broke the protocol: ${(error as Error).message}`);
      return;
    }
    for (const message of messages) {
      if (this.dead) return;
      try {
        this.onMessage(message);
      } catch (error) {
        if (!(error instanceof ProtocolError)) throw error;
        this.kill(`the child broke the protocol: ${error.message}`);
        return;
      }
    }
  }

  private onMessage(message: unknown): void {
    const m = message as { type?: unknown } | null;
    if (!this.booted) {
      if (m !== null && typeof m === "object" && m.type === "ready") {
        const r = m as { protocol?: unknown; versions?: unknown };
        exact(m, ["type", "protocol", "versions"], "ready");
        if (r.protocol !== PROTOCOL_VERSION) throw new ProtocolError("the child speaks another protocol version");
        if (r.versions === null || typeof r.versions !== "object") throw new ProtocolError("ready.versions is invalid");
        this.booted = true;
        if (this.bootTimer) clearTimeout(this.bootTimer);
        // A booting child keeps the host alive (someone may await warm()); an idle one does not.
        if (this.runs.size === 0) this.setRef(false);
        this.resolveReady();
        return;
      }
      if (m !== null && typeof m === "object" && m.type === "failed") {
        const text = (m as { message?: unknown }).message;
        this.kill(`the child could not boot: ${typeof text === "string" ? text.slice(0, 400) : "no reason given"}`);
        return;
      }
      throw new ProtocolError("the child sent a message before it was ready");
    }
    if (m !== null && typeof m === "object" && m.type === "retire") {
      exact(m, ["type"], "retire");
      if (this.retiring) throw new ProtocolError("the child asked twice to retire");
      this.retiring = true;
      this.pool.retire(this);
      return;
    }
    if (m !== null && typeof m === "object" && m.type === "busy") {
      exact(m, ["type", "exec"], "busy");
      const exec = (m as { exec?: unknown }).exec;
      if (exec !== null && !this.runs.has(exec as number)) {
        throw new ProtocolError("the child said it computes an execution it does not run");
      }
      this.busyExec = exec as number | null;
      return;
    }
    if (m !== null && typeof m === "object" && (m.type === "ready" || m.type === "failed")) {
      throw new ProtocolError(`the child sent "${m.type}" after it was ready`);
    }
    const event = parseVmEvent(message);
    const entry = this.runs.get(event.exec);
    if (!entry) throw new ProtocolError("the child sent a message for an execution it does not run");
    entry.events++;
    switch (event.type) {
      case "started":
        if (!entry.deterministic || entry.events !== 1) throw new ProtocolError("started arrived out of order");
        break;
      case "idle":
        if (!entry.deterministic) throw new ProtocolError("idle arrived for a run that is not deterministic");
        break;
      case "call":
        if (event.id !== entry.lastCallId + 1) throw new ProtocolError("a call id is repeated or out of order");
        entry.lastCallId = event.id;
        break;
      case "done":
        this.finishRun(event.exec, entry);
        break;
    }
    entry.onEvent(event);
  }

  write(message: unknown): void {
    const error = this.writeOwn(message);
    if (error !== undefined) this.kill(`could not send to the child: ${error}`);
  }

  /**
   * Sends a frame made from one execution's input (its request, a call's answer), which can be larger than a frame
   * may be. That is the execution's fault, not the child's: the frame is not sent and the error is returned for that
   * execution alone, while the child and its other runs go on.
   */
  writeOwn(message: unknown): string | undefined {
    if (this.dead) return undefined;
    let frame: Buffer;
    try {
      frame = encodeFrame(message);
    } catch (error) {
      return (error as Error).message;
    }
    try {
      (this.process.stdin as Writable).write(frame);
    } catch (error) {
      this.kill(`could not send to the child: ${(error as Error).message}`);
    }
    return undefined;
  }

  /** Whether the child said it computes the turn of a live run other than `exec` (see busyExec). */
  computesAnother(exec: number): boolean {
    const busy = this.busyExec;
    return busy !== null && busy !== exec && this.runs.has(busy);
  }

  /** Whether a run here was told to stop and has not ended yet. */
  stopping(): boolean {
    for (const entry of this.runs.values()) if (entry.stopping) return true;
    return false;
  }

  addRun(exec: number, entry: ChildRunEntry): void {
    if (this.runs.size === 0 && this.booted) this.setRef(true);
    this.runs.set(exec, entry);
  }

  finishRun(exec: number, entry: ChildRunEntry): void {
    this.runs.delete(exec);
    if (this.busyExec === exec) this.busyExec = null;
    if (entry.stopTimer) clearTimeout(entry.stopTimer);
    if (this.runs.size === 0) {
      if (this.booted) this.setRef(false);
      if (this.retiring) this.kill("the child retired");
    }
  }

  /** An idle pool does not keep the host's event loop alive. */
  private setRef(on: boolean): void {
    const handles = [this.process, this.process.stdin, this.process.stdout, this.process.stderr] as unknown as {
      ref?: () => void;
      unref?: () => void;
    }[];
    for (const h of handles) {
      if (on) h?.ref?.();
      else h?.unref?.();
    }
  }

  /** Kills the child once (SIGKILL) and fails its open runs with a `sandbox` error. */
  kill(reason: string): void {
    if (this.dead) return;
    this.dead = true;
    if (this.bootTimer) clearTimeout(this.bootTimer);
    this.rejectReady(new Error(reason));
    if (this.process.exitCode === null && this.process.signalCode === null) {
      try {
        if (this.process.pid !== undefined) process.kill(-this.process.pid, "SIGKILL");
      } catch {
        this.process.kill("SIGKILL");
      }
    }
    this.process.stdin?.destroy();
    // Until it is gone, the dying child keeps the host alive, so that close() sees its exit.
    this.setRef(true);
    failRuns(this.runs, reason);
    this.pool.replace(this);
  }
}

function exact(value: object, allowed: string[], what: string): void {
  for (const key of Object.keys(value)) {
    if (!allowed.includes(key)) throw new ProtocolError(`${what} has an unknown field "${key}"`);
  }
}

export class ProcessPool implements Launcher {
  private children: PoolChild[] = [];
  private readonly retired = new Set<PoolChild>();
  private closed = false;
  private lastExec = 0;
  readonly size: number;
  private readonly stopGraceMs: number;
  private readonly maxFrameBytes: number;

  constructor(private readonly options: ProcessPoolOptions) {
    this.size = options.size;
    if (!Number.isInteger(this.size) || this.size < 1) throw new RangeError("poolSize must be a positive integer");
    this.stopGraceMs = options.stopGraceMs ?? PROCESS_STOP_GRACE_MS;
    this.maxFrameBytes = options.maxFrameBytes ?? MAX_FRAME_BYTES;
    for (let i = 0; i < this.size; i++) this.children.push(this.spawn());
  }

  private spawn(): PoolChild {
    return new PoolChild(this, this.options.plan(), this.maxFrameBytes);
  }

  /** Resolves once every child has booted; rejects with the reason of the first that could not. */
  async warm(): Promise<void> {
    await Promise.all(this.children.map((c) => c.ready));
  }

  /** Live child processes (for tests and monitoring). */
  get processCount(): number {
    return this.children.filter((c) => !c.dead).length;
  }

  /** Host pids of the live children (for tests and monitoring). */
  get pids(): number[] {
    return this.children.filter((c) => !c.dead && c.process.pid !== undefined).map((c) => c.process.pid as number);
  }

  launch(request: LaunchRequest, onEvent: (event: VmEvent) => void): LaunchedRun {
    const exec = ++this.lastExec;
    const noop: LaunchedRun = { settle: () => {}, stop: () => {} };
    if (this.closed) {
      queueMicrotask(() => onEvent(sandboxFailure(exec, "the sandbox is closed")));
      return noop;
    }
    const child = this.pick();
    const entry: ChildRunEntry = { onEvent, deterministic: request.deterministic !== null, lastCallId: 0, events: 0 };
    child.addRun(exec, entry);
    const refused = child.writeOwn({ type: "run", request: { ...request, exec, slot: 0 } });
    if (refused !== undefined) {
      child.finishRun(exec, entry);
      queueMicrotask(() => onEvent(sandboxFailure(exec, `the execution is too large to send to a child: ${refused}`)));
      return noop;
    }
    return {
      settle: (id, outcome, seq, now) => {
        if (!child.runs.has(exec)) return;
        const refused = child.writeOwn({ type: "settle", exec, id, outcome, seq, now });
        // The call fails in the script instead, as a tool result over the size limit does.
        if (refused !== undefined) {
          const message = `the answer to this call is too large to send to the sandbox's child process: ${refused}`;
          child.write({ type: "settle", exec, id, outcome: { ok: false, message, properties: undefined }, seq, now });
        }
      },
      stop: (reason) => {
        if (!child.runs.has(exec) || entry.stopping) return;
        entry.stopping = true;
        child.write({ type: "stop", exec, reason });
        // A child still booting takes the run and the stop together once it is up: the grace period starts then.
        const arm = () => {
          if (!child.runs.has(exec)) return;
          armStopGrace(
            entry,
            this.stopGraceMs,
            () => child.computesAnother(exec),
            () => child.kill("the child did not stop a run in time"),
          );
        };
        if (child.booted) arm();
        else child.ready.then(arm, () => {});
      },
    };
  }

  /**
   * The live child with the fewest runs, preferring one that is not stopping a run (it may be killed when that run
   * does not stop in time, and a new run there with it); one that failed to boot is restarted here, on demand.
   */
  private pick(): PoolChild {
    const better = (c: PoolChild, than: PoolChild) => {
      const stopping = Number(c.stopping()) - Number(than.stopping());
      return stopping !== 0 ? stopping < 0 : c.runs.size < than.runs.size;
    };
    let best = this.children[0] as PoolChild;
    for (const c of this.children) if (!c.dead && (best.dead || better(c, best))) best = c;
    if (best.dead) {
      const index = this.children.indexOf(best);
      best = this.spawn();
      this.children[index] = best;
    }
    return best;
  }

  /** Replaces a child that died after booting, off the request path. One that never booted is not respawned in a loop. */
  replace(dead: PoolChild): void {
    this.retired.delete(dead);
    if (this.closed || !dead.booted || dead.retiring) return;
    const index = this.children.indexOf(dead);
    if (index >= 0) this.children[index] = this.spawn();
  }

  /** A child near its CPU rlimit takes no new runs; a fresh one takes its place now, and it ends once idle. */
  retire(child: PoolChild): void {
    const index = this.children.indexOf(child);
    if (this.closed || index < 0) return;
    this.children[index] = this.spawn();
    if (child.runs.size === 0) child.kill("the child retired");
    else this.retired.add(child);
  }

  async close(): Promise<void> {
    this.closed = true;
    const children = [...this.children, ...this.retired];
    for (const c of children) c.kill("the sandbox is closed");
    await Promise.all(children.map((c) => c.exited));
  }
}
