/**
 * One execution on one VM: its state, the host function's calls (tool calls, output, the end), its clock (journaled
 * for a replay, or replayed), its limits, and the result it ends with. The runner (runner.ts) owns the thread: it
 * enters the VM for a run's turns and decides, with `afterTurn`, what the run does next.
 */

import { SCHEDULER_TICK_MS, threadCpuMs } from "../platform/platform.ts";
import type { CodemodeError } from "../types.ts";
import { BUDGET_SHARES, MAX_OUTPUT_CHARS, MAX_OUTPUT_ITEMS, MAX_VALUE_CHARS } from "./limits.ts";
import { Op } from "./prelude.ts";
import {
  type CallOutcome,
  CLOCK_READS_PER_MESSAGE,
  type ConfigurationContent,
  CPU_LIMIT_ERROR,
  DEADLINE_MESSAGE,
  type During,
  MAX_JOURNAL_CLOCK_READS,
  type RunEndReason,
  type RunRequest,
  type RunResult,
  type StopReason,
  type VmEvent,
  type VmSnapshot,
} from "./protocol.ts";
import { rpcBytes } from "./rpc-bytes.ts";
import { cleanStack, wrapperColumns } from "./script-wrapper.ts";
import type { HostArgs, Primitive } from "./values.ts";
import { type GuestVm, Interrupted, JSException, Preempted, type VmClock, type VmImage } from "./vm.ts";

/** A call of the run that waits for its result. */
interface OpenCall {
  target: "tool" | "global";
  name: string;
  /** Its arguments as sent (kept by reference, for a snapshot of the run); their characters count as held. */
  args: string | undefined;
}

export class VmRun {
  nextCallId = 0;
  /** Open calls by id: their arguments count against the memory limit while open. */
  readonly pending = new Map<number, OpenCall>();
  /** The run continues a snapshot (RunRequest.restore): the request's answers are for a run from the start. */
  restored = false;
  /** Characters of open calls' arguments and of output so far: what the run holds outside its VM heap. */
  private held = 0;
  private outputChars = 0;
  private outputItems = 0;
  /** A limit the script broke: the run fails with it even if the script caught the error. */
  fatal: { error: CodemodeError; reason: Exclude<RunEndReason, "returned"> } | undefined;
  result: { ok: boolean; payload: string | undefined; writes: string | undefined } | undefined;
  stopReason: StopReason | "cpu" | "budget" | undefined;
  /** What the run's polls were charged of its interrupt budget so far, in BUDGET_SHARES-ths of a poll. */
  private spentShares = 0;
  /** CPU time of the run's finished turns (see `turnCpuMs`). */
  cpuMs = 0;
  /** When the current turn began (wall clock), and its thread's CPU time then (NaN: not read, or no thread clock). */
  enteredAt = 0;
  private enteredCpuMs = Number.NaN;
  /** A turn's CPU time as last read, and the wall time of that read: past it, CPU time grows at most as fast. */
  private turnCpuSeen = { cpuMs: 0, at: 0 };
  readonly startedPerf = performance.now();
  ended = false;
  /** Deterministic runs: the VM clock, the next result number and results that arrived early. */
  clockNow: number;
  nextSeq = 1;
  readonly early = new Map<number, { id: number; outcome: CallOutcome; now: number; answered: boolean }>();
  during: During | null;
  /** Clock values read and not reported yet (journaled runs); null once more than a journal keeps were read. */
  private clockReads: number[] | null = [];
  private clockReported = 0;
  private clockLostReported = false;
  /** Where a replay is in the clock values of the first attempt. */
  private replayAt = 0;
  /** The VM's count of refused allocations when the run began (see GuestVm.outOfMemoryCount). */
  private readonly oomAtStart: number | undefined;
  readonly clock: VmClock;

  constructor(
    readonly request: RunRequest,
    readonly configured: ConfigurationContent,
    readonly vm: GuestVm,
    /** The image the VM started from; it is reset to it afterwards. */
    public image: VmImage,
    /** Its deadline on this VM side's clock (ms since the epoch), or null. */
    private readonly deadline: number | null,
    private readonly emitEvent: (event: VmEvent) => void,
    /** Bytes (by rpcBytes) one message to the host may take, for a channel that carries no more (see RunnerOptions). */
    private readonly maxMessageBytes?: number,
  ) {
    const deterministic = request.deterministic;
    this.clockNow = deterministic?.startedAt ?? 0;
    this.during = deterministic ? { seq: 0, issued: 0 } : null;
    this.oomAtStart = vm.outOfMemoryCount();
    const base: VmClock = deterministic
      ? { realtimeMs: () => this.clockNow, monotonicMs: () => this.clockNow - deterministic.startedAt }
      : { realtimeMs: () => Date.now(), monotonicMs: () => performance.now() - this.startedPerf };
    this.clock =
      request.journal || request.replayClock !== null
        ? { realtimeMs: () => this.read(base.realtimeMs()), monotonicMs: () => this.read(base.monotonicMs()) }
        : base;
  }

  /** A clock read: served from the first attempt's values while replaying, and recorded for the journal. */
  private read(now: number): number {
    const replay = this.request.replayClock;
    const value = replay !== null && this.replayAt < replay.length ? (replay[this.replayAt++] as number) : now;
    if (this.request.journal && this.clockReads !== null) {
      if (this.clockReported + this.clockReads.length >= MAX_JOURNAL_CLOCK_READS) this.clockReads = null;
      else this.clockReads.push(value);
    }
    return value;
  }

  /** Sends an event of this run, after the clock values read before it (the host journals them in order). */
  emit(event: VmEvent): void {
    this.flushClock();
    this.emitEvent(event);
  }

  private flushClock(): void {
    const reads = this.clockReads;
    if (reads === null) {
      if (!this.clockLostReported) {
        this.clockLostReported = true;
        this.emitEvent({ type: "clock", exec: this.request.exec, reads: null });
      }
      return;
    }
    if (reads.length === 0) return;
    for (let at = 0; at < reads.length; at += CLOCK_READS_PER_MESSAGE) {
      this.emitEvent({ type: "clock", exec: this.request.exec, reads: reads.slice(at, at + CLOCK_READS_PER_MESSAGE) });
    }
    this.clockReported += reads.length;
    reads.length = 0;
  }

  /** Whether QuickJS refused an allocation at the memory limit since the run began. */
  private hitMemoryLimit(): boolean {
    const now = this.vm.outOfMemoryCount();
    return now !== undefined && this.oomAtStart !== undefined && now > this.oomAtStart;
  }

  // ---- the host function ----

  hostCall(args: HostArgs): Primitive {
    const op = args.number(0);
    if (op === Op.call || op === Op.callSlot) return this.call(op, args);
    if (op === Op.output) return this.output(args);
    if (op === Op.done) {
      if (this.result) return undefined;
      this.result = { ok: args.boolean(1), payload: args.string(2), writes: args.string(3) };
      return undefined;
    }
    return undefined;
  }

  private call(op: number, args: HostArgs): Primitive {
    let target: "tool" | "global";
    let name: string;
    let json: string | undefined;
    if (op === Op.callSlot) {
      const slot = args.number(1);
      target = slot % 2 === 1 ? "global" : "tool";
      const entry = target === "tool" ? this.configured.tools[slot >> 1] : this.configured.globals[slot >> 1];
      if (!entry) return "the call names no configured tool";
      name = entry.name;
      json = args.string(2);
    } else {
      target = args.number(1) === 1 ? "global" : "tool";
      name = args.string(2) ?? "";
      json = args.string(3);
    }
    const size = json?.length ?? 0;
    if (size > MAX_VALUE_CHARS) return `the argument of ${name}() is more than ${MAX_VALUE_CHARS} characters of JSON`;
    const event = { type: "call" as const, exec: this.request.exec, id: this.nextCallId + 1, target, name, args: json };
    // A channel that carries messages of a bounded size (a remote exchange) could never send this call.
    const limit = this.maxMessageBytes;
    if (limit !== undefined) {
      const bytes = rpcBytes(event);
      if (bytes > limit) {
        return `${name}(): the call takes ${bytes} bytes to send, more than the limit of ${limit} bytes of one exchange with the host (MAX_EXCHANGE_BYTES)`;
      }
    }
    const { maxCalls, memoryLimitBytes } = this.request;
    if (this.nextCallId >= maxCalls) {
      return `${name}(): this execution has made its limit of ${maxCalls} calls (maxToolCalls)`;
    }
    // Arguments of calls still open are held outside the VM's heap (in messages, in the host): they count against
    // the run's memory limit, so that unawaited calls cannot pile up more than the VM itself may hold.
    if (this.held + size > memoryLimitBytes) {
      return `${name}(): the arguments of this execution's open calls and its output would pass its memory limit of ${memoryLimitBytes} bytes`;
    }
    this.held += size;
    this.nextCallId = event.id;
    this.pending.set(event.id, { target, name, args: json });
    if (this.during) this.during = { seq: this.during.seq, issued: this.nextCallId };
    this.emit(event);
    // Answered ahead by the request: applied in its turn, as a settle that came with it (see VmRunner.applyInOrder).
    const answer = this.restored ? undefined : this.request.answers?.[event.id - 1];
    if (answer !== undefined) {
      this.early.set(answer.seq, { id: event.id, outcome: answer.outcome, now: answer.now, answered: true });
    }
    return event.id;
  }

  private output(args: HostArgs): Primitive {
    const kind = args.number(1);
    const data = args.string(2) ?? "";
    this.outputChars += data.length;
    this.outputItems += 1;
    this.held += data.length;
    let message: string | undefined;
    if (this.outputItems > MAX_OUTPUT_ITEMS) message = `output exceeded ${MAX_OUTPUT_ITEMS} items`;
    else if (this.outputChars > MAX_OUTPUT_CHARS) message = `output exceeded ${MAX_OUTPUT_CHARS} characters`;
    else if (this.maxMessageBytes !== undefined && rpcBytes(data) + 256 > this.maxMessageBytes) {
      message = `an output item takes more than the limit of ${this.maxMessageBytes} bytes of one exchange with the host (MAX_EXCHANGE_BYTES)`;
    } else if (this.held > this.request.memoryLimitBytes) {
      message = `output and the arguments of open calls exceeded the memory limit of ${this.request.memoryLimitBytes} bytes`;
    }
    if (message !== undefined) {
      this.fatal ??= {
        error: { kind: "script", name: "RangeError", message, stack: `RangeError: ${message}` },
        reason: "threw",
      };
      return message;
    }
    const item =
      kind === 2
        ? { type: "image" as const, data, mimeType: args.string(3) ?? "" }
        : kind === 1
          ? { type: "text" as const, text: data, console: true as const }
          : { type: "text" as const, text: data };
    this.emit({ type: "output", exec: this.request.exec, item });
    return undefined;
  }

  /** Hands a call's outcome to the script (the caller enters the VM for it). */
  applyOutcome(id: number, outcome: CallOutcome): void {
    const call = this.pending.get(id);
    if (call === undefined) return;
    this.pending.delete(id);
    this.held -= call.args?.length ?? 0;
    if (outcome.ok) this.vm.callEntry("settle", id, true, outcome.value, undefined);
    else this.vm.callEntry("settle", id, false, outcome.message, outcome.properties);
  }

  // ---- snapshots ----

  /** The runner's state of the run, for a snapshot between two of its turns (see VmSnapshot.run). */
  snapshotState(): VmSnapshot["run"] {
    const open: VmSnapshot["run"]["open"] = [];
    for (const [id, call] of this.pending) {
      open.push({ id, target: call.target, name: call.name, ...(call.args === undefined ? {} : { args: call.args }) });
    }
    open.sort((a, b) => a.id - b.id);
    return { calls: this.nextCallId, nextSeq: this.nextSeq, clockNow: this.clockNow, open };
  }

  /** Takes the state a snapshot kept (the VM already holds its memory): the run goes on from there. */
  restoreState(state: VmSnapshot["run"]): void {
    this.restored = true;
    this.nextCallId = state.calls;
    this.nextSeq = state.nextSeq;
    this.clockNow = state.clockNow;
    for (const { id, target, name, args } of state.open) {
      this.pending.set(id, { target, name, args });
      this.held += args?.length ?? 0;
    }
    this.during = { seq: state.nextSeq - 1, issued: state.calls };
  }

  // ---- limits ----

  /**
   * The run-level checks of the interrupt handler; `flag` is the host's shared stop flag, if any, and `shares` what
   * the poll is charged of the interrupt budget (none for a loop's tick, which is no poll of QuickJS's own).
   */
  interruptRequested(flag: StopReason | undefined, shares: number): boolean {
    if (this.stopReason !== undefined || this.result !== undefined || this.fatal !== undefined) return true;
    if (flag !== undefined) {
      this.stopReason = flag;
      return true;
    }
    const budget = this.request.interruptBudget;
    if (budget !== null && shares > 0) {
      this.spentShares += shares;
      if (this.spentShares > budget * BUDGET_SHARES) {
        this.stopReason = "budget";
        return true;
      }
    }
    const deadline = this.deadline;
    // Whole milliseconds on both sides: at `>=`, a run begun late in one millisecond stopped up to 1 ms before its
    // time was up. Past it, it stops at most 1 ms after.
    if (deadline !== null && Date.now() > deadline) {
      this.stopReason = "timeout";
      return true;
    }
    const cpuLimit = this.request.cpuLimitMs;
    if (cpuLimit !== null) {
      // The thread's CPU clock is read only once the wall clock, which is never behind it, says the limit may be past.
      const now = performance.now();
      const seen = this.turnCpuSeen;
      if (this.cpuMs + seen.cpuMs + (now - seen.at) > cpuLimit) {
        this.turnCpuSeen = { cpuMs: this.turnCpuMs(now), at: now };
        if (this.cpuMs + this.turnCpuSeen.cpuMs > cpuLimit) {
          this.stopReason = "cpu";
          return true;
        }
      }
    }
    return false;
  }

  /** A turn begins: the clocks a CPU limit is counted by (the thread's CPU clock only for a run that has one). */
  enterTurn(now: number): void {
    this.enteredAt = now;
    this.turnCpuSeen = { cpuMs: 0, at: now };
    this.enteredCpuMs = this.request.cpuLimitMs === null ? Number.NaN : (threadCpuMs() ?? Number.NaN);
  }

  /** A turn ends: its CPU time counts towards the run's. */
  leaveTurn(now: number): void {
    this.cpuMs += this.turnCpuMs(now);
  }

  /**
   * What the current turn computed until `now`: the wall time, or, for a run with a CPU limit on a thread with a CPU
   * clock, its thread's CPU time plus at most one scheduler tick by which that clock lags. On a machine with more busy
   * threads than cores, the wall time also counts the time the thread waited for a core, and a program ran into its
   * `cpuMillis` having computed a fraction of it.
   */
  private turnCpuMs(now: number): number {
    const wallMs = now - this.enteredAt;
    if (Number.isNaN(this.enteredCpuMs)) return wallMs;
    const cpuNow = threadCpuMs();
    if (cpuNow === undefined) return wallMs;
    return Math.min(wallMs, Math.max(0, cpuNow - this.enteredCpuMs) + SCHEDULER_TICK_MS);
  }

  /** After a turn: a native built-in (a huge JSON.stringify or sort) computes without interrupt checks. */
  checkCpuAfterTurn(): void {
    const cpuLimit = this.request.cpuLimitMs;
    if (!this.ended && cpuLimit !== null && this.cpuMs > cpuLimit && this.stopReason === undefined && !this.fatal) {
      this.stopReason = "cpu";
      this.result = undefined;
    }
  }

  /**
   * What ends the run after a turn, if anything: its stop, a limit it broke, its own end, a crash, or waiting on a
   * promise nothing can settle. undefined: it waits on calls.
   */
  endAfterTurn(crash: RunResult | undefined): RunResult | undefined {
    if (this.stopReason !== undefined && this.result === undefined) return this.stoppedResult();
    if (this.fatal) {
      return { ok: false, reason: this.fatal.reason, error: this.fatal.error, cpuMs: this.cpuMs, during: this.during };
    }
    if (this.result) return this.finishedResult();
    if (crash) return crash;
    if (this.pending.size === 0) {
      return this.failure(
        "stalled",
        "script",
        "The script is waiting on a promise that can never settle: no tool call is pending, and timers do not exist here.",
        "Error",
      );
    }
    return undefined;
  }

  /** What an error thrown out of the VM means for the run (undefined: the run's stop or result decides). */
  classify(error: unknown): RunResult | undefined {
    // Stopped (at a poll, between jobs, or pre-empted inside a built-in, whose VM is broken and replaced): the run
    // ends with what stopped it.
    if (this.stopReason !== undefined || error instanceof Interrupted || error instanceof Preempted) return undefined;
    if (error instanceof JSException) {
      const uncatchable = this.vm.isUncatchable(error);
      const described: CodemodeError = {
        kind: "script",
        name: error.name,
        message: error.message,
        ...(error.stack ? { stack: cleanStack(`${error.name}: ${error.message}\n${error.stack}`) } : {}),
      };
      error.dispose();
      if (uncatchable && this.result) return undefined;
      const reason = uncatchable && this.isOutOfMemory(described) ? "memory_limit" : "threw";
      return { ok: false, reason, error: described, cpuMs: this.cpuMs, during: this.during };
    }
    // An error that is not a guest exception (the host's own stack overflowing through the wasm, a wasm trap) leaves
    // the VM's stack pointer and heap in an unknown state: the VM is replaced.
    this.vm.broken = true;
    if (error instanceof RangeError && /call stack/i.test(error.message)) {
      return this.failure("threw", "script", "Maximum call stack size exceeded", "RangeError");
    }
    return this.failure("vm_failed", "sandbox", `the VM failed: ${messageOf(error)}`);
  }

  /**
   * An error is the memory limit when QuickJS refused an allocation during the run: a program that throws its own
   * `InternalError("out of memory")` has not. A module without the counter (one compiled by other means) falls back to
   * the error QuickJS raises for it.
   */
  private isOutOfMemory(error: CodemodeError): boolean {
    if (this.vm.outOfMemoryCount() !== undefined) return this.hitMemoryLimit();
    return error.name === "InternalError" && error.message === "out of memory";
  }

  finishedResult(): RunResult {
    const result = this.result as NonNullable<VmRun["result"]>;
    if (result.ok) {
      const limit = this.maxMessageBytes;
      // 1 KiB for the rest of the `done` message.
      if (limit !== undefined && rpcBytes(result.payload ?? "") + rpcBytes(result.writes ?? "") + 1024 > limit) {
        const message = `the result and the store's writes take more than the limit of ${limit} bytes of one exchange with the host (MAX_EXCHANGE_BYTES)`;
        return this.failure("threw", "script", message, "RangeError");
      }
      return {
        ok: true,
        reason: "returned",
        value: result.payload,
        writes: result.writes,
        cpuMs: this.cpuMs,
        during: this.during,
      };
    }
    let error: CodemodeError;
    try {
      const parsed = JSON.parse(result.payload ?? "{}") as { name?: unknown; message?: unknown; stack?: unknown };
      error = { kind: "script", message: typeof parsed.message === "string" ? parsed.message : "" };
      if (typeof parsed.name === "string") error.name = parsed.name;
      if (typeof parsed.stack === "string") error.stack = wrapperColumns(parsed.stack, this.request);
    } catch {
      return this.failure("vm_failed", "sandbox", "the VM reported an unreadable error");
    }
    // A program that caught a refused allocation and threw it on (or failed because of it) ended at its limit.
    const reason = error.name === "InternalError" && this.hitMemoryLimit() ? "memory_limit" : "threw";
    return { ok: false, reason, error, cpuMs: this.cpuMs, during: this.during };
  }

  stoppedResult(): RunResult {
    const reason = this.stopReason ?? "aborted";
    if (reason === "cpu") {
      return this.failure(
        "cpu_limit",
        "timeout",
        `The script computed for more than its CPU limit of ${this.request.cpuLimitMs} ms`,
        CPU_LIMIT_ERROR,
      );
    }
    if (reason === "budget") {
      return this.failure(
        "cpu_limit",
        "timeout",
        `The script computed past its interrupt budget of ${this.request.interruptBudget} polls`,
      );
    }
    return reason === "timeout"
      ? this.failure("deadline", "timeout", DEADLINE_MESSAGE)
      : this.failure("stopped", "aborted", "The execution was aborted");
  }

  failure(
    reason: Exclude<RunEndReason, "returned">,
    kind: CodemodeError["kind"],
    message: string,
    name?: string,
  ): RunResult {
    return runFailure(reason, kind, message, name, this.cpuMs, this.during);
  }
}

/** A failed result; with `name`, its stack is `name: message`. */
export function runFailure(
  reason: Exclude<RunEndReason, "returned">,
  kind: CodemodeError["kind"],
  message: string,
  name?: string,
  cpuMs = 0,
  during: During | null = null,
): RunResult {
  const error: CodemodeError = { kind, message };
  if (name) {
    error.name = name;
    error.stack = `${name}: ${message}`;
  }
  return { ok: false, reason, error, cpuMs, during };
}

export function stopFailure(reason: StopReason): RunResult {
  return reason === "aborted"
    ? runFailure("stopped", "aborted", "The execution was aborted")
    : runFailure("deadline", "timeout", DEADLINE_MESSAGE);
}

export function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
