/**
 * The VM side of executions: takes run requests, drives each on its own VM from a pool of post-prelude VMs, and
 * reports calls, output and results as events. Worker threads, the inline launcher and child processes all run
 * executions through this one class; only the transport around it differs.
 */
import { randomFillSync } from "node:crypto";
import type { JSValueHandle } from "quickjs-wasi";
import type { CodemodeError } from "../types.ts";
import { clipError, JOBS_PER_INTERRUPT_CHECK, MAX_OUTPUT_CHARS, MAX_OUTPUT_ITEMS, MAX_VALUE_CHARS } from "./limits.ts";
import { Op, SCRIPT_FILENAME } from "./prelude.ts";
import {
  type CallOutcome,
  type ConfigurationContent,
  CPU_LIMIT_ERROR,
  DEADLINE_MESSAGE,
  type During,
  type HostCommand,
  type RunRequest,
  type RunResult,
  StopCode,
  type StopReason,
  type VmEvent,
} from "./protocol.ts";
import { RepeatCache } from "./repeat-cache.ts";
import { ScriptCache } from "./script-cache.ts";
import type { HostArgs, Primitive } from "./values.ts";
import { GuestVm, Interrupted, JSException, MANY_ZERO_PAGES, type VmImage, type VmOptions } from "./vm.ts";

/** VMs booted besides the first, so that executions in a row need not wait for a reset. */
const SPARE_VMS = 1;
/** Bytes of the image copied per step of a gradual whole-image reset (about 20-30 us each). */
const RESET_CHUNK_BYTES = 256 * 1024;
/**
 * With whole-image resets (a module without write tracking), a VM that once wrote many of the image's zero pages (a
 * deep recursion, a large allocation) is replaced by a new instance, whose zero pages are cheap to check again (see
 * GuestVm.peakZeroPagesWritten), once its last this many resets found few written: a workload that writes them every
 * time rewrites them anyway and is not renewed each time.
 */
const RENEW_AFTER_QUIET_RESETS = 64;

export interface RunnerOptions extends VmOptions {
  /** Receives every event, synchronously; it must not call back into the runner before returning. */
  emit(event: VmEvent): void;
  /** Abort flags shared with the host, indexed by `RunRequest.slot` (see StopCode). */
  stopFlags?: Int32Array;
  /** VMs kept for concurrent executions; requests past it wait. */
  maxVms: number;
  /**
   * Set to the slot + 1 of the run whose turn this thread is computing, 0 between turns: the host reads it to tell a
   * run that does not stop from one whose stop waits behind another run's turn.
   */
  running?: Int32Array;
  /**
   * Told the exec of a run whose turn has computed for LONG_TURN_MS, and null when that turn ends: a host that shares
   * no memory with the runner learns from it which run holds the thread (see `running`).
   */
  onLongTurn?: (exec: number | null) => void;
}

/** How long a turn computes before `onLongTurn` hears of it: well below the hosts' stop grace periods. */
export const LONG_TURN_MS = 50;

/** A request with its configuration, parsed. */
interface Queued {
  request: RunRequest;
  configured: ConfigurationContent;
}

interface ActiveRun {
  request: RunRequest;
  configured: ConfigurationContent;
  vm: GuestVm;
  /** The image the VM started from; it is reset to it afterwards. */
  image: VmImage;
  nextCallId: number;
  pending: Set<number>;
  outputChars: number;
  outputItems: number;
  /** A limit the script broke: the run fails with it even if the script caught the error. */
  fatal: CodemodeError | undefined;
  result: { ok: boolean; payload: string | undefined; writes: string | undefined } | undefined;
  stopReason: StopReason | "cpu" | undefined;
  cpuMs: number;
  enteredAt: number;
  startedPerf: number;
  ended: boolean;
  /** Deterministic runs: the VM clock, the next result number and results that arrived early. */
  clockNow: number;
  nextSeq: number;
  early: Map<number, { id: number; outcome: CallOutcome; now: number }>;
  during: During | null;
}

export class VmRunner {
  /** The post-prelude image every VM is made from. */
  private image!: VmImage;
  /**
   * Images captured after `configure`, by configuration (each keeps a VM's data pages, about 0.5 MiB): executions
   * with the same tools, globals and mode start from a VM already past `configure`, which otherwise costs tens of
   * microseconds per tool.
   */
  private readonly configured = new RepeatCache<VmImage>({ entries: 4, counted: 256 });
  /** Configurations parsed, by key (only `get`/`set` are used: parsing is needed from the first use on). */
  private readonly configurations = new RepeatCache<ConfigurationContent>({ entries: 64, counted: 0 });
  private readonly scripts = new ScriptCache(SCRIPT_FILENAME);
  private readonly idle: GuestVm[] = [];
  /** VMs whose execution ended and whose reset is scheduled; taken (and reset at once) when no idle VM is left. */
  private readonly recycling = new Map<GuestVm, Generator<void, boolean>>();
  private vmCount = 0;
  private readonly runs = new Map<number, ActiveRun>();
  private readonly waiting: Queued[] = [];
  /** True while guest code runs on this thread; commands that arrive meanwhile wait in `deferred`. */
  private busy = false;
  /** Whether `onLongTurn` heard of the current turn. */
  private longTurnReported = false;
  private readonly deferred: HostCommand[] = [];
  private closed = false;

  constructor(private readonly options: RunnerOptions) {}

  /** Boots the first VM and captures the image every later VM is made from. */
  async init(): Promise<void> {
    const { vm, image } = await GuestVm.boot(this.options);
    this.image = image;
    if (!vm.reset(image)) throw new Error("a freshly booted VM could not be reset");
    this.idle.push(vm);
    this.vmCount = 1;
    // Spares, so that a clean VM can serve while the last ones used are being reset.
    while (this.vmCount < Math.min(this.options.maxVms, SPARE_VMS + 1)) {
      this.idle.push(await GuestVm.fromImage(this.options, image));
      this.vmCount++;
    }
  }

  get versions(): Record<string, string> {
    return this.image.versions;
  }

  /**
   * True when every execution here waits on tool calls and nothing else needs the thread (no queued request, no
   * reset in progress): a worker may then block until the host answers.
   */
  get onlyWaitingOnCalls(): boolean {
    return (
      this.runs.size > 0 &&
      this.waiting.length === 0 &&
      this.recycling.size === 0 &&
      this.deferred.length === 0 &&
      !this.busy &&
      !this.closed
    );
  }

  /** Executions that are running or waiting for a VM. */
  get active(): number {
    return this.runs.size + this.waiting.length;
  }

  handle(command: HostCommand): void {
    if (this.busy) {
      this.deferred.push(command);
      return;
    }
    switch (command.type) {
      case "run":
        this.start(command.request);
        break;
      case "settle":
        this.settle(command.exec, command.id, command.outcome, command.seq, command.now);
        break;
      case "stop":
        this.stop(command.exec, command.reason);
        break;
    }
  }

  close(): void {
    this.closed = true;
    for (const vm of [...this.idle, ...this.recycling.keys()]) vm.dispose();
    this.idle.length = 0;
    this.recycling.clear();
  }

  // ---- VM pool ----

  private start(request: RunRequest): void {
    const queued: Queued = { request, configured: this.configurationOf(request) };
    const image = this.imageFor(request.configuration.key);
    const vm = this.takeIdle(image);
    if (vm) {
      this.begin(queued, vm, image);
      return;
    }
    this.waiting.push(queued);
    if (this.vmCount < this.options.maxVms) {
      this.vmCount++;
      void this.addVm();
    }
  }

  private configurationOf(request: RunRequest): ConfigurationContent {
    const { key, json } = request.configuration;
    let content = this.configurations.get(key);
    if (!content) {
      content = JSON.parse(json) as ConfigurationContent;
      this.configurations.set(key, content);
    }
    return content;
  }

  /** The image a configuration starts from: its own once captured, the post-prelude one until then. */
  private imageFor(key: string): VmImage {
    return this.configured.get(key) ?? this.image;
  }

  /** A run configured on the post-prelude image: the second use of its configuration captures its own image. */
  private noteConfigured(run: ActiveRun): void {
    const key = run.request.configuration.key;
    if (!this.configured.repeats(key)) return;
    // A configuration that grew the memory stays uncaptured: VMs of both images could not be reset to each other.
    if (run.vm.memoryBytes() !== this.image.byteLength) return;
    run.image = run.vm.capture();
    this.configured.set(key, run.image);
  }

  /** An idle VM reset to `image`, preferring one in that state already and the most recently used. */
  private takeIdle(image: VmImage): GuestVm | undefined {
    for (const [vm, steps] of this.recycling) {
      if (this.idle.length > 0) break;
      this.recycling.delete(vm);
      // Finish the reset where it is rather than copying the whole image again.
      let step = steps.next();
      while (!step.done) step = steps.next();
      this.idle.push(vm);
    }
    while (this.idle.length > 0) {
      let index = this.idle.length - 1;
      for (let i = index; i >= 0; i--) {
        if ((this.idle[i] as GuestVm).currentImage === image) {
          index = i;
          break;
        }
      }
      const vm = this.idle.splice(index, 1)[0] as GuestVm;
      if (vm.reset(image)) return vm;
      // Its memory grew past the image: a new instance replaces it (the VM count stays the same).
      vm.dispose();
      void this.addVm();
    }
    return undefined;
  }

  private async addVm(): Promise<void> {
    let vm: GuestVm;
    try {
      vm = await GuestVm.fromImage(this.options, this.image);
    } catch (error) {
      this.vmCount--;
      const queued = this.waiting.shift();
      if (queued) this.emitDone(queued.request.exec, failure("sandbox", `could not create a VM: ${messageOf(error)}`));
      return;
    }
    if (this.closed) {
      vm.dispose();
      return;
    }
    this.release(vm);
  }

  private release(vm: GuestVm): void {
    const queued = this.waiting.shift();
    if (queued) {
      const image = this.imageFor(queued.request.configuration.key);
      if (!vm.reset(image)) {
        vm.dispose();
        this.waiting.unshift(queued);
        void this.addVm();
        return;
      }
      this.begin(queued, vm, image);
      return;
    }
    this.idle.push(vm);
  }

  /**
   * Returns a VM after its execution ended. The reset runs after the result went out, so it stays off the latency
   * path: restoring the pages the execution wrote takes one step; a whole-image reset (a module without write
   * tracking) goes in steps that let messages through. A run that needs the VM before then finishes the reset at once.
   */
  private recycle(vm: GuestVm, image: VmImage): void {
    if (vm.peakZeroPagesWritten >= MANY_ZERO_PAGES && vm.quietResets >= RENEW_AFTER_QUIET_RESETS) {
      // A new instance replaces it (the VM count stays the same), off the request path.
      vm.dispose();
      void this.addVm();
      return;
    }
    const steps = vm.resetGradually(image, RESET_CHUNK_BYTES);
    this.recycling.set(vm, steps);
    const step = () => {
      // Taken by a run meanwhile (and reset at once), or recycled again with a newer reset.
      if (this.recycling.get(vm) !== steps) return;
      if (this.closed) {
        this.recycling.delete(vm);
        vm.dispose();
        return;
      }
      const next = steps.next();
      if (!next.done) {
        setImmediate(step);
        return;
      }
      this.recycling.delete(vm);
      if (next.value) {
        this.release(vm);
        return;
      }
      vm.dispose();
      void this.addVm();
    };
    setImmediate(step);
  }

  // ---- one execution ----

  private begin(queued: Queued, vm: GuestVm, image: VmImage): void {
    const { request, configured } = queued;
    const run: ActiveRun = {
      request,
      configured,
      vm,
      image,
      nextCallId: 0,
      pending: new Set(),
      outputChars: 0,
      outputItems: 0,
      fatal: undefined,
      result: undefined,
      stopReason: undefined,
      cpuMs: 0,
      enteredAt: 0,
      startedPerf: performance.now(),
      ended: false,
      clockNow: request.deterministic?.startedAt ?? 0,
      nextSeq: 1,
      early: new Map(),
      during: request.deterministic ? { seq: 0, issued: 0 } : null,
    };
    this.runs.set(request.exec, run);
    vm.dirty = true;
    vm.setMemoryLimit(request.memoryLimitBytes);
    vm.interrupt = () => this.shouldInterrupt(run);
    vm.hostCallback = (args) => this.onHostCall(run, args);
    vm.clock = request.deterministic
      ? { realtimeMs: () => run.clockNow, monotonicMs: () => run.clockNow - (request.deterministic?.startedAt ?? 0) }
      : { realtimeMs: () => Date.now(), monotonicMs: () => performance.now() - run.startedPerf };
    if (request.deterministic) {
      this.options.emit({ type: "started", exec: request.exec, fingerprint: this.fingerprint(request) });
      // Stopped from the host's onStarted hook (inline, the event is handled synchronously): the VM went back already.
      if (run.ended) return;
    }
    this.enter(run, () => {
      const qjs = vm.qjs;
      const entries = vm.entryPoints;
      if (image === this.image) {
        vm.callEntry("configure", request.configuration.json);
        this.noteConfigured(run);
      }
      const seed = request.deterministic ? seedWords(request.deterministic.seed) : randomWords();
      const store = Object.keys(request.store).length > 0 ? JSON.stringify(request.store) : undefined;
      vm.callEntry("prepare", seed[0], seed[1], seed[2], seed[3], store);
      let fn: JSValueHandle;
      try {
        // The wrapper shares line 1 with the script, so line numbers in stacks are exact (columns on line 1 are
        // corrected in the result, see wrapperColumns).
        fn = this.scripts.evaluate(qjs, `${wrapperHead(request)}${request.code}${wrapperTail(request)}`);
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
      qjs.callFunction(entries.start, qjs.undefined, fn, input).dispose();
      input.dispose();
      fn.dispose();
    });
  }

  private settle(exec: number, id: number, outcome: CallOutcome, seq: number | null, now: number | null): void {
    const run = this.runs.get(exec);
    if (!run || run.ended) return;
    if (run.request.deterministic) {
      if (seq === null || now === null) return;
      run.early.set(seq, { id, outcome, now });
      let next = run.early.get(run.nextSeq);
      while (next && !run.ended) {
        const applying = run.nextSeq;
        run.early.delete(applying);
        run.nextSeq++;
        run.clockNow = Math.max(run.clockNow, next.now);
        const { id: callId, outcome: callOutcome } = next;
        if (run.during) run.during = { seq: applying, issued: run.during.issued };
        this.enter(run, () => this.applyOutcome(run, callId, callOutcome));
        next = run.early.get(run.nextSeq);
      }
      return;
    }
    this.enter(run, () => this.applyOutcome(run, id, outcome));
  }

  private applyOutcome(run: ActiveRun, id: number, outcome: CallOutcome): void {
    if (!run.pending.delete(id)) return;
    if (outcome.ok) run.vm.callEntry("settle", id, true, outcome.value, undefined);
    else run.vm.callEntry("settle", id, false, outcome.message, outcome.properties);
  }

  private stop(exec: number, reason: StopReason): void {
    const waitingIndex = this.waiting.findIndex((q) => q.request.exec === exec);
    if (waitingIndex >= 0) {
      this.waiting.splice(waitingIndex, 1);
      this.emitDone(exec, failure(reason, stopMessage(reason)));
      return;
    }
    const run = this.runs.get(exec);
    if (!run || run.ended) return;
    run.stopReason = reason;
    this.end(run, this.stoppedResult(run));
  }

  /**
   * Runs guest code (`body`), drains its promise jobs, and decides what the run does next: end with its result,
   * end with the limit it broke, fail because it waits on nothing, or wait for call results.
   */
  private enter(run: ActiveRun, body: () => void): void {
    const vm = run.vm;
    const running = this.options.running;
    this.busy = true;
    if (running) Atomics.store(running, 0, run.request.slot + 1);
    run.enteredAt = performance.now();
    this.longTurnReported = false;
    let crash: RunResult | undefined;
    try {
      body();
      vm.drain(JOBS_PER_INTERRUPT_CHECK);
    } catch (error) {
      crash = this.classify(run, error);
    } finally {
      run.cpuMs += performance.now() - run.enteredAt;
      this.busy = false;
      if (running) Atomics.store(running, 0, 0);
      if (this.longTurnReported) {
        this.longTurnReported = false;
        this.options.onLongTurn?.(null);
      }
    }
    // A native built-in (a huge JSON.stringify or sort) computes without interrupt checks: a CPU limit it overran is
    // found here, and the run fails with it even if it finished in this turn.
    const cpuLimit = run.request.cpuLimitMs;
    if (!run.ended && cpuLimit !== null && run.cpuMs > cpuLimit && run.stopReason === undefined && !run.fatal) {
      run.stopReason = "cpu";
      run.result = undefined;
    }
    if (!run.ended) {
      if (run.stopReason !== undefined && run.result === undefined) this.end(run, this.stoppedResult(run));
      else if (run.fatal) this.end(run, { ok: false, error: run.fatal, cpuMs: run.cpuMs, during: run.during });
      else if (run.result) this.end(run, this.finishedResult(run));
      else if (crash) this.end(run, crash);
      else if (run.pending.size === 0) {
        this.end(
          run,
          failure(
            "script",
            "The script is waiting on a promise that can never settle: no tool call is pending, and timers do not exist here.",
            "Error",
            run,
          ),
        );
      } else if (run.during) {
        this.options.emit({ type: "idle", exec: run.request.exec, seq: run.during.seq, issued: run.during.issued });
      }
    }
    this.flushDeferred();
  }

  private flushDeferred(): void {
    while (!this.busy && this.deferred.length > 0) this.handle(this.deferred.shift() as HostCommand);
  }

  private classify(run: ActiveRun, error: unknown): RunResult | undefined {
    if (run.stopReason !== undefined || error instanceof Interrupted) return undefined;
    if (error instanceof JSException) {
      const uncatchable = run.vm.isUncatchable(error);
      const described: CodemodeError = {
        kind: "script",
        name: error.name,
        message: error.message,
        ...(error.stack ? { stack: cleanStack(`${error.name}: ${error.message}\n${error.stack}`) } : {}),
      };
      error.dispose();
      if (uncatchable && run.result) return undefined;
      return { ok: false, error: described, cpuMs: run.cpuMs, during: run.during };
    }
    // An error that is not a guest exception (the host's own stack overflowing through the wasm, a wasm trap) leaves
    // the VM's stack pointer and heap in an unknown state: the VM is replaced.
    run.vm.broken = true;
    if (error instanceof RangeError && /call stack/i.test(error.message)) {
      return failure("script", "Maximum call stack size exceeded", "RangeError", run);
    }
    return failure("sandbox", `the VM failed: ${messageOf(error)}`, undefined, run);
  }

  private shouldInterrupt(run: ActiveRun): boolean {
    if (run.stopReason !== undefined || run.result !== undefined || run.fatal !== undefined) return true;
    const flags = this.options.stopFlags;
    if (flags) {
      const code = Atomics.load(flags, run.request.slot);
      if (code !== StopCode.none) {
        run.stopReason = code === StopCode.timeout ? "timeout" : "aborted";
        return true;
      }
    }
    const deadline = run.request.deadline;
    // Whole milliseconds on both sides: at `>=`, a run begun late in one millisecond stopped up to 1 ms before its
    // time was up. Past it, it stops at most 1 ms after.
    if (deadline !== null && Date.now() > deadline) {
      run.stopReason = "timeout";
      return true;
    }
    const cpuLimit = run.request.cpuLimitMs;
    if (cpuLimit !== null && run.cpuMs + (performance.now() - run.enteredAt) > cpuLimit) {
      run.stopReason = "cpu";
      return true;
    }
    const onLongTurn = this.options.onLongTurn;
    if (onLongTurn && !this.longTurnReported && performance.now() - run.enteredAt > LONG_TURN_MS) {
      this.longTurnReported = true;
      onLongTurn(run.request.exec);
    }
    return false;
  }

  private onHostCall(run: ActiveRun, args: HostArgs): Primitive {
    const op = args.number(0);
    if (op === Op.call || op === Op.callSlot) {
      let target: "tool" | "global";
      let name: string;
      let json: string | undefined;
      if (op === Op.callSlot) {
        const slot = args.number(1);
        target = slot % 2 === 1 ? "global" : "tool";
        const entry = target === "tool" ? run.configured.tools[slot >> 1] : run.configured.globals[slot >> 1];
        if (!entry) return "the call names no configured tool";
        name = entry.name;
        json = args.string(2);
      } else {
        target = args.number(1) === 1 ? "global" : "tool";
        name = args.string(2) ?? "";
        json = args.string(3);
      }
      if (json !== undefined && json.length > MAX_VALUE_CHARS) {
        return `the argument of ${name}() is more than ${MAX_VALUE_CHARS} characters of JSON`;
      }
      const id = ++run.nextCallId;
      run.pending.add(id);
      if (run.during) run.during = { seq: run.during.seq, issued: run.nextCallId };
      this.options.emit({ type: "call", exec: run.request.exec, id, target, name, args: json });
      return id;
    }
    if (op === Op.output) {
      const kind = args.number(1);
      const data = args.string(2) ?? "";
      run.outputChars += data.length;
      run.outputItems += 1;
      if (run.outputChars > MAX_OUTPUT_CHARS || run.outputItems > MAX_OUTPUT_ITEMS) {
        const message =
          run.outputItems > MAX_OUTPUT_ITEMS
            ? `output exceeded ${MAX_OUTPUT_ITEMS} items`
            : `output exceeded ${MAX_OUTPUT_CHARS} characters`;
        run.fatal ??= { kind: "script", name: "RangeError", message, stack: `RangeError: ${message}` };
        return message;
      }
      const item =
        kind === 2
          ? { type: "image" as const, data, mimeType: args.string(3) ?? "" }
          : kind === 1
            ? { type: "text" as const, text: data, console: true as const }
            : { type: "text" as const, text: data };
      this.options.emit({ type: "output", exec: run.request.exec, item });
      return undefined;
    }
    if (op === Op.done) {
      if (run.result) return undefined;
      run.result = { ok: args.boolean(1), payload: args.string(2), writes: args.string(3) };
      return undefined;
    }
    return undefined;
  }

  private finishedResult(run: ActiveRun): RunResult {
    const result = run.result as NonNullable<ActiveRun["result"]>;
    if (result.ok) {
      return { ok: true, value: result.payload, writes: result.writes, cpuMs: run.cpuMs, during: run.during };
    }
    let error: CodemodeError;
    try {
      const parsed = JSON.parse(result.payload ?? "{}") as { name?: unknown; message?: unknown; stack?: unknown };
      error = { kind: "script", message: typeof parsed.message === "string" ? parsed.message : "" };
      if (typeof parsed.name === "string") error.name = parsed.name;
      if (typeof parsed.stack === "string") error.stack = wrapperColumns(parsed.stack, run.request);
    } catch {
      error = { kind: "sandbox", message: "the VM reported an unreadable error" };
    }
    return { ok: false, error, cpuMs: run.cpuMs, during: run.during };
  }

  private stoppedResult(run: ActiveRun): RunResult {
    const reason = run.stopReason ?? "aborted";
    if (reason === "cpu") {
      return failure(
        "timeout",
        `The script computed for more than its CPU limit of ${run.request.cpuLimitMs} ms`,
        CPU_LIMIT_ERROR,
        run,
      );
    }
    return failure(reason, stopMessage(reason), undefined, run);
  }

  private end(run: ActiveRun, result: RunResult): void {
    if (run.ended) return;
    run.ended = true;
    this.runs.delete(run.request.exec);
    const vm = run.vm;
    vm.interrupt = () => true;
    vm.hostCallback = () => undefined;
    this.emitDone(run.request.exec, result);
    if (this.busy) {
      // Still inside the VM (a stop arrived from an event handler): recycle once the stack has unwound.
      queueMicrotask(() => this.recycle(vm, run.image));
      return;
    }
    this.recycle(vm, run.image);
  }

  private emitDone(exec: number, result: RunResult): void {
    // Errors read from the VM's exceptions (not cut by the prelude) are cut before they leave, as events can be framed.
    if (!result.ok) result = { ...result, error: clipError(result.error) };
    this.options.emit({ type: "done", exec, result });
  }

  private fingerprint(request: RunRequest): string {
    return JSON.stringify({
      engine: `quickjs-wasi@${this.image.versions["quickjs-wasi"]}`,
      quickjs: this.image.versions.quickjs,
      prelude: this.image.preludeHash,
      memoryLimitBytes: request.memoryLimitBytes,
      maxStackSize: this.options.maxStackSize,
    });
  }
}

function failure(kind: CodemodeError["kind"], message: string, name?: string, run?: ActiveRun): RunResult {
  const error: CodemodeError = { kind, message };
  if (name) {
    error.name = name;
    error.stack = `${name}: ${message}`;
  }
  return { ok: false, error, cpuMs: run?.cpuMs ?? 0, during: run?.during ?? null };
}

function stopMessage(reason: StopReason): string {
  return reason === "aborted" ? "The execution was aborted" : DEADLINE_MESSAGE;
}

/** A program is called with its input and tools; no name of the wrapper's is in scope of its source. */
function wrapperHead(request: RunRequest): string {
  return request.program ? "(async function () { return await (" : "(async function () {";
}

function wrapperTail(request: RunRequest): string {
  return request.program ? "\n)(arguments[0], arguments[1]); })" : "\n})";
}

/** `stack` with the columns of line 1 counted from the script's first character rather than the wrapper's. */
function wrapperColumns(stack: string, request: RunRequest): string {
  const head = wrapperHead(request).length;
  return stack.replace(new RegExp(`${SCRIPT_FILENAME.replace(".", "\\.")}:1:(\\d+)`, "g"), (whole, column: string) =>
    Number(column) > head ? `${SCRIPT_FILENAME}:1:${Number(column) - head}` : whole,
  );
}

function describeCompileError(
  error: JSException,
  request: RunRequest,
): { name: string; message: string; stack: string } {
  const lines = request.code.split("\n");
  const at = new RegExp(`${SCRIPT_FILENAME.replace(".", "\\.")}:(\\d+)`).exec(error.stack ?? "");
  // Past the script's last line, the parser met the wrapper's closing: the script itself ended too early.
  if (at && Number(at[1]) > lines.length) {
    const message = "the script ends before a bracket, brace, parenthesis, string or comment is closed";
    const end = `${SCRIPT_FILENAME}:${lines.length}:${(lines.at(-1) ?? "").length + 1}`;
    return { name: error.name, message, stack: `${error.name}: ${message}\n    at ${end}` };
  }
  return {
    name: error.name,
    message: error.message,
    stack: cleanStack(`${error.name}: ${error.message}\n${error.stack ?? ""}`),
  };
}

function cleanStack(stack: string): string {
  return stack
    .split("\n")
    .filter((line, index) => line !== "" && (index === 0 || !line.includes("airlock:prelude")))
    .join("\n");
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

const randomPool = new Uint32Array(4096);
let randomIndex = randomPool.length;

/** Four random words to seed a VM's Math.random, from a pool refilled by the OS generator every 1,024 executions. */
function randomWords(): number[] {
  if (randomIndex + 4 > randomPool.length) {
    randomFillSync(randomPool);
    randomIndex = 0;
  }
  const i = randomIndex;
  randomIndex += 4;
  return [
    randomPool[i] as number,
    randomPool[i + 1] as number,
    randomPool[i + 2] as number,
    randomPool[i + 3] as number,
  ];
}

/** Four PRNG state words from a 32-bit seed (splitmix32), so that nearby seeds give unrelated sequences. */
function seedWords(seed: number): number[] {
  let state = seed >>> 0;
  const words: number[] = [];
  for (let i = 0; i < 4; i++) {
    state = (state + 0x9e3779b9) >>> 0;
    let z = state;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
    words.push((z ^ (z >>> 16)) >>> 0);
  }
  return words;
}
