/**
 * VMs in a warm pool of child processes: the scheduler (host/pool.ts) over framed-stdio channels. Each child boots
 * once (module, prelude, image) and then runs many executions. The host and a child share no memory: commands and
 * messages travel as length-prefixed JSON frames over the child's stdin and stdout, and the host peer validates every
 * frame like untrusted input. A child that breaks the protocol, floods its channel or does not stop a run in time is
 * killed once with SIGKILL (its process group); its other executions are rebuilt in another child. Its stderr is
 * drained and only a bounded tail is kept for error messages.
 */
import { type ChildProcess, spawn } from "node:child_process";
import type { Readable, Writable } from "node:stream";
import type { HostCommand, RunConfiguration, VmEvent } from "../engine/protocol.ts";
import type { LaunchedRun, Launcher, LaunchRequest } from "../host/launcher.ts";
import type { GuestMemoryBudget } from "../host/memory-budget.ts";
import type { HostChannel } from "../host/peer.ts";
import { PeerPool, type PoolStats, REMOTE_STOP_GRACE_MS } from "../host/pool.ts";
import { encodeFrame, FrameReader, MAX_FRAME_BYTES } from "./frames.ts";

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

/** A child process with its framed stdio, as a channel of the host peer. */
export interface ChildChannel extends HostChannel {
  readonly process: ChildProcess;
}

export function openChildChannel(plan: ChildPlan, maxFrameBytes = MAX_FRAME_BYTES): ChildChannel {
  const reader = new FrameReader(maxFrameBytes);
  let stderrTail = "";
  let booted = false;
  let deliver: (message: unknown) => void = () => {};
  let closeHandler: (reason: string) => void = () => {};
  let brokenHandler: (reason: string) => void = () => {};
  let gone = false;
  const close = (reason: string) => {
    if (gone) return;
    gone = true;
    closeHandler(reason);
  };
  const child = spawn(plan.command, plan.args, {
    stdio: ["pipe", "pipe", "pipe", ...plan.fds.map(() => "pipe" as const)],
    env: plan.env,
    // Its own process group: a kill reaches bwrap's sandbox process too while that is still being set up (bwrap
    // arms its parent-death signal only afterwards, so killing the outer process alone could strand it).
    detached: true,
    ...(plan.uid !== undefined ? { uid: plan.uid } : {}),
    ...(plan.gid !== undefined ? { gid: plan.gid } : {}),
  });
  const stderrNote = () => {
    const tail = stderrTail.trim().split("\n").slice(-3).join(" | ").slice(-400);
    return tail ? ` (stderr: ${tail})` : "";
  };
  // "exit", not "close": a runtime's helper processes may hold the pipes open after the child itself is gone.
  const exited = new Promise<void>((resolve) => {
    child.once("exit", () => resolve());
    child.once("error", () => resolve());
  }).then(async () => {
    try {
      await plan.cleanup?.();
    } catch {
      // Best effort: nothing is left to fail.
    }
    for (const stream of child.stdio) stream?.destroy();
  });
  child.once("error", (error) => close(`the child process could not start: ${error.message}`));
  child.once("exit", (code, signal) => {
    const how = signal ? `signal ${signal}` : `code ${code}`;
    const known = !booted && code !== null ? plan.exitReasons?.[code] : undefined;
    close(`${known ? `${known}: ` : ""}the child process exited with ${how}${stderrNote()}`);
  });
  plan.fds.forEach((data, i) => {
    const stream = child.stdio[3 + i] as Writable | null;
    stream?.on("error", () => {});
    stream?.end(data);
  });
  const stdin = child.stdin as Writable;
  stdin.on("error", () => {});
  if (plan.stdinPrefix) stdin.write(plan.stdinPrefix);
  (child.stdout as Readable).on("data", (chunk: Buffer) => {
    if (gone) return;
    let messages: unknown[];
    try {
      messages = reader.push(chunk);
    } catch (error) {
      if (!gone) {
        gone = true;
        brokenHandler(`the child process broke the protocol: ${(error as Error).message}`);
      }
      return;
    }
    for (const message of messages) {
      if (gone) return;
      if (!booted && (message as { type?: unknown } | null)?.type === "ready") booted = true;
      deliver(message);
    }
  });
  (child.stderr as Readable).on("data", (chunk: Buffer) => {
    stderrTail = (stderrTail + chunk.toString("utf8", 0, Math.min(chunk.length, STDERR_TAIL_BYTES))).slice(
      -STDERR_TAIL_BYTES,
    );
  });
  const handles = [child, child.stdin, child.stdout, child.stderr] as unknown as {
    ref?: () => void;
    unref?: () => void;
  }[];
  return {
    process: child,
    send(commands: HostCommand[]) {
      if (gone) return;
      // A frame over the limit throws its RangeError before anything is written: that run fails alone.
      const frames = commands.map((command) => encodeFrame(command));
      try {
        stdin.write(frames.length === 1 ? (frames[0] as Buffer) : Buffer.concat(frames));
      } catch (error) {
        close(`could not send to the child: ${(error as Error).message}`);
      }
    },
    onMessage(handler) {
      deliver = handler;
    },
    onClose(handler) {
      closeHandler = handler;
    },
    onBroken(handler) {
      brokenHandler = handler;
    },
    async kill() {
      gone = true;
      if (child.exitCode === null && child.signalCode === null) {
        try {
          if (child.pid !== undefined) process.kill(-child.pid, "SIGKILL");
        } catch {
          child.kill("SIGKILL");
        }
      }
      child.stdin?.destroy();
      await exited;
    },
    ref(on) {
      for (const h of handles) {
        if (on) h?.ref?.();
        else h?.unref?.();
      }
    },
  };
}

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
