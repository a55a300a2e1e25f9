/**
 * The VM side of executions: takes the host's commands, drives each run (run.ts) on its own VM from a pool of
 * post-prelude VMs (vm-pool.ts), and reports calls, output and results as events. Every place a VM runs (a worker
 * thread, a child process, a container, the calling thread) runs executions through this one class, behind the one
 * serve loop (serve.ts) or, on the calling thread, the inline launcher.
 */
import type { JSValueHandle } from "quickjs-wasi";
import { IdMap } from "../platform/id-map.ts";
import { clipError, JOBS_PER_INTERRUPT_CHECK } from "./limits.ts";
import { SCRIPT_FILENAME } from "./prelude.ts";
import {
  type CallOutcome,
  type HostCommand,
  type RunRequest,
  type RunResult,
  StopCode,
  type StopReason,
  type VmEvent,
  type VmSnapshot,
} from "./protocol.ts";
import { randomWords, seedWords } from "./random.ts";
import { runFailure, stopFailure, VmRun } from "./run.ts";
import { ScriptCache } from "./script-cache.ts";
import { describeCompileError, wrappedSource } from "./script-wrapper.ts";
import { captureRun } from "./snapshot.ts";
import { JSException, type VmImage, type VmOptions } from "./vm.ts";
import { type Queued, VmPool } from "./vm-pool.ts";

export interface RunnerOptions extends VmOptions {
  /** Receives every event, synchronously; it must not call back into the runner before returning. */
  emit(event: VmEvent): void;
  /** Stop flags shared with the host, indexed by `RunRequest.slot` (see StopCode). */
  stopFlags?: Int32Array;
  /** VMs kept for concurrent executions; requests past it wait. */
  maxVms: number;
  /** The post-prelude image made beforehand for this module (prebuilt-image.ts): the VMs are made from it. */
  image?: VmImage;
  /**
   * Shared with the host (see TURN_SLOTS): which run's turn this thread computes, a count of turns, and when the
   * current one began. The host reads it to tell a run that does not stop from one whose stop waits behind another
   * run's turn, and to place new work away from a thread that computes.
   */
  turn?: Int32Array;
  /** The `Date.now()` the `turn` word's start times count from (they are Int32 milliseconds). */
  turnEpochMs?: number;
  /**
   * Commands handled per slot, shared with the host: a command the host sent and this count does not cover yet waits
   * behind a turn (the host moves such a run elsewhere when the turn computes for long). A command counts once it
   * took effect: a run once it has a VM, an answer once the VM has it. One parked inside the runner (a run waiting
   * for a VM still being made, an answer for it) is not handled yet: another run's turn may come first.
   */
  handled?: Int32Array;
  /**
   * Milliseconds each slot's run has computed so far (its turns, rounded), shared with the host: what rebuilding the
   * run on another VM side would compute again, which the host weighs against waiting behind another run's turn.
   */
  computed?: Int32Array;
  /**
   * Told the exec of a run whose turn has computed for LONG_TURN_MS, and null when that turn ends: a host that shares
   * no memory with the runner learns from it which run holds the thread (see `turn`).
   */
  onLongTurn?: (exec: number | null) => void;
  /**
   * Bytes (by rpcBytes) one message to the host may take, for a channel that carries no more (a remote exchange): a
   * call past it is refused in the script with a RangeError, output or a result past it ends the run.
   */
  maxMessageBytes?: number;
  /**
   * Sends the events emitted so far: called every ANSWERS_PER_FLUSH answers a run applies from its request without
   * waiting, so that the host checks those calls while the run goes on.
   */
  flush?: () => void;
}

/** Answers of a request applied between two flushes of the events (see RunnerOptions.flush). */
const ANSWERS_PER_FLUSH = 64;

/** Int32 slots of the shared `turn` word. */
export const TurnSlot = {
  /** slot + 1 of the run whose turn is being computed, 0 between turns. */
  running: 0,
  /** Turns begun so far (wraps). */
  count: 1,
  /** When the current turn began, in ms since `turnEpochMs`. */
  startedAt: 2,
  /** The OS id of the VM side's thread, 0 when unknown: the host reads that thread's CPU time by it. */
  thread: 3,
} as const;
export const TURN_SLOTS = 4;

const MAX_INT32 = 2 ** 31 - 1;

/** How long a turn computes before `onLongTurn` hears of it: well below the hosts' stop grace periods. */
export const LONG_TURN_MS = 5;

export class VmRunner {
  private readonly vms: VmPool;
  private readonly scripts = new ScriptCache(SCRIPT_FILENAME);
  private readonly runs = new IdMap<VmRun>();
  /** True while guest code runs on this thread; commands that arrive meanwhile wait in `deferred`. */
  private busy = false;
  /** Whether `onLongTurn` heard of the current turn. */
  private longTurnReported = false;
  private readonly deferred: HostCommand[] = [];
  private closed = false;

  constructor(private readonly options: RunnerOptions) {
    this.vms = new VmPool(options, {
      begin: (queued, vm, image) => this.begin(queued, vm, image),
      fail: (queued, message) => this.emitDone(queued.request.exec, runFailure("vm_failed", "sandbox", message)),
    });
  }

  /** Boots the first VM and captures the image every later VM is made from. */
  init(): Promise<void> {
    return this.vms.init();
  }

  get versions(): Record<string, string> {
    return this.vms.versions;
  }

  /**
   * True when every execution here waits on tool calls and nothing else needs the thread (no queued request, no
   * reset in progress): a worker may then block until the host answers.
   */
  get onlyWaitingOnCalls(): boolean {
    return (
      this.runs.size > 0 && this.vms.idleWork === false && this.deferred.length === 0 && !this.busy && !this.closed
    );
  }

  /** Executions that are running or waiting for a VM. */
  get active(): number {
    return this.runs.size + this.vms.waitingCount;
  }

  handle(command: HostCommand): void {
    if (this.busy) {
      this.deferred.push(command);
      return;
    }
    switch (command.type) {
      case "run":
        // Counted in begin(), once it has a VM.
        this.vms.start(command.request);
        break;
      case "settle":
        this.settle(command.exec, command.id, command.outcome, command.seq, command.now);
        break;
      case "stop":
        this.noteHandled(this.slotOf(command.exec));
        this.stop(command.exec, command.reason);
        break;
      case "snapshot":
        this.snapshot(command.exec);
        break;
    }
  }

  /** Captures a run between two of its turns (see the `snapshot` command); one that waits for a VM does so once begun. */
  private snapshot(exec: number): void {
    const run = this.runs.get(exec);
    if (!run) {
      // Handled (and counted) once the run has its VM; a run that ended already said `done`.
      this.vms.waitingRun(exec)?.early.push({ type: "snapshot", exec });
      return;
    }
    this.noteHandled(run.request.slot);
    if (run.ended) return;
    const captured = captureRun(run, this.vms.snapshotKey, this.options.maxMessageBytes);
    run.emit(
      typeof captured === "string"
        ? { type: "snapshot", exec, snapshot: null, refused: captured }
        : { type: "snapshot", exec, snapshot: captured, refused: null },
    );
  }

  private noteHandled(slot: number | undefined): void {
    const handled = this.options.handled;
    if (handled && slot !== undefined) Atomics.add(handled, slot, 1);
  }

  close(): void {
    this.closed = true;
    this.vms.close();
  }

  private slotOf(exec: number): number | undefined {
    return this.runs.get(exec)?.request.slot ?? this.vms.waitingRun(exec)?.request.slot;
  }

  // ---- one execution ----

  private begin(queued: Queued, vm: VmRun["vm"], image: VmImage): void {
    const { request, configured, restore } = queued;
    const run = new VmRun(
      request,
      configured,
      vm,
      // A run from a snapshot goes back to its configuration's image afterwards, never to the snapshot's.
      restore === undefined ? image : this.vms.imageFor(request.configuration.key),
      queued.deadline,
      (event) => this.options.emit(event),
      this.options.maxMessageBytes,
    );
    this.runs.set(request.exec, run);
    this.noteHandled(request.slot);
    vm.dirty = true;
    vm.setMemoryLimit(request.memoryLimitBytes);
    vm.interrupt = (shares) => this.shouldInterrupt(run, shares);
    vm.preempt = () => this.shouldInterrupt(run, 0, true);
    vm.hostCallback = (args) => run.hostCall(args);
    vm.clock = run.clock;
    if (request.deterministic) {
      const restored = restore !== undefined && request.restore !== null;
      if (restored) run.restoreState((request.restore as VmSnapshot).run);
      run.emit({ type: "started", exec: request.exec, fingerprint: this.fingerprint(request), restored });
      // Stopped from the host's onStarted hook (inline, the event is handled synchronously): the VM went back already.
      if (run.ended) return;
    }
    if (run.restored) {
      // The VM is where the snapshot left it, waiting on its open calls: no turn to run until a result comes.
      this.afterTurn(run, undefined);
      this.flushDeferred();
    } else {
      this.enter(run, () => this.startScript(run));
      if (request.answers !== null) this.applyInOrder(run);
    }
    for (const command of queued.early) this.handle(command);
  }

  private startScript(run: VmRun): void {
    const { request, vm } = run;
    const qjs = vm.qjs;
    if (run.image === this.vms.baseImage) {
      vm.callEntry("configure", request.configuration.json);
      const captured = this.vms.noteConfigured(request.configuration.key, vm);
      if (captured) run.image = captured;
    }
    const seed = request.deterministic ? seedWords(request.deterministic.seed) : (request.random ?? randomWords());
    const store = Object.keys(request.store).length > 0 ? JSON.stringify(request.store) : undefined;
    vm.callEntry("prepare", seed[0], seed[1], seed[2], seed[3], store);
    let fn: JSValueHandle;
    try {
      // The wrapper shares line 1 with the script, so line numbers in stacks are exact (columns on line 1 are
      // corrected in the result, see wrapperColumns).
      fn = this.scripts.evaluate(qjs, wrappedSource(request));
    } catch (error) {
      if (error instanceof JSException && !vm.isUncatchable(error)) {
        const described = describeCompileError(error, request);
        run.result = { ok: false, payload: JSON.stringify(described), writes: undefined };
        error.dispose();
        return;
      }
      throw error;
    }
    const input = request.program ? qjs.newString(request.program.input) : qjs.undefined;
    qjs.callFunction(vm.entryPoints.start, qjs.undefined, fn, input).dispose();
    input.dispose();
    fn.dispose();
  }

  private settle(exec: number, id: number, outcome: CallOutcome, seq: number | null, now: number | null): void {
    const run = this.runs.get(exec);
    if (!run) {
      // Handled (and counted) once the run has its VM.
      this.vms.waitingRun(exec)?.early.push({ type: "settle", exec, id, outcome, seq, now });
      return;
    }
    this.noteHandled(run.request.slot);
    if (run.ended) return;
    if (run.request.deterministic) {
      if (seq === null || now === null) return;
      run.early.set(seq, { id, outcome, now, answered: false });
      this.applyInOrder(run);
      return;
    }
    this.enter(run, () => run.applyOutcome(id, outcome));
  }

  /**
   * Deterministic runs: applies the results that are next in number order, each in its own turn. A turn may make a
   * call the request answered ahead, whose result is then next: a resumed program runs through its journaled calls
   * here without waiting for the host.
   */
  private applyInOrder(run: VmRun): void {
    let next = run.early.get(run.nextSeq);
    let answered = 0;
    while (next && !run.ended) {
      if (next.answered && ++answered % ANSWERS_PER_FLUSH === 0) this.options.flush?.();
      const applying = run.nextSeq;
      run.early.delete(applying);
      run.nextSeq++;
      run.clockNow = Math.max(run.clockNow, next.now);
      const { id: callId, outcome: callOutcome } = next;
      if (run.during) run.during = { seq: applying, issued: run.during.issued };
      this.enter(run, () => run.applyOutcome(callId, callOutcome));
      next = run.early.get(run.nextSeq);
    }
  }

  private stop(exec: number, reason: StopReason): void {
    if (this.vms.dropWaiting(exec)) {
      this.emitDone(exec, stopFailure(reason));
      return;
    }
    const run = this.runs.get(exec);
    if (!run || run.ended) return;
    run.stopReason = reason;
    this.end(run, run.stoppedResult());
  }

  /**
   * Runs guest code (`body`), drains its promise jobs, and decides what the run does next: end with its result,
   * end with the limit it broke, fail because it waits on nothing, or wait for call results.
   */
  private enter(run: VmRun, body: () => void): void {
    // A run the host stopped while this turn waited for the thread (the copy a move left behind, say) does not compute
    // it: it ends as stopped, as a stop found in the same batch does across a pipe.
    const flags = this.options.stopFlags;
    const flagged = flags ? Atomics.load(flags, run.request.slot) : StopCode.none;
    if (flagged !== StopCode.none) {
      this.stop(run.request.exec, flagged === StopCode.timeout ? "timeout" : "aborted");
      return;
    }
    const vm = run.vm;
    const turn = this.options.turn;
    this.busy = true;
    if (turn) {
      Atomics.store(turn, TurnSlot.startedAt, Date.now() - (this.options.turnEpochMs ?? 0));
      Atomics.add(turn, TurnSlot.count, 1);
      Atomics.store(turn, TurnSlot.running, run.request.slot + 1);
    }
    run.enterTurn(performance.now());
    this.longTurnReported = false;
    let crash: RunResult | undefined;
    let turnMs = 0;
    try {
      body();
      vm.drain(JOBS_PER_INTERRUPT_CHECK);
    } catch (error) {
      crash = run.classify(error);
    } finally {
      const now = performance.now();
      turnMs = now - run.enteredAt;
      run.leaveTurn(now);
      this.busy = false;
      if (turn) Atomics.store(turn, TurnSlot.running, 0);
      const computed = this.options.computed;
      if (computed) Atomics.store(computed, run.request.slot, Math.min(MAX_INT32, Math.round(run.cpuMs)));
      if (this.longTurnReported) {
        this.longTurnReported = false;
        this.options.onLongTurn?.(null);
      }
    }
    run.checkCpuAfterTurn();
    this.afterTurn(run, crash);
    // What a long turn and the turns before it produced (calls, say) goes out now, not after the turns still to come
    // in this batch of commands: no run's call waits for other runs' turns to reach the host.
    if (turnMs >= LONG_TURN_MS) this.options.flush?.();
    this.flushDeferred();
  }

  /** What a run does after a turn: end (its result, a limit, a crash, nothing left to wait on) or wait for results. */
  private afterTurn(run: VmRun, crash: RunResult | undefined): void {
    if (run.ended) return;
    const result = run.endAfterTurn(crash);
    if (result) this.end(run, result);
    // A run whose next result the request answered does not wait for the host: no idle.
    else if (run.during && run.early.get(run.nextSeq)?.answered !== true) {
      run.emit({ type: "idle", exec: run.request.exec, seq: run.during.seq, issued: run.during.issued });
    }
  }

  private flushDeferred(): void {
    while (!this.busy && this.deferred.length > 0) this.handle(this.deferred.shift() as HostCommand);
  }

  /**
   * QuickJS's interrupt poll (charged `shares` of the budget), or (`tick`) a tick of a loop inside a built-in, where
   * true pre-empts it.
   */
  private shouldInterrupt(run: VmRun, shares: number, tick = false): boolean {
    // Only inside the run's own turn: a tick elsewhere (the host reading a value) must not break the VM.
    if (tick && (!this.busy || run.ended)) return false;
    const flags = this.options.stopFlags;
    let flag: StopReason | undefined;
    if (flags) {
      const code = Atomics.load(flags, run.request.slot);
      if (code !== StopCode.none) flag = code === StopCode.timeout ? "timeout" : "aborted";
    }
    if (run.interruptRequested(flag, shares)) return true;
    const onLongTurn = this.options.onLongTurn;
    if (onLongTurn && !this.longTurnReported && performance.now() - run.enteredAt > LONG_TURN_MS) {
      this.longTurnReported = true;
      onLongTurn(run.request.exec);
    }
    return false;
  }

  private end(run: VmRun, result: RunResult): void {
    if (run.ended) return;
    run.ended = true;
    this.runs.delete(run.request.exec);
    const vm = run.vm;
    vm.interrupt = () => true;
    vm.preempt = () => false;
    vm.hostCallback = () => undefined;
    run.emit({ type: "done", exec: run.request.exec, result: clipped(result) });
    if (this.busy) {
      // Still inside the VM (a stop arrived from an event handler): recycle once the stack has unwound.
      queueMicrotask(() => this.vms.recycle(vm, run.image));
      return;
    }
    this.vms.recycle(vm, run.image);
  }

  private emitDone(exec: number, result: RunResult): void {
    this.options.emit({ type: "done", exec, result: clipped(result) });
  }

  private fingerprint(request: RunRequest): string {
    return JSON.stringify({
      engine: `quickjs-wasi@${this.versions["quickjs-wasi"]}`,
      quickjs: this.versions.quickjs,
      prelude: this.vms.preludeHash,
      memoryLimitBytes: request.memoryLimitBytes,
      maxStackSize: this.options.maxStackSize,
    });
  }
}

/** Errors read from the VM's exceptions (not cut by the prelude) are cut before they leave, as events can be framed. */
function clipped(result: RunResult): RunResult {
  return result.ok ? result : { ...result, error: clipError(result.error) };
}
