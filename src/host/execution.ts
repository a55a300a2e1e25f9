/**
 * The host side of one execution, whatever launcher runs its VM: the tool table, call records, output, store writes,
 * the deadline and the abort. The host is the authority on how an execution ends: a deadline or an abort ends it
 * here at once, and the VM is told to stop.
 */
import { clipError, MAX_CLOCK_MS, MAX_OUTPUT_CHARS, MAX_OUTPUT_ITEMS, MAX_VALUE_CHARS } from "../engine/limits.ts";
import {
  type CallOutcome,
  DEADLINE_MESSAGE,
  type RunEndReason,
  type RunResult,
  type VmEvent,
  type VmSnapshot,
} from "../engine/protocol.ts";
import { AirlockError, isErrorCode } from "../tools/errors.ts";
import type {
  CodemodeCall,
  CodemodeError,
  CodemodeHostCall,
  CodemodeOutcome,
  CodemodeOutputItem,
  CodemodeProgressEvent,
  CodemodeResult,
  CodemodeStoreWrites,
  CodemodeTool,
} from "../types.ts";
import type { LaunchedRun, Launcher, LaunchRequest } from "./launcher.ts";

/** The longest delay a Node timer takes: 2^31 - 1 ms, about 24.8 days. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** How a call is answered: by running the host's tool (execute) or by the caller of a deterministic run. */
export type CallHandler =
  | {
      kind: "tools";
      resolve: (target: "tool" | "global", name: string) => CodemodeTool | undefined;
      /** Given to every call as `context.caller` (see `CodemodeExecuteOptions.caller`). */
      caller?: unknown;
    }
  | {
      kind: "deterministic";
      /**
       * What the run declared: a call of anything else means the VM side broke the protocol. A program run offers
       * every tool name (its caller answers names outside the program's tool list itself).
       */
      declared: { tools: Pick<ReadonlySet<string>, "has">; globals: Pick<ReadonlySet<string>, "has"> };
      /** `restored`: the run continues its request's snapshot; its open calls then come again, through `onCall`. */
      onStarted?: (fingerprint: string, restored: boolean) => void;
      onCall: (call: CodemodeHostCall) => void;
      onIdle?: (seq: number, issued: number) => void;
    };

export interface ExecutionOptions {
  request: LaunchRequest;
  handler: CallHandler;
  signal: AbortSignal | undefined;
  timeoutMs: number;
  /**
   * Called before the run starts, to let the sandbox stop it from then on: inline, its first turn (which may call
   * tools, and they `close()`) runs inside the constructor.
   */
  onStart?: (execution: Execution) => void;
  /** Called once when the execution ended, to let the sandbox forget it. */
  onEnd: (execution: Execution) => void;
  /**
   * Hears each output item and each tool call's start and end as they come, in order, from promise jobs like a
   * deterministic run's hooks (see callHook); a listener that throws is ignored (it only watches).
   */
  onProgress?: ((event: CodemodeProgressEvent) => void) | undefined;
}

interface OpenCall {
  record: CodemodeCall;
  startedAt: number;
  controller: AbortController | undefined;
  name: string;
  /** Characters of its arguments (see `held`). */
  size: number;
  /** A tool's call (recorded in `calls`, and heard of by onProgress), not a global's. */
  tool: boolean;
}

export class Execution {
  readonly result: Promise<CodemodeResult>;
  private resolve!: (result: CodemodeResult) => void;
  private readonly output: CodemodeOutputItem[] = [];
  private outputChars = 0;
  private readonly calls: CodemodeCall[] = [];
  private readonly open = new Map<number, OpenCall>();
  /** Result numbers delivered: every one up to `seqFloor` (a restored run applied them before), and these. */
  private readonly usedSeqs = new Set<number>();
  private seqFloor = 0;
  /** Snapshots asked for (see capture), answered in order. */
  private readonly captures: ((snapshot: VmSnapshot | null) => void)[] = [];
  /** The run continues its request's snapshot (see RunRequest.restore). */
  restored = false;
  /** Calls the VM made so far. */
  private callCount = 0;
  /**
   * Characters of open calls' arguments and of output: the VM side keeps them within the memory limit; a VM side
   * that does not is broken (the host checks again, as it does the output limits).
   */
  private held = 0;
  /** How the run ended, as the engine (or the host, for its own stops) says: see RunEndReason. */
  reason: RunEndReason | undefined;
  private highestSeq = 0;
  /** The VM numbers a run's calls 1, 2, ...: an id that is not new would run a tool twice for one call. */
  private lastCallId = 0;
  private run!: LaunchedRun;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private readonly onAbort = () => this.stop("aborted", abortMessage(this.options.signal, "The execution was aborted"));
  finished = false;

  constructor(
    launcher: Launcher,
    private readonly options: ExecutionOptions,
  ) {
    this.result = new Promise((resolve) => {
      this.resolve = resolve;
    });
    const { signal, timeoutMs } = options;
    if (signal?.aborted) {
      const message = abortMessage(signal, "The execution was aborted before it started");
      this.finish({ ok: false, error: { kind: "aborted", message } });
      return;
    }
    // Result numbers the request answers ahead (see RunRequest.answers) are taken: deliver() refuses them.
    for (const answer of options.request.answers ?? []) {
      this.usedSeqs.add(answer.seq);
      this.highestSeq = Math.max(this.highestSeq, answer.seq);
    }
    options.onStart?.(this);
    const caller = options.handler.kind === "tools" ? options.handler.caller : undefined;
    this.run = launcher.launch(options.request, (event) => this.onEvent(event), caller);
    if (this.finished) {
      // Ended while the run started (inline, its first turn runs inside launch(): a hook failed, or a tool closed the
      // sandbox), when it could not be stopped yet.
      this.run.stop("aborted");
      return;
    }
    signal?.addEventListener("abort", this.onAbort, { once: true });
    if (Number.isFinite(timeoutMs)) this.armDeadline(performance.now() + timeoutMs, timeoutMs);
  }

  /**
   * A Node timer counts from the event loop's cached clock, which can be milliseconds older than the call (the loop
   * turn was busy), so it may fire early: it is re-armed until the deadline has really passed. It also takes at most
   * MAX_TIMER_MS (a longer delay fires after 1 ms, with a warning): a longer deadline takes several steps.
   */
  private armDeadline(deadline: number, delay: number): void {
    this.timer = setTimeout(
      () => {
        const left = deadline - performance.now();
        if (left > 0) this.armDeadline(deadline, left);
        else this.stop("timeout", this.timeoutMessage());
      },
      Math.min(delay, MAX_TIMER_MS),
    );
  }

  private timeoutMessage(): string {
    return `The execution timed out after ${this.options.timeoutMs} ms`;
  }

  /** Ends the execution with `kind` and tells the VM to stop. */
  stop(kind: "timeout" | "aborted", message: string): void {
    if (this.finished) return;
    this.reason = kind === "timeout" ? "deadline" : "stopped";
    this.finish({ ok: false, error: { kind, message } });
    this.run?.stop(kind);
  }

  /** Ends the execution with a `sandbox` error and tells the VM to stop. */
  private fail(message: string): void {
    if (this.finished) return;
    this.reason = "vm_failed";
    this.finish({ ok: false, error: { kind: "sandbox", message } });
    this.run?.stop("aborted");
  }

  /** Hooks of a deterministic run waiting for their turn (see callHook), and its end if it came after them. */
  private readonly hooks: (() => void)[] = [];

  /**
   * Runs a hook (a deterministic run's, or onProgress) from a promise job, in order: once start() has returned the run
   * the hooks may deliver to (inline, the first turn runs inside launch()), once every event that came with this one
   * is known (a result for any call the VM issued in that turn can be delivered), and never inside deliver() (inline,
   * a delivery runs the VM at once), so that hooks behave alike on every launcher and the stack does not grow with
   * each call.
   * A hook that throws ends this run with an error naming it, never the host.
   */
  private callHook(hook: "onStarted" | "onCall" | "onIdle" | "onProgress", call: () => void): void {
    this.hooks.push(() => {
      try {
        call();
      } catch (error) {
        this.fail(`the ${hook} hook threw: ${errorMessage(error)}`);
      }
    });
    if (this.hooks.length > 1) return;
    queueMicrotask(() => {
      try {
        // Hooks queued by these hooks' deliveries join this loop instead of nesting.
        for (let i = 0; i < this.hooks.length; i++) (this.hooks[i] as () => void)();
      } finally {
        this.hooks.length = 0;
      }
    });
  }

  /** Deterministic runs: answers call `id` as result `seq`. */
  deliver(seq: number, now: number, id: number, outcome: CodemodeOutcome): void {
    if (this.finished) throw new Error("deliver(): the run has finished");
    if (!Number.isSafeInteger(seq) || seq < 1)
      throw new RangeError(`deliver(): seq must be a positive integer, got ${seq}`);
    if (seq <= this.seqFloor || this.usedSeqs.has(seq)) {
      throw new Error(`deliver(): result number ${seq} was already delivered`);
    }
    if (typeof now !== "number" || !(now >= 0 && now <= MAX_CLOCK_MS)) {
      throw new RangeError(
        `deliver(): now must be a finite number of ms since the epoch from 0 to ${MAX_CLOCK_MS} (1970 to 2554), got ${typeof now === "number" ? now : typeof now}`,
      );
    }
    const call = this.open.get(id);
    if (!call) throw new Error(`deliver(): call ${id} is not waiting for an answer`);
    // The VM applies results in number order, and no call starts while it waits for the next one: every number below
    // the highest delivered that is still missing needs a call that is still open to carry it, or the run waits forever.
    const highest = Math.max(seq, this.highestSeq);
    const missing = highest - this.seqFloor - this.usedSeqs.size - 1;
    if (missing > this.open.size - 1) {
      throw new RangeError(
        `deliver(): result number ${seq} would leave ${missing} lower number(s) with no open call to carry them; deliver result ${this.lowestMissing()} first`,
      );
    }
    const encoded = encodeOutcome(outcome);
    this.usedSeqs.add(seq);
    this.highestSeq = highest;
    this.closeCall(id, outcome.ok ? "ok" : "error");
    this.run.settle(id, encoded, seq, now);
  }

  private lowestMissing(): number {
    let seq = this.seqFloor + 1;
    while (this.usedSeqs.has(seq)) seq++;
    return seq;
  }

  private onEvent(event: VmEvent): void {
    if (this.finished) return;
    switch (event.type) {
      case "call":
        this.onCall(event.id, event.target, event.name, event.args);
        break;
      case "output":
        this.onOutput(event.item);
        break;
      case "started": {
        const handler = this.options.handler;
        if (handler.kind !== "deterministic") break;
        this.callHook("onStarted", () => handler.onStarted?.(event.fingerprint, event.restored));
        if (event.restored) this.onRestored(handler);
        break;
      }
      case "snapshot":
        this.captures.shift()?.(event.snapshot);
        break;
      case "idle": {
        const handler = this.options.handler;
        if (handler.kind === "deterministic") this.callHook("onIdle", () => handler.onIdle?.(event.seq, event.issued));
        break;
      }
      case "done": {
        const result = this.toResult(event.result);
        this.reason ??= result.ok ? "returned" : event.result.reason;
        // After the hooks of the run's last events: a hook that throws still ends it with its error.
        if (this.hooks.length > 0) this.hooks.push(() => this.finish(result));
        else this.finish(result);
        break;
      }
    }
  }

  /**
   * Asks the VM side to capture the run where it is (a deterministic program run between two of its turns): resolves
   * to its snapshot, or to null when it took none (too large, another VM side) or the run ended first.
   */
  capture(): Promise<VmSnapshot | null> {
    if (this.finished) return Promise.resolve(null);
    return new Promise((resolve) => {
      this.captures.push(resolve);
      this.run.capture();
    });
  }

  /**
   * The VM continues its request's snapshot: the run's state is the snapshot's (the calls it made, those it waits on,
   * the results it applied), not what the request's answers would have made it, and its open calls are heard of
   * again, in order, as if just made: they are the caller's to answer.
   */
  private onRestored(handler: Extract<CallHandler, { kind: "deterministic" }>): void {
    const state = (this.options.request.restore as VmSnapshot).run;
    this.restored = true;
    this.usedSeqs.clear();
    this.seqFloor = state.nextSeq - 1;
    this.highestSeq = this.seqFloor;
    this.lastCallId = state.calls;
    this.callCount = state.calls;
    for (const { id, target, name, args } of state.open) {
      const parsed = this.parseArgs(args, "the snapshot holds call arguments that are not JSON");
      if (parsed === undefined) return;
      this.held += args?.length ?? 0;
      this.openCall(id, target, name, args?.length ?? 0);
      this.callHook("onCall", () => handler.onCall({ id, target, name, args: parsed.value }));
    }
  }

  /** A call's arguments, parsed from their JSON text; undefined (the run failed with `failure`) when they are not JSON. */
  private parseArgs(json: string | undefined, failure: string): { value: unknown } | undefined {
    try {
      return { value: json === undefined ? undefined : JSON.parse(json) };
    } catch {
      this.fail(failure);
      return undefined;
    }
  }

  /** Records call `id` as open (a tool's call among the run's calls), holding `size` characters of arguments. */
  private openCall(id: number, target: "tool" | "global", name: string, size: number): OpenCall {
    const record: CodemodeCall = { name, status: "cancelled", durationMs: 0 };
    if (target === "tool") this.calls.push(record);
    const open: OpenCall = {
      record,
      startedAt: performance.now(),
      controller: undefined,
      name,
      size,
      tool: target === "tool",
    };
    this.open.set(id, open);
    return open;
  }

  private onOutput(item: CodemodeOutputItem): void {
    const chars = item.type === "text" ? item.text.length : item.data.length;
    this.outputChars += chars;
    this.held += chars;
    if (
      this.outputChars > MAX_OUTPUT_CHARS ||
      this.output.length >= MAX_OUTPUT_ITEMS ||
      this.held > this.options.request.memoryLimitBytes
    ) {
      // The VM side enforces these limits; a VM side that does not is broken.
      this.fail("the VM sent more output than the limits allow");
      return;
    }
    this.output.push(item);
    this.progress({ type: "output", item });
  }

  /** Tells the progress listener, if any, in order with the hooks; what it throws is its own. */
  private progress(event: CodemodeProgressEvent): void {
    const listener = this.options.onProgress;
    if (!listener) return;
    this.callHook("onProgress", () => {
      try {
        listener(event);
      } catch {
        // A listener only watches: its failure does not touch the run.
      }
    });
  }

  private onCall(id: number, target: "tool" | "global", name: string, argsJson: string | undefined): void {
    if (id <= this.lastCallId) {
      this.fail(
        `the VM sent call id ${id} after call id ${this.lastCallId}: a call id is used once, in increasing order`,
      );
      return;
    }
    this.lastCallId = id;
    const handler = this.options.handler;
    const parsed = this.parseArgs(argsJson, "the VM sent call arguments that are not JSON");
    if (parsed === undefined) return;
    const args = parsed.value;
    const size = argsJson?.length ?? 0;
    this.held += size;
    if (++this.callCount > this.options.request.maxCalls || this.held > this.options.request.memoryLimitBytes) {
      // The VM side keeps both limits; one that does not is broken.
      this.fail("the VM made more calls, or held more in their arguments, than its limits allow");
      return;
    }
    // The VM side only calls what the run offers; anything else (a forged call by name, say) fails the run closed,
    // before a record or a hook sees it.
    const tool = handler.kind === "tools" ? handler.resolve(target, name) : undefined;
    const offered =
      handler.kind === "deterministic"
        ? (target === "tool" ? handler.declared.tools : handler.declared.globals).has(name)
        : tool !== undefined;
    if (!offered) {
      this.fail(`the VM called a ${target} that the run does not offer`);
      return;
    }
    const open = this.openCall(id, target, name, size);
    if (target === "tool") this.progress({ type: "call", name });
    if (handler.kind === "deterministic") {
      // The VM applies an answer of the request itself: the call is answered; the hook still checks it.
      const answer = this.restored ? undefined : this.options.request.answers?.[id - 1];
      if (answer !== undefined) this.closeCall(id, answer.outcome.ok ? "ok" : "error");
      this.callHook("onCall", () => handler.onCall({ id, target, name, args }));
      return;
    }
    // The tool starts at once; its answer always reaches the VM later, from a promise job, never inside the guest's
    // call stack (launchers also defer commands that arrive while their VM runs).
    // Most tools never look at their signal: it is made when first read (already aborted if the call has ended).
    const openCalls = this.open;
    const caller = handler.caller;
    const context = {
      ...(caller === undefined ? {} : { caller }),
      get signal(): AbortSignal {
        if (!open.controller) {
          open.controller = new AbortController();
          if (!openCalls.has(id) && open.record.status === "cancelled") {
            open.controller.abort(new Error("the execution ended"));
          }
        }
        return open.controller.signal;
      },
    };
    let pending: unknown;
    try {
      pending = (tool as CodemodeTool).execute(args, context);
    } catch (error) {
      pending = Promise.reject(error);
    }
    Promise.resolve(pending).then(
      (value) => this.answer(id, { ok: true, value }),
      (error: unknown) =>
        this.answer(id, {
          ok: false,
          message: errorMessage(error, `${name} failed with an error whose message cannot be read`),
          ...publicCode(error),
        }),
    );
  }

  private answer(id: number, outcome: CodemodeOutcome): void {
    if (this.finished || !this.open.has(id)) return;
    let encoded: CallOutcome;
    try {
      encoded = encodeOutcome(outcome);
    } catch (error) {
      encoded = { ok: false, message: errorMessage(error), properties: undefined };
    }
    this.closeCall(id, encoded.ok ? "ok" : "error");
    this.run.settle(id, encoded, null, null);
  }

  private closeCall(id: number, status: CodemodeCall["status"]): void {
    const call = this.open.get(id);
    if (!call) return;
    this.open.delete(id);
    this.held -= call.size;
    call.record.status = status;
    if (status !== "cancelled" && call.tool) {
      this.progress({ type: "result", name: call.name, ok: status === "ok" });
    }
    call.record.durationMs = performance.now() - call.startedAt;
    if (status === "cancelled") call.controller?.abort(new Error("the execution ended"));
  }

  private toResult(result: RunResult): CodemodeResult {
    // `during` tells where a deterministic run was when the script itself ended (returned, threw, or exited).
    const endedByScript = result.ok || result.error.kind === "script";
    const during = result.during && endedByScript ? { during: result.during } : {};
    if (!result.ok) {
      const error = clipError(result.error);
      // The VM noticed the deadline before the host's timer did; the message is the host's either way.
      if (error.kind === "timeout" && error.message === DEADLINE_MESSAGE) error.message = this.timeoutMessage();
      return { ok: false, error, output: this.output, calls: this.calls, ...during };
    }
    try {
      const value = result.value === undefined ? undefined : JSON.parse(result.value);
      const storeWrites = parseWrites(result.writes);
      return { ok: true, value, output: this.output, calls: this.calls, storeWrites, ...during };
    } catch (error) {
      const message = error instanceof StoreWriteError ? error.message : "the VM sent a result that is not JSON";
      return { ok: false, error: { kind: "sandbox", message }, output: this.output, calls: this.calls };
    }
  }

  private finish(partial: { ok: false; error: CodemodeError } | CodemodeResult): void {
    if (this.finished) return;
    this.finished = true;
    if (this.timer) clearTimeout(this.timer);
    this.options.signal?.removeEventListener("abort", this.onAbort);
    // Calls still open when the script ended (not awaited, or the run was stopped) are cancelled through their signal.
    for (const id of [...this.open.keys()]) this.closeCall(id, "cancelled");
    for (const resolve of this.captures.splice(0)) resolve(null);
    const result: CodemodeResult =
      "output" in partial
        ? partial
        : { ok: false, error: clipError(partial.error), output: this.output, calls: this.calls };
    this.options.onEnd(this);
    this.resolve(result);
  }
}

/**
 * An Airlock error's public code, kept in the rejection the script sees so that it can tell a blocked call from a
 * failed one. Nothing else of an error crosses; a value that cannot be inspected (a revoked proxy) has none.
 */
function publicCode(error: unknown): { properties?: { code: string } } {
  try {
    return error instanceof AirlockError && isErrorCode(error.code) ? { properties: { code: error.code } } : {};
  } catch {
    return {};
  }
}

export function encodeOutcome(outcome: CodemodeOutcome): CallOutcome {
  if (outcome === null || typeof outcome !== "object" || typeof outcome.ok !== "boolean") {
    throw new TypeError("a call outcome must be { ok: true, value } or { ok: false, message }");
  }
  if (outcome.ok) {
    let value: string | undefined;
    try {
      value = outcome.value === undefined ? undefined : JSON.stringify(outcome.value);
    } catch (error) {
      throw new TypeError(`the tool returned a value that is not JSON-serializable: ${errorMessage(error)}`);
    }
    if (value !== undefined && value.length > MAX_VALUE_CHARS) {
      throw new RangeError(`the tool's result is more than ${MAX_VALUE_CHARS} characters of JSON`);
    }
    return { ok: true, value };
  }
  const message = typeof outcome.message === "string" ? outcome.message : errorMessage(outcome.message);
  // Refused like a result over the limit (the call still fails, saying why), so no tier has to carry it.
  if (message.length > MAX_VALUE_CHARS) {
    throw new RangeError(`the tool's error message is more than ${MAX_VALUE_CHARS} characters`);
  }
  let properties: string | undefined;
  if (outcome.properties !== undefined) {
    try {
      properties = JSON.stringify(outcome.properties);
    } catch {
      properties = undefined;
    }
    if (properties !== undefined && properties.length > MAX_VALUE_CHARS) properties = undefined;
  }
  return { ok: false, message, properties };
}

/**
 * The message of an abort signal's reason when the host gave an Error (as pi-codemode reports it), else `fallback`;
 * also for the AbortError that `abort()` without a reason makes, whose message says no more than the fallback.
 */
function abortMessage(signal: AbortSignal | undefined, fallback: string): string {
  const reason: unknown = signal?.reason;
  if (!(reason instanceof Error) || (reason instanceof DOMException && reason.name === "AbortError")) return fallback;
  try {
    return typeof reason.message === "string" && reason.message !== "" ? reason.message : fallback;
  } catch {
    return fallback;
  }
}

/**
 * The message of a thrown value, as a string. Reading it runs the thrower's code (a `message` getter, a `toString`, a
 * revoked Proxy's traps), so it may throw itself: then the message says that it could not be read.
 */
function errorMessage(error: unknown, unreadable = "an error whose message cannot be read"): string {
  try {
    const message = error instanceof Error ? error.message : error;
    return typeof message === "string" ? message : String(message);
  } catch {
    return unreadable;
  }
}

/** Store writes the script environment never sends: the run fails with a `sandbox` error. */
class StoreWriteError extends Error {}

/**
 * Store writes come as `{ set: { key: json }, delete: [keys] }`. Hosts apply them as docs/sandbox.md (Store) does, with
 * `Object.assign(saved, storeWrites.set)`, which would set the prototype of `saved` for a key `__proto__`: the script
 * environment refuses that key, and a VM side that sends it anyway broke the protocol. Other keys such as
 * `constructor` stay plain data.
 */
function parseWrites(json: string | undefined): CodemodeStoreWrites {
  const writes: CodemodeStoreWrites = { set: {}, delete: [] };
  if (json === undefined) return writes;
  const parsed = JSON.parse(json) as { set: Record<string, string>; delete: string[] };
  for (const key of Object.keys(parsed.set)) {
    if (key === "__proto__")
      throw new StoreWriteError("the VM sent a store write for __proto__, which scripts cannot make");
    Object.defineProperty(writes.set, key, {
      value: JSON.parse(parsed.set[key] as string),
      enumerable: true,
      writable: true,
      configurable: true,
    });
  }
  for (const key of parsed.delete) if (typeof key === "string") writes.delete.push(key);
  return writes;
}
