/**
 * The one VM-side serve loop: whatever carries the messages (a worker thread's port, a child's stdio, a container's,
 * a transport of the user's, an RPC stub), the VM side boots its runner, announces itself, checks every command it
 * receives, runs it, and sends what each turn produced as one batch, never building a batch past a safe size.
 */

import {
  type HostCommand,
  PROTOCOL_NAME,
  PROTOCOL_VERSION,
  ProtocolError,
  parseHostCommand,
  sandboxFailure,
  type VmMessage,
} from "./protocol.ts";
import { stopFailure } from "./run.ts";
import { VmRunner } from "./runner.ts";
import type { VmImage } from "./vm.ts";

/** Characters of message content one batch may hold; a turn that produces more sends several batches. */
export const MAX_BATCH_CHARS = 8 * 1024 * 1024;

/** The VM side's end of a channel. */
export interface VmChannel {
  /**
   * Sends one batch of messages, in order (everything one turn produced, or part of it); `chars` is their size by
   * messageChars.
   */
  send(messages: VmMessage[], chars: number): void;
  /**
   * Sends one message at once, from inside a computing turn (`busy`). Only a channel that hands it to the host before
   * returning can carry it; one that cannot leaves this out, and its host then ends a stop that goes unread on grace.
   */
  sendNow?(message: VmMessage): void;
}

export interface ServeOptions {
  module: WebAssembly.Module;
  /** QuickJS's stack guard: safe for the thread the VMs run on. */
  maxStackSize: number;
  /** VMs kept for runs that wait on tools at once. */
  maxVms: number;
  /** The post-prelude image made beforehand for this module (prebuilt-image.ts): the VMs are made from it. */
  image?: VmImage;
  /** Serve only programs (a run without `program` fails): for VM sides that code mode alone uses. */
  programsOnly?: boolean;
  /** Shared with a host in the same process (see RunnerOptions). */
  stopFlags?: Int32Array;
  turn?: Int32Array;
  turnEpochMs?: number;
  handled?: Int32Array;
  computed?: Int32Array;
  /** CPU time (ms) after which the VM side asks to be retired (a process, well before its RLIMIT_CPU ends it). */
  retireCpuMs?: number | null;
  /** Bytes one message to the host may take (see RunnerOptions.maxMessageBytes); default: no limit. */
  maxMessageBytes?: number;
  /** A command that breaks the protocol; default: it is dropped. */
  onProtocolError?(error: ProtocolError): void;
}

/** Rough size of a message's content in characters, for cutting batches. */
export function messageChars(message: VmMessage): number {
  switch (message.type) {
    case "call":
      return 64 + (message.args?.length ?? 0) + message.name.length;
    case "output":
      return 64 + (message.item.type === "text" ? message.item.text.length : message.item.data.length);
    case "done":
      return 256 + (message.result.ok ? (message.result.value?.length ?? 0) + (message.result.writes?.length ?? 0) : 0);
    case "clock":
      return 64 + 24 * (message.reads?.length ?? 0);
    case "snapshot": {
      const snapshot = message.snapshot;
      if (snapshot === null) return 64;
      let chars = 1024 + snapshot.memory.data.length + 12 * snapshot.memory.ranges.length;
      for (const call of snapshot.run.open) chars += 64 + call.name.length + (call.args?.length ?? 0);
      return chars;
    }
    default:
      return 64;
  }
}

export class VmServer {
  readonly ready: Promise<void>;
  private readonly runner: VmRunner;
  private isReady = false;
  private readonly queued: HostCommand[] = [];
  private outbox: VmMessage[] = [];
  private outboxChars = 0;
  private retired = false;
  private readonly flushSoon = () => this.flush();

  constructor(
    private readonly channel: VmChannel,
    private readonly options: ServeOptions,
  ) {
    const sendNow = channel.sendNow?.bind(channel);
    this.runner = new VmRunner({
      module: options.module,
      maxStackSize: options.maxStackSize,
      maxVms: options.maxVms,
      image: options.image,
      stopFlags: options.stopFlags,
      turn: options.turn,
      turnEpochMs: options.turnEpochMs,
      handled: options.handled,
      computed: options.computed,
      maxMessageBytes: options.maxMessageBytes,
      flush: () => this.flush(),
      emit: (event) => {
        this.enqueue(event);
        if (event.type === "done") this.checkRetire();
      },
      // From inside a turn that computes for long: what earlier turns of this batch produced (another run's call, say)
      // goes out now rather than after this turn, so that the host can answer or move that run meanwhile; a channel
      // that can also say `busy` at once does.
      onLongTurn: (exec: number | null) => {
        this.flush();
        if (!sendNow) return;
        try {
          sendNow({ type: "busy", exec });
        } catch {
          // Only a hint: a channel that cannot send it now must not break the turn.
        }
      },
    });
    this.ready = this.runner.init().then(
      () => {
        this.isReady = true;
        this.enqueue({
          type: "ready",
          protocol: PROTOCOL_NAME,
          version: PROTOCOL_VERSION,
          versions: this.runner.versions,
        });
        for (const command of this.queued.splice(0)) this.handle(command);
      },
      (error: unknown) => {
        this.enqueue({ type: "failed", message: error instanceof Error ? error.message : String(error) });
        throw error;
      },
    );
    this.ready.catch(() => {});
  }

  /** Takes one message from the host: checked, then run (or queued until the VMs are booted). */
  receive(message: unknown): void {
    let command: HostCommand;
    try {
      command = parseHostCommand(message);
    } catch (error) {
      if (!(error instanceof ProtocolError)) throw error;
      this.options.onProtocolError?.(error);
      return;
    }
    if (this.isReady) this.handle(command);
    else this.queued.push(command);
  }

  /**
   * Takes the commands that arrived together (what a pipe held while a turn computed): a run stopped in the same
   * batch is stopped before anything else of it is handled. Otherwise a run the host moved away while it waited
   * would first start, or take a call's answer, and compute a whole turn, since the VM side reads nothing during one.
   */
  receiveBatch(messages: unknown[]): void {
    const stopped = new Set<number>();
    for (const message of messages) {
      const m = message as { type?: unknown; exec?: unknown } | null;
      if (m?.type === "stop" && typeof m.exec === "number") stopped.add(m.exec);
    }
    if (stopped.size === 0) {
      for (const message of messages) this.receive(message);
      return;
    }
    const commands: HostCommand[] = [];
    for (const message of messages) {
      try {
        commands.push(parseHostCommand(message));
      } catch (error) {
        if (!(error instanceof ProtocolError)) throw error;
        this.options.onProtocolError?.(error);
        return;
      }
    }
    const firstStop = new Map<number, HostCommand>();
    for (const command of commands) {
      if (command.type === "stop" && !firstStop.has(command.exec)) firstStop.set(command.exec, command);
    }
    const settled = new Set<number>();
    for (const command of commands) {
      const exec = command.type === "run" ? command.request.exec : command.exec;
      const stop = firstStop.get(exec);
      if (stop === undefined) {
        this.take(command);
        continue;
      }
      if (settled.has(exec)) continue;
      settled.add(exec);
      if (command.type === "run" && stop.type === "stop") {
        // Never started: it ends as stopped, without a VM.
        this.enqueue({ type: "done", exec, result: stopFailure(stop.reason) });
      } else this.take(stop);
    }
  }

  private take(command: HostCommand): void {
    if (this.isReady) this.handle(command);
    else this.queued.push(command);
  }

  private handle(command: HostCommand): void {
    if (command.type === "run" && this.options.programsOnly && command.request.program === null) {
      this.enqueue(sandboxFailure(command.request.exec, "this VM side runs only programs"));
      return;
    }
    this.runner.handle(command);
  }

  /** True when every run waits on tool calls and nothing else needs the thread (see VmRunner.onlyWaitingOnCalls). */
  get onlyWaitingOnCalls(): boolean {
    return this.runner.onlyWaitingOnCalls;
  }

  private enqueue(message: VmMessage): void {
    if (this.outbox.push(message) === 1) queueMicrotask(this.flushSoon);
    this.outboxChars += messageChars(message);
    // A turn that makes huge calls or output sends them as it goes, never one batch past the limit.
    if (this.outboxChars > MAX_BATCH_CHARS) this.flush();
  }

  /** Sends what is queued now. */
  flush(): void {
    if (this.outbox.length === 0) return;
    const messages = this.outbox;
    const chars = this.outboxChars;
    this.outbox = [];
    this.outboxChars = 0;
    this.channel.send(messages, chars);
  }

  private checkRetire(): void {
    const limit = this.options.retireCpuMs;
    if (this.retired || limit === undefined || limit === null) return;
    const usage = process.cpuUsage();
    if ((usage.user + usage.system) / 1000 > limit) {
      this.retired = true;
      this.enqueue({ type: "retire" });
    }
  }

  close(): void {
    this.runner.close();
  }
}

/** Serves the protocol on a channel; the channel's receiving side calls `receive` for every message. */
export function serveVm(channel: VmChannel, options: ServeOptions): VmServer {
  return new VmServer(channel, options);
}
