/**
 * The scheduler over host peers (peer.ts), the same for worker threads, child processes and VM sides behind a
 * transport. It keeps executions apart:
 * - New work never goes to a VM side that computes a long turn. When every one does (or is full), the pool grows, up
 *   to `maxSize`, and extra VM sides are closed again once idle.
 * - A run that waits behind another run's long turn (its start, or a call's answer, not taken yet) moves to another VM
 *   side once it has waited as long as the move costs (what it computed so far, which its rebuild computes again), at
 *   most MAX_MOVES_PER_RUN times: it is rebuilt there from its journal (journal.ts), none of its calls made again.
 * - A VM side that is killed (a run that did not stop in time, a protocol break) takes only that run: the others are
 *   rebuilt elsewhere the same way. A run whose journal nears its limits gets a VM side to itself (no other run is
 *   placed beside it), and once it can no longer be rebuilt, its VM side is not killed for another run's sake.
 * - Every run holds its memory limit from the host's guest-memory budget while its VM runs, and so does the copy a
 *   move leaves behind until it ends; a run that does not fit waits (its deadline still counting), and a move that
 *   does not fit waits first.
 * - With `separateCallers`, a VM side holds the runs of one caller at a time.
 * - Once every VM side computes a long turn, a spare starts before new work arrives (booting one takes longer than
 *   most executions), and a sandbox that was warmed warms the spare too.
 */

import {
  type CallOutcome,
  CPU_LIMIT_ERROR,
  type RunConfiguration,
  runConfiguration,
  type Seeding,
  type StopReason,
  sandboxFailure,
  UNSEEDED,
  type VmEvent,
} from "../engine/protocol.ts";
import { randomWords } from "../engine/random.ts";
import { runFailure } from "../engine/run.ts";
import { IdMap } from "../platform/id-map.ts";
import type { HostChannel } from "./channel.ts";
import { Journal, MAX_JOURNAL_CHARS, Replay } from "./journal.ts";
import { type LaunchedRun, type Launcher, type LaunchRequest, launchRequest } from "./launcher.ts";
import type { GuestMemoryBudget } from "./memory-budget.ts";
import { type GoneCause, HostPeer, NO_CALLER } from "./peer.ts";

/**
 * How long a turn may compute before the VM side counts as stuck: no new work, and runs that wait behind it may move
 * away (see PeerPool.worthMoving).
 */
export const STUCK_AFTER_MS = 5;
/**
 * How long a turn may compute before new work prefers another VM side. A short turn (most are tens of microseconds)
 * says nothing: new work then goes to the side with the fewest runs, so the commands of one host turn leave as one
 * batch, and a side's results come back as one (preferring every idle side instead split the batches until each
 * execution went alone, and halved 64-in-flight throughput).
 */
const BUSY_AFTER_MS = 2;
/** How often the pool looks at stuck VM sides while runs wait behind them. */
const STUCK_CHECK_MS = 2;
/** How long a VM side beyond the pool's base size stays once it has no runs. */
export const EXTRA_IDLE_MS = 5_000;
/**
 * How long every VM side may compute a run's turn before the pool starts a spare, while it is below its largest size.
 * New work waits for no VM side that computes: without a spare, the next execution would wait for a boot (0.1-0.7 s
 * on a busy machine) instead.
 */
export const SPARE_AFTER_MS = 50;
/** How often the pool looks for a need of a spare while it has runs. */
const SPARE_CHECK_MS = 10;
/**
 * Time a stopped run has to end before its VM side is killed (the others move elsewhere). A worker thread shares its
 * turn word with the host, so the host knows at once whether it computes another run's turn.
 */
export const STOP_GRACE_MS = 50;
/**
 * The same for a VM side across a pipe or transport (a child process, a container, one of the user's): it can say
 * that it computes another run only once it has been scheduled and computed for LONG_TURN_MS, which on a loaded
 * machine takes longer than a worker's grace.
 */
export const REMOTE_STOP_GRACE_MS = 250;

/** What a call's answer becomes when the channel refused it as too large (`refused`, its RangeError's message). */
export function tooLargeAnswer(what: string, refused: string): CallOutcome {
  return {
    ok: false,
    message: `the answer to this call is too large to send to the sandbox's ${what}: ${refused}`,
    properties: undefined,
  };
}
/**
 * Times one run may be on a VM side that ended by itself (a crash with no known culprit) and still be rebuilt; past
 * it, it fails: a run that crashes every VM side it meets must not go on doing so.
 */
export const MAX_CRASHES_PER_RUN = 2;

/**
 * Times one run moves away from another's long turn at most (rebuilds after a lost VM side aside): past it, it waits
 * where it is. Each move waits first as long as the move costs, so that moving never costs more than waiting would.
 */
export const MAX_MOVES_PER_RUN = 3;

export interface PeerPoolOptions {
  /** Opens the channel to a new VM side (starts a worker thread, a child process, a transport). */
  open(): HostChannel;
  /** VM sides kept. */
  size: number;
  /** VM sides at most, when every one computes a long turn or is full. */
  maxSize: number;
  /** Runs one VM side takes at once. */
  capacity: number;
  /** What a VM side is called in error messages. */
  what: string;
  budget: GuestMemoryBudget;
  stopGraceMs?: number;
  bootTimeoutMs: number;
  /** Journal runs so that they can move; false for VM sides that cannot replay (none of Airlock's). */
  movable?: boolean;
  /** Why a run fails when the pool is closed. */
  closedMessage?: string;
  /** Start VM sides on first use rather than at once (a transport's `launch()` may start a container). */
  lazy?: boolean;
  /** Warm-up runs of each new VM side; default WARM_RUNS. */
  warmRuns?: number;
  /** A VM side holds the runs of one caller at a time (see Launcher.launch). */
  separateCallers?: boolean;
}

/**
 * Executions `warm()` runs on each VM side: the first hundreds on a new thread or process run on cold caches and not
 * yet optimised code, several times slower than later ones. (VM sides the pool adds later take work as soon as they
 * have booted: waiting for their warm-up would cost more than it saves.)
 */
export const WARM_RUNS = 200;

/**
 * Warm-up runs a VM side runs at once, each on its own VM: a burst of executions after `warm()` (or on a new spare)
 * then finds its VMs made instead of waiting while they are made one by one (at most the VM side's capacity).
 */
export const WARM_CONCURRENCY = 8;

/**
 * Runs of `return 0` with the sandbox's own configuration (its tools and globals) after the warm-up, so that the
 * first executions do not set that configuration up in a VM on their own time.
 */
export const PRIME_RUNS = 2;

/** The warm-up run: a script with a few calls and some output, answered by the pool itself. */
const WARM_SCRIPT: LaunchRequest = launchRequest({
  code: 'let t = 0; for (let i = 0; i < 3; i++) t += await tools.warm(i); text("w" + t); return { t, s: JSON.stringify([t]) };',
  configuration: runConfiguration({
    tools: [{ name: "warm", id: "warm", description: "" }],
    globals: [],
    deterministic: false,
    program: false,
  }),
  memoryLimitBytes: 16 * 1024 * 1024,
  maxCalls: 16,
});

/** The priming run; its configuration is the sandbox's. */
const PRIME_SCRIPT: Omit<LaunchRequest, "configuration"> = { ...WARM_SCRIPT, code: "return 0" };

/** What the pool did, for monitoring (and tests). */
export interface PoolStats {
  /** VM sides kept now. */
  live: number;
  /** The most VM sides it kept at once. */
  peak: number;
  /** VM sides that ended while they had runs: killed (a run did not stop), crashed, or broke the protocol. */
  lost: number;
  /** Runs rebuilt on another VM side from their journal (moved away from a long turn, or from a lost VM side). */
  moved: number;
}

/** One execution in the pool. */
interface PoolRun {
  request: LaunchRequest;
  /** Its seed and whether its VM side journals it, the same on every VM side it runs on. */
  seeding: Seeding;
  onEvent(event: VmEvent): void;
  peer: HostPeer | undefined;
  exec: number;
  reserved: boolean;
  journal: Journal | undefined;
  /** Why its journal was lost (it can no longer move), once it was. */
  unmovable: string | undefined;
  replay: Replay | undefined;
  stopped: StopReason | undefined;
  done: boolean;
  /** Times a VM side it ran on ended by itself (see MAX_CRASHES_PER_RUN). */
  crashes: number;
  /** A snapshot was asked for and has not come: asked again of the VM side a move takes it to. */
  capturing: boolean;
  /** Whose run it is (NO_CALLER in a pool that does not keep callers apart). */
  caller: unknown;
  /** Times it moved away from another run's long turn (see MAX_MOVES_PER_RUN). */
  moves: number;
  /** Since when it waits behind other runs' turns, as the pool saw it, and for which command (its count sent). */
  behind: { sent: number; since: number } | undefined;
  /**
   * It has a VM side to itself: its journal nears its limits (or it has none), and a run that cannot be rebuilt
   * elsewhere must not sit beside one that may get their VM side killed.
   */
  alone: boolean;
}

export class PeerPool implements Launcher {
  private readonly peers: HostPeer[] = [];
  private readonly waiting: PoolRun[] = [];
  /** Runs by their current exec id (a moved run gets a new one). */
  private readonly byExec = new IdMap<PoolRun>();
  private lastExec = 0;
  private closed = false;
  private checkTimer: ReturnType<typeof setTimeout> | undefined;
  private spareTimer: ReturnType<typeof setInterval> | undefined;
  /** Set by `warm()`: VM sides started later (spares) are warmed and primed with this configuration as well. */
  private warmed: { prime: RunConfiguration | undefined } | undefined;
  private readonly idleTimers = new Map<HostPeer, ReturnType<typeof setTimeout>>();
  private readonly stopGraceMs: number;
  private readonly unlisten: () => void;
  private readonly counts = { peak: 0, lost: 0, moved: 0 };
  /** VM sides kept for one run alone (see PoolRun.alone): no other run is placed there. */
  private readonly kept = new Map<HostPeer, PoolRun>();
  /** A move waits for memory from the budget: new runs wait behind it (see checkStuck). */
  private moveWaits = false;

  constructor(private readonly options: PeerPoolOptions) {
    const { size, maxSize } = options;
    if (!Number.isInteger(size) || size < 1) throw new RangeError("poolSize must be a positive integer");
    if (!Number.isInteger(maxSize) || maxSize < size) {
      throw new RangeError(`maxPoolSize must be an integer of at least poolSize (${size}), got ${maxSize}`);
    }
    this.stopGraceMs = options.stopGraceMs ?? STOP_GRACE_MS;
    if (!options.lazy) for (let i = 0; i < size; i++) this.spawn();
    this.unlisten = options.budget.onRelease(() => this.pump());
  }

  /**
   * Resolves once every VM side has booted and run its warm-up (primed with `prime`, the sandbox's configuration);
   * rejects with the reason of the first that could not. Spares the pool starts from then on are warmed as well.
   */
  async warm(prime?: RunConfiguration): Promise<void> {
    this.warmed = { prime };
    await Promise.all(this.peers.map((p) => p.ready));
    await Promise.all(this.peers.map((p) => this.warmUp(p, false)));
  }

  /** Runs a booted VM side's warm-up (once; a second caller waits for the first's). */
  private warmUp(peer: HostPeer, spare: boolean): Promise<void> {
    peer.warming ??= this.runWarmUp(peer, spare);
    return peer.warming;
  }

  /**
   * A spare stops its warm-up as soon as the pool gives it work: it was started because work may come, and work on a
   * cold VM side is better than work waiting for a warm-up.
   */
  private async runWarmUp(peer: HostPeer, spare: boolean): Promise<void> {
    const runs = this.options.warmRuns ?? WARM_RUNS;
    const taken = () => spare && [...peer.runs.values()].some((r) => this.byExec.has(r.exec));
    const batch = Math.max(1, Math.min(WARM_CONCURRENCY, this.options.capacity));
    for (let i = 0; i < runs && !taken(); i += batch) {
      await Promise.all(Array.from({ length: Math.min(batch, runs - i) }, () => this.warmRun(peer, WARM_SCRIPT)));
    }
    const prime = this.warmed?.prime;
    for (let i = 0; prime && i < PRIME_RUNS && !taken(); i++) {
      await this.warmRun(peer, { ...PRIME_SCRIPT, configuration: prime });
    }
    if (spare) this.idleCheck();
  }

  /** One warm-up run, answered by the pool itself; skipped when the VM side has no room or is gone. */
  private async warmRun(peer: HostPeer, request: LaunchRequest): Promise<void> {
    if (peer.dead || this.closed || peer.free === 0) return;
    const exec = ++this.lastExec;
    const done = new Promise<void>((resolve) => {
      const sent = peer.launch(request, UNSEEDED, exec, (event) => {
        if (event.type === "call") peer.settle(exec, event.id, { ok: true, value: String(event.id) }, null, null);
        if (event.type === "done") resolve();
      });
      if (sent !== true) resolve();
    });
    await Promise.race([done, peer.gone]);
  }

  /** Live VM sides (for tests and monitoring). */
  get peerCount(): number {
    return this.peers.filter((p) => !p.dead).length;
  }

  get stats(): PoolStats {
    return { live: this.peerCount, ...this.counts };
  }

  /** The live peers (for launchers that report on their VM sides). */
  get livePeers(): readonly HostPeer[] {
    return this.peers.filter((p) => !p.dead);
  }

  private spawn(spare = false): HostPeer {
    const peer = new HostPeer(this.options.open(), {
      bootTimeoutMs: this.options.bootTimeoutMs,
      stopGraceMs: this.stopGraceMs,
      capacity: this.options.capacity,
      what: this.options.what,
      onGone: (p, reason, cause) => this.onGone(p, reason, cause),
      onRetire: (p) => this.onRetire(p),
      onBusy: () => this.checkStuck(),
      keeps: (p, exec) => {
        const run = this.kept.get(p);
        return run !== undefined && run.exec !== exec && run.journal === undefined && !run.done;
      },
    });
    this.peers.push(peer);
    this.counts.peak = Math.max(this.counts.peak, this.peerCount);
    peer.ready.then(
      () => {
        if (spare && this.warmed && !this.closed) void this.warmUp(peer, true);
        this.pump();
        this.idleCheck();
      },
      () => {},
    );
    return peer;
  }

  launch(request: LaunchRequest, onEvent: (event: VmEvent) => void, caller?: unknown): LaunchedRun {
    const movable = this.options.movable ?? true;
    const run: PoolRun = {
      request,
      seeding: { random: request.deterministic ? null : randomWords(), journal: movable, replayClock: null },
      onEvent,
      peer: undefined,
      exec: 0,
      reserved: false,
      journal: movable ? new Journal(Math.min(MAX_JOURNAL_CHARS, request.memoryLimitBytes)) : undefined,
      unmovable: undefined,
      replay: undefined,
      stopped: undefined,
      done: false,
      crashes: 0,
      capturing: false,
      caller: this.options.separateCallers ? caller : NO_CALLER,
      moves: 0,
      behind: undefined,
      alone: !movable,
    };
    const handle: LaunchedRun = {
      settle: (id, outcome, seq, now) => this.settle(run, id, outcome, seq, now),
      stop: (reason) => this.stop(run, reason),
      capture: () => this.capture(run),
    };
    if (this.closed) {
      queueMicrotask(() => this.fail(run, this.options.closedMessage ?? "the sandbox is closed"));
      return handle;
    }
    const budget = this.options.budget;
    if (request.memoryLimitBytes > budget.totalBytes) {
      queueMicrotask(() =>
        this.fail(
          run,
          `the execution's memory limit of ${request.memoryLimitBytes} bytes is more than the host's guest-memory budget of ${budget.totalBytes} bytes (maxTotalMemoryBytes)`,
        ),
      );
      return handle;
    }
    this.waiting.push(run);
    this.pump();
    return handle;
  }

  // ---- placing runs ----

  /** Starts waiting runs, oldest first, while memory and a VM side are there for them. */
  private pump(): void {
    while (this.waiting.length > 0 && !this.closed) {
      const run = this.waiting[0] as PoolRun;
      if (!run.reserved) {
        if (this.moveWaits || !this.options.budget.tryReserve(run.request.memoryLimitBytes)) return;
        run.reserved = true;
      }
      const peer = this.pick(undefined, run);
      if (!peer) {
        // Every VM side is full or stuck and the pool is at its largest: look again shortly.
        this.scheduleCheck();
        return;
      }
      this.waiting.shift();
      this.place(run, peer);
    }
  }

  /**
   * The VM side for `run` (new, or moving away from `except`): a booted one with room that does not compute a long turn
   * and may hold it (see mayHold), preferring one whose turn (if any) has not computed for BUSY_AFTER_MS, then the
   * fewest runs, then the most run so far; for a move, only an idle one (a move to a VM side with work queued trades one wait for another, and
   * runs that moved together would wait behind each other), or one with fewer runs queued (see below). When there is
   * none, the pool grows (one VM side at a time, up to its largest) and the run waits in the pool until one is free,
   * rather than behind a long turn or a boot it may not need.
   */
  private pick(except: HostPeer | undefined, run: PoolRun): HostPeer | undefined {
    let best: HostPeer | undefined;
    let bestScore = Number.POSITIVE_INFINITY;
    let booting = false;
    // A run that has not begun where it waits may also move to a VM side with fewer such runs queued than the one it
    // leaves (even after it moved): a burst that landed on one VM side spreads over the others as they come up, and
    // no run moves back and forth.
    const queuedFrom = except !== undefined && !except.heardFrom(run.exec) ? except.unstarted() : 0;
    for (const peer of this.peers) {
      if (peer.dead) continue;
      if (!peer.booted) {
        booting = true;
        continue;
      }
      if (peer === except || !this.takesWork(peer, STUCK_AFTER_MS) || !this.mayHold(peer, run)) continue;
      if (except !== undefined && !peer.idle() && peer.unstarted() + 2 > queuedFrom) continue;
      const score = (this.longTurn(peer, BUSY_AFTER_MS) ? 1e6 : 0) + peer.runs.size;
      // Between equals, the one that has run the most: a VM side that booted later (whose code is still cold) does
      // not take sequential work from a warm one.
      if (score < bestScore || (score === bestScore && peer.launched > (best as HostPeer).launched)) {
        best = peer;
        bestScore = score;
      }
    }
    if (best) return best;
    // A move waits for the spare the pool starts once every VM side computes long (watchSpare), so that runs that
    // would wait behind others' turns for less than a boot start none; a lazy pool starts VM sides only for work.
    const starts = except === undefined || this.options.lazy === true;
    if (starts && !booting && this.peerCount < this.options.maxSize) this.spawn();
    return undefined;
  }

  /**
   * Whether `run` may go to the VM side: a run that is to be alone only to one that holds nothing; any other to one
   * that is not kept for a run alone and holds no other caller's runs.
   */
  private mayHold(peer: HostPeer, run: PoolRun): boolean {
    if (run.alone) return peer.runs.size === 0;
    return !this.kept.has(peer) && peer.takesCaller(run.caller);
  }

  /** Whether a booted VM side has room and does not compute a run's turn of `longMs` or more. */
  private takesWork(peer: HostPeer, longMs: number): boolean {
    return !peer.dead && peer.booted && peer.free > 0 && !this.longTurn(peer, longMs);
  }

  /** Whether a VM side other than `except` takes work now or boots (and will). */
  private hasFreeSide(except: HostPeer | undefined, longMs: number): boolean {
    return this.peers.some((p) => p !== except && !p.dead && (!p.booted || this.takesWork(p, longMs)));
  }

  /**
   * Whether the VM side computes a run's turn for `longMs` or more: one of the pool's runs, or the copy of one that
   * moved away (across a pipe it reads its stop only once that turn ends). A warm-up turn does not count.
   */
  private longTurn(peer: HostPeer, longMs: number): boolean {
    const computing = peer.computing();
    if (computing === undefined || computing.forMs < longMs) return false;
    return this.byExec.has(computing.exec) || peer.runs.get(computing.exec)?.abandoned === true;
  }

  /**
   * While the pool has runs: starts a spare once no VM side takes work and the pool is below its largest. Not for a
   * lazy pool, whose VM sides start only for work (a transport's launch may start a container).
   */
  private watchSpare(): void {
    if (this.spareTimer || this.closed || this.options.lazy) return;
    this.spareTimer = setInterval(() => {
      if (this.closed || this.byExec.size === 0) {
        clearInterval(this.spareTimer);
        this.spareTimer = undefined;
        return;
      }
      if (this.peerCount < this.options.maxSize && !this.hasFreeSide(undefined, SPARE_AFTER_MS)) this.spawn(true);
    }, SPARE_CHECK_MS);
    this.spareTimer.unref?.();
  }

  private place(run: PoolRun, peer: HostPeer): void {
    const exec = ++this.lastExec;
    if (run.alone) this.keepFor(run, peer);
    run.peer = peer;
    run.exec = exec;
    this.byExec.set(exec, run);
    this.cancelIdle(peer);
    this.watchSpare();
    const { random, journal } = run.seeding;
    const seeding = run.replay ? { random, journal, replayClock: [...(run.journal as Journal).clock] } : run.seeding;
    const sent = peer.launch(run.request, seeding, exec, (event) => this.onEvent(run, exec, event), run.caller);
    if (sent !== true) {
      this.byExec.delete(exec);
      run.peer = undefined;
      this.fail(run, `the execution is too large to send to the ${this.options.what}: ${sent}`);
      return;
    }
    if (run.replay) {
      for (const s of (run.journal as Journal).settles) this.sendSettle(run, s.id, s.outcome, s.seq, s.now);
    }
    if (run.capturing) peer.capture(exec);
    this.noteSent(peer, run);
  }

  private capture(run: PoolRun): void {
    if (run.done || run.stopped) return;
    run.capturing = true;
    // A run still waiting for a VM side is asked once placed.
    if (run.peer) run.peer.capture(run.exec);
  }

  // ---- a run's traffic ----

  private settle(run: PoolRun, id: number, outcome: CallOutcome, seq: number | null, now: number | null): void {
    if (run.done || run.stopped) return;
    run.journal?.noteSettle({ id, outcome, seq, now });
    this.checkJournal(run);
    if (!run.peer) return;
    this.sendSettle(run, id, outcome, seq, now);
    this.noteSent(run.peer, run);
  }

  private sendSettle(run: PoolRun, id: number, outcome: CallOutcome, seq: number | null, now: number | null): void {
    const peer = run.peer as HostPeer;
    const refused = peer.settle(run.exec, id, outcome, seq, now);
    if (refused === undefined) return;
    // The call fails in the script instead, as a tool result over the size limit does.
    peer.settle(run.exec, id, tooLargeAnswer(this.options.what, refused), seq, now);
  }

  private stop(run: PoolRun, reason: StopReason): void {
    if (run.done || run.stopped) return;
    run.stopped = reason;
    const index = this.waiting.indexOf(run);
    if (index >= 0) {
      // It never reached a VM side: nothing to stop.
      this.waiting.splice(index, 1);
      this.finish(run);
      return;
    }
    run.peer?.stop(run.exec, reason);
  }

  private onEvent(run: PoolRun, exec: number, event: VmEvent): void {
    if (run.exec !== exec || run.done) return;
    if (run.replay) {
      const verdict = run.replay.check(event);
      if (verdict === "replayed") return;
      if (verdict !== "new") {
        this.diverged(run, verdict);
        return;
      }
      if (run.replay.caughtUp) run.replay = undefined;
    }
    if (event.type === "snapshot") run.capturing = false;
    run.journal?.noteEvent(event);
    this.checkJournal(run);
    if (event.type === "clock") return;
    if (event.type === "done") {
      this.byExec.delete(exec);
      run.peer = undefined;
      this.finish(run);
    }
    run.onEvent(event);
  }

  /**
   * A journal that nears its limits gets its run a VM side to itself: the one it is on, where no other run goes from
   * now on (those there already end or move away). One that could not keep everything is let go: the run stays where
   * it is, and says why if it must fail.
   */
  private checkJournal(run: PoolRun): void {
    const journal = run.journal;
    if (journal === undefined) return;
    if (journal.lost) {
      run.unmovable = journal.lostBecause;
      run.journal = undefined;
    } else if (!journal.nearLimits) return;
    if (run.alone) return;
    run.alone = true;
    if (run.peer) this.keepFor(run, run.peer);
  }

  /** Keeps `peer` for `run` alone (see PoolRun.alone), instead of the VM side it had. */
  private keepFor(run: PoolRun, peer: HostPeer): void {
    if (run.peer && this.kept.get(run.peer) === run) this.kept.delete(run.peer);
    this.kept.set(peer, run);
  }

  /** A rebuilt run went another way than its first attempt (it read something that changed): it fails, not acts. */
  private diverged(run: PoolRun, how: string): void {
    run.peer?.abandon(run.exec);
    this.byExec.delete(run.exec);
    run.peer = undefined;
    this.fail(
      run,
      `the execution had to move to another ${this.options.what} and did not run the same way again (${how}); nothing it did after that was acted on`,
    );
  }

  private fail(run: PoolRun, message: string): void {
    if (run.done) return;
    this.finish(run);
    run.onEvent(sandboxFailure(run.exec, message));
  }

  /** The run's VM is gone: its memory goes back to the budget, and its VM side may become idle. */
  private finish(run: PoolRun): void {
    if (run.done) return;
    run.done = true;
    if (run.alone) for (const [peer, kept] of this.kept) if (kept === run) this.kept.delete(peer);
    run.journal = undefined;
    run.replay = undefined;
    if (run.reserved) {
      run.reserved = false;
      this.options.budget.release(run.request.memoryLimitBytes);
    }
    this.idleCheck();
    this.pump();
  }

  // ---- stuck VM sides and moves ----

  /**
   * After a command went to `peer`: if another run there may compute before the VM side takes it, the pool watches
   * whether it waits behind a long turn.
   */
  private noteSent(peer: HostPeer, run: PoolRun): void {
    if (peer.runs.size > 1 || run.request.cpuLimitMs != null) this.scheduleCheck();
  }

  private scheduleCheck(): void {
    if (this.checkTimer || this.closed) return;
    this.checkTimer = setTimeout(() => {
      this.checkTimer = undefined;
      this.checkStuck();
    }, STUCK_CHECK_MS);
    this.checkTimer.unref?.();
  }

  /**
   * Moves runs that wait behind a long turn to other VM sides (see worthMoving), and ends a run whose one turn computed
   * past its whole CPU limit (a built-in the VM cannot interrupt); looks again while either may still happen. A move
   * that finds no memory in the budget keeps new runs from taking it until the next look.
   */
  private checkStuck(): void {
    if (this.closed) return;
    let again = false;
    this.moveWaits = false;
    for (const peer of [...this.peers]) {
      if (peer.dead) continue;
      const computing = peer.computing();
      const computed = computing && this.byExec.get(computing.exec);
      const cpuLimit = computed ? computed.request.cpuLimitMs : null;
      if (computing && computed && !computed.done && cpuLimit !== null) {
        if (computing.forMs > cpuLimit) this.cpuExceeded(computed, peer, cpuLimit);
        else again = true;
      }
      for (const entry of [...peer.runs.values()]) {
        const run = this.byExec.get(entry.exec);
        if (!run || run.done || run.stopped) continue;
        if (entry.exec === computing?.exec || !peer.waitsBehindTurn(entry.exec)) {
          run.behind = undefined;
          continue;
        }
        // Its command is not taken yet: look again until it is, and move it once the turns ahead of it run long.
        again = true;
        const now = performance.now();
        if (run.behind?.sent !== entry.sent) run.behind = { sent: entry.sent, since: now };
        if (this.longTurn(peer, STUCK_AFTER_MS) && this.worthMoving(run, peer, now - run.behind.since)) {
          this.move(run, peer);
        }
      }
    }
    this.pump();
    if (again || this.waiting.length > 0) this.scheduleCheck();
  }

  /**
   * A run whose current turn alone computed past its CPU limit: the VM could not interrupt it (a loop of bulk memory
   * copies, which no tick reaches, or a VM side that is not scheduled),
   * so the host ends it with the limit, and its VM side is killed if it does not stop within the grace.
   */
  private cpuExceeded(run: PoolRun, peer: HostPeer, cpuLimitMs: number): void {
    const exec = run.exec;
    this.byExec.delete(exec);
    run.peer = undefined;
    peer.stop(exec, "aborted");
    this.finish(run);
    const message = `The script computed for more than its CPU limit of ${cpuLimitMs} ms`;
    run.onEvent({ type: "done", exec, result: runFailure("cpu_limit", "timeout", message, CPU_LIMIT_ERROR) });
  }

  /**
   * Whether a run that has waited `waitedMs` behind other runs' turns (one of them long now) moves: it can (it has a
   * journal and moves left), and it has waited as long as its move costs, the time it computed so far, which its
   * rebuild computes again. Waiting up to the cost of the alternative, then taking it, costs at most twice the better
   * of the two (ski rental), whatever the turns ahead do; a run that has computed nothing moves once it has waited
   * STUCK_AFTER_MS.
   */
  private worthMoving(run: PoolRun, peer: HostPeer, waitedMs: number): boolean {
    if (run.journal === undefined || run.moves >= MAX_MOVES_PER_RUN) return false;
    return waitedMs >= STUCK_AFTER_MS + peer.computedBy(run.exec);
  }

  /**
   * Rebuilds a run on another VM side from its journal, if one takes it and the budget has memory for the new copy
   * beside the one left behind (which holds the run's memory until it ends). A move that finds no memory waits for it
   * before new runs (see checkStuck).
   */
  private move(run: PoolRun, from: HostPeer): void {
    const target = this.pick(from, run);
    if (!target) return;
    const budget = this.options.budget;
    const bytes = run.request.memoryLimitBytes;
    if (!budget.tryReserve(bytes)) {
      this.moveWaits = true;
      return;
    }
    const deadline = run.request.deadline;
    const untilDeadline = deadline === null ? 0 : Math.max(0, deadline - Date.now());
    from.abandon(run.exec, () => budget.release(bytes), untilDeadline);
    this.byExec.delete(run.exec);
    run.replay = new Replay(run.journal as Journal);
    run.moves++;
    this.counts.moved++;
    this.place(run, target);
  }

  private onGone(peer: HostPeer, reason: string, cause: GoneCause): void {
    const index = this.peers.indexOf(peer);
    if (index >= 0) this.peers.splice(index, 1);
    this.kept.delete(peer);
    this.cancelIdle(peer);
    if (peer.runs.size > 0 && !this.closed) this.counts.lost++;
    // A VM side that ended by itself may have been ended by the run it computed (if it said which): that one fails
    // rather than moving. One the pool killed for a run that did not stop has that run as its culprit.
    const suspect = cause === "exited" ? peer.computing()?.exec : undefined;
    for (const entry of [...peer.runs.values()]) {
      const run = this.byExec.get(entry.exec);
      if (!run || run.peer !== peer || run.done) continue;
      this.byExec.delete(entry.exec);
      run.peer = undefined;
      if (run.stopped) {
        this.finish(run);
        continue;
      }
      // A VM side that never booted ran nothing: rebuilding its runs elsewhere could fail the same way forever. One
      // that broke the protocol may have acted for any of its runs: they fail with it. One that crashed may have
      // been crashed by any of them: each may be rebuilt a bounded number of times.
      if (cause === "exited") run.crashes++;
      if (
        run.journal &&
        !this.closed &&
        peer.booted &&
        cause !== "broken" &&
        entry.exec !== suspect &&
        run.crashes <= MAX_CRASHES_PER_RUN
      ) {
        // Rebuilt elsewhere; if no VM side can take it now, it waits for one.
        run.replay = new Replay(run.journal);
        this.counts.moved++;
        const target = this.pick(undefined, run);
        if (target) this.place(run, target);
        else this.waiting.unshift(run);
        continue;
      }
      this.fail(
        run,
        run.unmovable !== undefined && cause !== "broken"
          ? `${reason}; this execution could not be rebuilt on another ${this.options.what}: ${run.unmovable}`
          : reason,
      );
    }
    // With no VM side left that is up or coming up, runs waiting for one fail with this one's reason; the next
    // execution starts a VM side again (one that never booted is not respawned in a loop).
    if (!peer.booted && !this.peers.some((p) => !p.dead)) {
      for (const run of this.waiting.splice(0)) this.fail(run, reason);
    }
    // A VM side that booted is replaced off the request path.
    const live = this.peers.filter((p) => !p.dead).length;
    if (!this.closed && !this.options.lazy && peer.booted && live < this.options.size) this.spawn();
    this.pump();
  }

  /** A VM side near a limit of its own takes no new runs; a fresh one takes its place, and it ends once idle. */
  private onRetire(peer: HostPeer): void {
    if (this.closed) return;
    if (this.peers.filter((p) => !p.dead && !p.retiring).length < this.options.size) this.spawn();
    if (peer.runs.size === 0) peer.kill(`the ${this.options.what} retired`);
  }

  /**
   * Extra VM sides (past the base size) that have no runs are closed after EXTRA_IDLE_MS, the newest first: the
   * oldest have run the most and are the warmest.
   */
  private idleCheck(): void {
    const live = this.peers.filter((p) => !p.dead);
    let extra = live.length - this.options.size - this.idleTimers.size;
    for (let i = live.length - 1; i >= 0 && extra > 0; i--) {
      const peer = live[i] as HostPeer;
      if (peer.runs.size > 0 || this.idleTimers.has(peer)) continue;
      extra--;
      this.armIdle(peer);
    }
  }

  /** An idle extra is kept while it is the only VM side free for new work: closing it would start another. */
  private armIdle(peer: HostPeer): void {
    const timer = setTimeout(() => {
      this.idleTimers.delete(peer);
      if (peer.dead || peer.runs.size > 0 || this.peerCount <= this.options.size) return;
      if (this.hasFreeSide(peer, SPARE_AFTER_MS)) peer.kill(`the ${this.options.what} was idle`);
      else this.armIdle(peer);
    }, EXTRA_IDLE_MS);
    timer.unref?.();
    this.idleTimers.set(peer, timer);
  }

  private cancelIdle(peer: HostPeer): void {
    const timer = this.idleTimers.get(peer);
    if (timer) clearTimeout(timer);
    this.idleTimers.delete(peer);
  }

  async close(): Promise<void> {
    this.closed = true;
    this.unlisten();
    if (this.checkTimer) clearTimeout(this.checkTimer);
    if (this.spareTimer) clearInterval(this.spareTimer);
    for (const timer of this.idleTimers.values()) clearTimeout(timer);
    this.idleTimers.clear();
    const message = this.options.closedMessage ?? "the sandbox is closed";
    for (const run of this.waiting.splice(0)) this.fail(run, message);
    const peers = [...this.peers];
    for (const peer of peers) peer.kill(message);
    await Promise.all(peers.map((p) => p.exited));
  }
}
