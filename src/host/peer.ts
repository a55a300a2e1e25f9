/**
 * The one host peer: the host's end of one VM side, over a small channel interface. It checks the handshake, sends
 * runs and their calls' answers, validates every message the VM side sends (the strictest rules: known type, exact
 * fields, call ids in order, events that fit the run), knows which run the VM side computes (from shared memory, or
 * from its `busy` messages), gives a stopped run a grace period, and kills the VM side once when it breaks the
 * protocol, fails, or does not stop a run in time. What happens to the runs of a VM side that is gone is the pool's
 * decision (pool.ts): the peer only reports them.
 */

import {
  type CallOutcome,
  type HostCommand,
  ProtocolError,
  parseVmMessage,
  placedRequest,
  type Seeding,
  StopCode,
  type StopReason,
  type UnplacedRequest,
  type VmEvent,
} from "../engine/protocol.ts";
import { LONG_TURN_MS, TURN_SLOTS, TurnSlot } from "../engine/runner.ts";
import { IdMap } from "../platform/id-map.ts";
import { runSoon } from "../platform/platform.ts";
import type { HostChannel, SharedState } from "./channel.ts";

/**
 * A turn is timed on the wall clock up to this many ms; past it, only the CPU time its thread computed counts (where
 * the channel can read it). The wall clock up to here is what every check below BUSY/STUCK needs, at no cost.
 */
export const WALL_TIMED_MS = 2;
/** How often a long turn's thread CPU time is read at most (a read costs a few microseconds). */
const CPU_READ_EVERY_MS = 1;

export interface PeerOptions {
  /** Time the VM side has to announce itself. */
  bootTimeoutMs: number;
  /** Time a stopped run has to end before the VM side is killed (unless it waits behind another run's turn). */
  stopGraceMs: number;
  /** Runs it takes at once (its VMs; with shared memory, its stop flags). */
  capacity: number;
  /** What the VM side is called in error messages: "worker", "child process", "VM side". */
  what: string;
  /**
   * The VM side is gone (killed or by itself): `reason` says why, `cause` what ended it; its open runs are still in
   * `runs`.
   */
  onGone(peer: HostPeer, reason: string, cause: GoneCause): void;
  /** The VM side asked to be retired (see VmStatus `retire`). */
  onRetire?(peer: HostPeer): void;
  /** The VM side says a turn has computed for long (message-based peers; shared ones are read, not told). */
  onBusy?(peer: HostPeer): void;
  /**
   * Whether the VM side must not be killed although run `exec` did not stop in time: it holds another run that cannot
   * be rebuilt elsewhere. The stopped run is then waited for, as a stop behind another run's turn is.
   */
  keeps?(peer: HostPeer, exec: number): boolean;
}

/** The caller of a run that belongs to none (the pool's warm-up runs): it may sit beside anyone's. */
export const NO_CALLER: unique symbol = Symbol("no caller");

/**
 * What ended a VM side: `broken`, it broke the protocol (nothing it ran can be trusted); `unstopped`, a stopped run did
 * not end within its grace (that run is the culprit); `exited`, it ended by itself (crashed, or was killed from
 * outside: the culprit, if any, is unknown); `closed`, the pool let it go (closed, idle, retired).
 */
export type GoneCause = "broken" | "unstopped" | "exited" | "closed";

/** One run on this VM side. */
export interface PeerRun {
  exec: number;
  slot: number;
  onEvent(event: VmEvent): void;
  deterministic: boolean;
  program: boolean;
  journal: boolean;
  /** Whose run it is (see HostPeer.launch). */
  caller: unknown;
  /**
   * Message-based VM sides: the time its turns computed that the VM side said were long (`busy`), plus LONG_TURN_MS
   * each; shorter turns go unseen.
   */
  computedMs: number;
  /** Ids the VM side gave out so far: each call must carry the next one. */
  lastCallId: number;
  /** The calls its request's snapshot made (RunRequest.restore), or null: a run restored from it goes on from there. */
  restoredCalls: number | null;
  /** `snapshot` commands sent whose event has not come yet. */
  captures: number;
  events: number;
  /** Commands sent for this run, against the VM side's `handled` count for its slot (shared memory only). */
  sent: number;
  /** Message-based VM sides: a command went out and no event of the run came since. */
  unanswered: boolean;
  stopping: boolean;
  /** The pool moved the run elsewhere: this VM side's copy is stopped, and its events are dropped. */
  abandoned: boolean;
  /** Called once an abandoned copy has ended (its `done`, or the VM side gone). */
  onEnded?: () => void;
  stopTimer?: ReturnType<typeof setTimeout>;
}

export class HostPeer {
  readonly runs = new IdMap<PeerRun>();
  readonly ready: Promise<void>;
  dead = false;
  booted = false;
  /** Its warm-up runs (see PeerPool.warm), once started: every `warm()` waits for the same runs. */
  warming: Promise<void> | undefined;
  retiring = false;
  /** Runs launched on it so far: the more, the warmer its code (see PeerPool.pick). */
  launched = 0;
  /** Resolves once the VM side is killed or gone. */
  readonly gone: Promise<void>;
  private markGone!: () => void;
  /** The run a message-based VM side said it computes, and since when (performance.now()); null otherwise. */
  private busy: { exec: number; since: number } | null = null;
  /** The turn whose thread CPU time `computedMs` follows: its count, the CPU time when first seen, and the last read. */
  private longTurnSeen: { count: number; cpuAtFirst: number; cpuMs: number; readAt: number } | undefined;
  /** The caller whose runs it holds, while `callerRuns` > 0 (runs of NO_CALLER are not counted). */
  private caller: unknown;
  private callerRuns = 0;
  private readonly slots: number[] = [];
  private readonly slotRuns = new IdMap<number>();
  /** The highest run id sent: a message for a higher one (or 0) is a protocol break, a lower unknown one is late. */
  private lastSent = 0;
  private bootTimer: ReturnType<typeof setTimeout> | undefined;
  private markReady!: () => void;
  private markFailed!: (error: Error) => void;

  constructor(
    readonly channel: HostChannel,
    private readonly options: PeerOptions,
  ) {
    this.ready = new Promise<void>((resolve, reject) => {
      this.markReady = resolve;
      this.markFailed = reject;
    });
    this.ready.catch(() => {});
    this.gone = new Promise<void>((resolve) => {
      this.markGone = resolve;
    });
    const slotCount = channel.shared ? Math.min(options.capacity, channel.shared.stopFlags.length) : options.capacity;
    for (let i = slotCount - 1; i >= 0; i--) this.slots.push(i);
    this.bootTimer = setTimeout(
      () => this.kill(`the ${options.what} did not announce itself in time`, "exited"),
      options.bootTimeoutMs,
    );
    this.bootTimer.unref?.();
    channel.onmessage = (message) => this.onMessage(message);
    channel.onclose = (reason) => this.kill(reason, "exited");
    channel.onerror = (reason) => this.kill(reason, "broken");
  }

  /** Runs it can still take. */
  get free(): number {
    return this.retiring || this.dead ? 0 : this.slots.length;
  }

  // ---- runs ----

  /** Whether it may take a run of `caller`: it holds no run of another caller (NO_CALLER's aside). */
  takesCaller(caller: unknown): boolean {
    return caller === NO_CALLER || this.callerRuns === 0 || Object.is(this.caller, caller);
  }

  /**
   * Sends a run of `caller` (any value; NO_CALLER for none); false when the channel refused its request (too large to
   * carry): nothing was sent.
   */
  launch(
    request: UnplacedRequest,
    how: Seeding,
    exec: number,
    onEvent: (event: VmEvent) => void,
    caller: unknown = NO_CALLER,
  ): string | true {
    const slot = this.slots.pop();
    if (slot === undefined) throw new Error("launch(): the VM side has no free slot");
    this.launched++;
    const shared = this.channel.shared;
    if (shared) {
      Atomics.store(shared.stopFlags, slot, StopCode.none);
      Atomics.store(shared.handled, slot, 0);
      Atomics.store(shared.computed, slot, 0);
    }
    if (caller !== NO_CALLER) {
      this.caller = caller;
      this.callerRuns++;
    }
    const run: PeerRun = {
      exec,
      slot,
      caller,
      computedMs: 0,
      onEvent,
      deterministic: request.deterministic !== null,
      program: request.program !== null,
      journal: how.journal,
      lastCallId: 0,
      restoredCalls: request.restore === null ? null : request.restore.run.calls,
      captures: 0,
      events: 0,
      sent: 0,
      unanswered: false,
      stopping: false,
      abandoned: false,
    };
    if (this.runs.size === 0) this.channel.ref?.(true);
    this.runs.set(exec, run);
    this.slotRuns.set(slot, exec);
    const placement = { exec, slot, random: how.random, journal: how.journal, replayClock: how.replayClock };
    const refused = this.sendFor(run, { type: "run", request: placedRequest(request, placement) });
    if (refused !== undefined) {
      this.release(run);
      return refused;
    }
    if (exec > this.lastSent) this.lastSent = exec;
    return true;
  }

  /** Hands a call's answer to run `exec`; returns the channel's refusal of a too large answer, if any. */
  settle(exec: number, id: number, outcome: CallOutcome, seq: number | null, now: number | null): string | undefined {
    const run = this.runs.get(exec);
    if (!run || run.abandoned || this.dead) return undefined;
    return this.sendFor(run, { type: "settle", exec, id, outcome, seq, now });
  }

  /** Tells run `exec` to stop, and kills the VM side if it does not within the grace (see armGrace). */
  stop(exec: number, reason: StopReason): void {
    const run = this.runs.get(exec);
    if (!run || run.stopping || this.dead) return;
    run.stopping = true;
    this.raiseFlag(run, reason);
    this.sendFor(run, { type: "stop", exec, reason });
    if (this.booted) this.armGrace(run);
    else
      this.ready.then(
        () => this.armGrace(run),
        () => {},
      );
  }

  /** Asks run `exec` for a snapshot of itself (see the `snapshot` command); its `snapshot` event answers. */
  capture(exec: number): void {
    const run = this.runs.get(exec);
    if (!run || run.stopping || this.dead) return;
    run.captures++;
    this.sendFor(run, { type: "snapshot", exec });
  }

  /**
   * The pool moved run `exec` elsewhere: this copy stops, and nothing it sends reaches anyone; `ended` is called once
   * it has ended.
   */
  abandon(exec: number, ended?: () => void, graceAfterMs = 0): void {
    const run = this.runs.get(exec);
    if (!run || run.abandoned) {
      ended?.();
      return;
    }
    run.abandoned = true;
    run.onEnded = ended;
    if (run.stopTimer) clearTimeout(run.stopTimer);
    run.stopping = true;
    this.raiseFlag(run, "aborted");
    if (this.dead) return;
    this.sendFor(run, { type: "stop", exec, reason: "aborted" });
    // Across a pipe the copy reads its stop only between turns: one that computes on past its run's deadline (where
    // it would have ended anyway) and a grace is killed, as a stopped run is.
    run.stopTimer = setTimeout(() => this.armGrace(run), graceAfterMs);
    run.stopTimer.unref?.();
  }

  private raiseFlag(run: PeerRun, reason: StopReason): void {
    const shared = this.channel.shared;
    if (shared) Atomics.store(shared.stopFlags, run.slot, reason === "timeout" ? StopCode.timeout : StopCode.aborted);
  }

  /**
   * A stopped run's grace: when it runs out the VM side is killed, unless it computes another live run's turn. A stop
   * waits behind that turn (the VM side reads nothing meanwhile), whose own deadline bounds it: the grace then starts
   * again, so that one run's stop does not end the others. `behindTurn` says the last period ended inside such a turn:
   * that turn may have ended just before this period does, so the stop, readable only since then, gets one more whole
   * period rather than what is left of this one.
   */
  private armGrace(run: PeerRun, behindTurn = false): void {
    if (!this.runs.has(run.exec) || this.dead) return;
    const graceMs = this.options.stopGraceMs;
    const armedAt = performance.now();
    run.stopTimer = setTimeout(() => {
      // Timers run before the poll for I/O: what the VM side sent meanwhile (its `done`, a `busy`) is read first.
      runSoon(() => {
        if (!this.runs.has(run.exec) || this.dead) return;
        // The host's own event loop was held up (a long synchronous task): the VM side did not get its grace.
        const late = performance.now() - armedAt > 2 * graceMs;
        const computing = this.computing();
        // Another run's turn, or the turn of a moved run's copy (which has a grace of its own).
        const another = computing !== undefined && computing.exec !== run.exec && this.runs.has(computing.exec);
        if (another || this.options.keeps?.(this, run.exec)) this.armGrace(run, true);
        else if (late) this.armGrace(run, behindTurn);
        else if (behindTurn) this.armGrace(run);
        else this.kill(`the ${this.options.what} did not stop a run in time`, "unstopped");
      });
    }, graceMs);
    run.stopTimer.unref?.();
  }

  private sendFor(run: PeerRun, command: HostCommand): string | undefined {
    if (this.dead) return undefined;
    try {
      this.channel.send([command]);
    } catch (error) {
      if (error instanceof RangeError) return error.message;
      this.kill(`could not send to the ${this.options.what}: ${(error as Error).message}`, "exited");
      return undefined;
    }
    run.sent++;
    run.unanswered = true;
    return undefined;
  }

  /**
   * The run whose turn the VM side computes, and for how many ms; undefined when it computes none (or, for a VM
   * side without shared memory, none it has said so of).
   */
  computing(): { exec: number; forMs: number } | undefined {
    const shared = this.channel.shared;
    if (shared) {
      const running = Atomics.load(shared.turn, TurnSlot.running);
      if (running === 0) return undefined;
      const exec = this.slotRuns.get(running - 1);
      if (exec === undefined) return undefined;
      const startedAt = Atomics.load(shared.turn, TurnSlot.startedAt);
      const wallMs = Math.max(0, Date.now() - shared.turnEpochMs - startedAt);
      return { exec, forMs: wallMs < WALL_TIMED_MS ? wallMs : this.computedMs(shared, wallMs) };
    }
    if (this.busy === null) return undefined;
    return { exec: this.busy.exec, forMs: performance.now() - this.busy.since + LONG_TURN_MS };
  }

  /**
   * How long the current turn computed, given that it began `wallMs` ago (at least WALL_TIMED_MS): WALL_TIMED_MS,
   * plus the CPU time its thread computed since the host first saw the turn that long. A thread that waits for a core
   * then does not look like one that computes. Without a CPU clock, the wall clock.
   */
  private computedMs(shared: SharedState, wallMs: number): number {
    if (!shared.cpuMs) return wallMs;
    const count = Atomics.load(shared.turn, TurnSlot.count);
    const now = performance.now();
    let seen = this.longTurnSeen;
    if (seen === undefined || seen.count !== count) {
      const cpuMs = shared.cpuMs();
      if (cpuMs === undefined) return wallMs;
      seen = { count, cpuAtFirst: cpuMs, cpuMs, readAt: now };
      this.longTurnSeen = seen;
    } else if (now - seen.readAt >= CPU_READ_EVERY_MS) {
      seen.cpuMs = shared.cpuMs() ?? seen.cpuMs;
      seen.readAt = now;
    }
    return Math.min(wallMs, WALL_TIMED_MS + seen.cpuMs - seen.cpuAtFirst);
  }

  /**
   * How long run `exec` has computed on this VM side so far, in ms: what rebuilding it elsewhere computes again. Across
   * a pipe only its turns of LONG_TURN_MS or more are seen.
   */
  computedBy(exec: number): number {
    const run = this.runs.get(exec);
    if (!run) return 0;
    const shared = this.channel.shared;
    return shared ? Atomics.load(shared.computed, run.slot) : run.computedMs;
  }

  /** Runs sent that have said nothing yet: not begun, or computing their first turn. */
  unstarted(): number {
    let count = 0;
    for (const run of this.runs.values()) if (run.events === 0 && !run.abandoned) count++;
    return count;
  }

  /** Whether run `exec` has said anything yet (see `unstarted`). */
  heardFrom(exec: number): boolean {
    return (this.runs.get(exec)?.events ?? 0) > 0;
  }

  /** Whether it computes no turn and no command waits for it: a run sent now starts at once. */
  idle(): boolean {
    if (this.computing() !== undefined) return false;
    for (const run of this.runs.values()) if (this.waitsBehindTurn(run.exec)) return false;
    return true;
  }

  /** Whether run `exec` has a command the VM side has not taken yet (it waits behind another run's turn). */
  waitsBehindTurn(exec: number): boolean {
    const run = this.runs.get(exec);
    if (!run || run.abandoned) return false;
    const shared = this.channel.shared;
    if (shared) return Atomics.load(shared.handled, run.slot) < run.sent;
    return run.unanswered;
  }

  // ---- messages from the VM side ----

  private onMessage(raw: unknown): void {
    if (this.dead) return;
    try {
      this.handleMessage(raw);
    } catch (error) {
      if (!(error instanceof ProtocolError)) throw error;
      this.kill(`the ${this.options.what} broke the protocol: ${error.message}`, "broken");
    }
  }

  private handleMessage(raw: unknown): void {
    const message = parseVmMessage(raw);
    if (!this.booted) {
      if (message.type === "ready") {
        this.booted = true;
        clearTimeout(this.bootTimer);
        if (this.runs.size === 0) this.channel.ref?.(false);
        this.markReady();
        return;
      }
      if (message.type === "failed") {
        this.kill(`the ${this.options.what} could not boot: ${message.message.slice(0, 400)}`, "exited");
        return;
      }
      throw new ProtocolError("the VM side sent a message before it announced itself");
    }
    switch (message.type) {
      case "ready":
      case "failed":
        throw new ProtocolError(`the VM side sent "${message.type}" after it announced itself`);
      case "retire":
        if (this.retiring) throw new ProtocolError("the VM side asked twice to retire");
        this.retiring = true;
        this.options.onRetire?.(this);
        return;
      case "busy": {
        const exec = message.exec;
        if (exec !== null && !this.runs.has(exec)) {
          throw new ProtocolError("the VM side said it computes a run it does not have");
        }
        this.endBusy();
        this.busy = exec === null ? null : { exec, since: performance.now() };
        if (exec !== null) this.options.onBusy?.(this);
        return;
      }
      default:
        this.onEvent(message);
    }
  }

  private onEvent(event: VmEvent): void {
    const run = this.runs.get(event.exec);
    // A run's entry stays until its `done` (a stopped or abandoned one too): anything else is for a run it was never
    // sent, or after its end.
    if (!run) {
      throw new ProtocolError(
        event.exec === 0 || event.exec > this.lastSent
          ? "the VM side sent a message for a run it was never sent"
          : "the VM side sent a message for a run that has ended",
      );
    }
    run.events++;
    run.unanswered = false;
    switch (event.type) {
      case "started":
        if (!run.deterministic || run.events !== 1) throw new ProtocolError("started arrived out of order");
        if (event.restored) {
          if (run.restoredCalls === null) throw new ProtocolError("a run without a snapshot said it was restored");
          run.lastCallId = run.restoredCalls;
        }
        break;
      case "snapshot":
        if (run.captures === 0) throw new ProtocolError("a snapshot arrived that was not asked for");
        run.captures--;
        break;
      case "idle":
        if (!run.deterministic) throw new ProtocolError("idle arrived for a run that is not deterministic");
        break;
      case "output":
        if (run.program) throw new ProtocolError("a program run sent output");
        break;
      case "clock":
        if (!run.journal) throw new ProtocolError("clock arrived for a run that keeps no journal");
        break;
      case "call":
        if (event.id !== run.lastCallId + 1) throw new ProtocolError("a call id is repeated or out of order");
        run.lastCallId = event.id;
        break;
      case "done":
        this.release(run);
        break;
    }
    if (!run.abandoned) run.onEvent(event);
  }

  /** The long turn the VM side said it computes has ended: its run computed that long. */
  private endBusy(): void {
    const busy = this.busy;
    if (busy === null) return;
    const run = this.runs.get(busy.exec);
    if (run) run.computedMs += performance.now() - busy.since + LONG_TURN_MS;
  }

  /** Forgets a run whose `done` came (or that was never sent), freeing its slot. */
  private release(run: PeerRun): void {
    this.runs.delete(run.exec);
    this.slotRuns.delete(run.slot);
    this.slots.push(run.slot);
    if (run.caller !== NO_CALLER) this.callerRuns--;
    if (this.busy?.exec === run.exec) this.busy = null;
    if (run.stopTimer) clearTimeout(run.stopTimer);
    ended(run);
    if (this.runs.size === 0) {
      if (this.booted) this.channel.ref?.(false);
      if (this.retiring) this.kill(`the ${this.options.what} retired`, "closed");
    }
  }

  /** Kills the VM side once; the pool hears of it (with the runs still open) through `onGone`. */
  kill(reason: string, cause: GoneCause = "closed"): void {
    if (this.dead) return;
    this.dead = true;
    clearTimeout(this.bootTimer);
    for (const run of this.runs.values()) {
      if (run.stopTimer) clearTimeout(run.stopTimer);
      ended(run);
    }
    this.markFailed(new Error(reason));
    this.markGone();
    // Until it is gone, a dying VM side keeps the host alive, so that close() sees it end.
    this.channel.ref?.(true);
    this.exited = this.channel.kill().catch(() => {});
    this.options.onGone(this, reason, cause);
  }

  /** Resolves once a killed VM side is gone. */
  exited: Promise<void> | undefined;
}

/** Tells an abandoned copy's owner, once, that it has ended. */
function ended(run: PeerRun): void {
  const onEnded = run.onEnded;
  run.onEnded = undefined;
  onEnded?.();
}

export { TURN_SLOTS };
