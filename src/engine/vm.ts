/**
 * One QuickJS instance and its post-prelude memory image.
 *
 * A VM is booted once (create, prelude, capture the image) and then reused: after every execution it is reset to the
 * image (image.ts: the memory, restored by the blocks the execution wrote or whole, and the globals), which puts it
 * in exactly its post-prelude state in well under a millisecond. This reaches into quickjs-wasi internals (the
 * instance's exports and the host-side wrapper), so the version is pinned and a soak test compares reset VMs against
 * fresh ones. Of the list of what makes the reset sound (image.ts), items 4 and 5 are this file's: a fresh wrapper
 * per execution (bindWrapper) and `generation`.
 */
import { Intrinsics, JSException, JSValueHandle, QuickJS } from "quickjs-wasi";
import { fillRandom, sha256Hex } from "../platform/platform.ts";
import { type ImageExports, InstanceMemory, type MemoryImage, type MemoryPages } from "./image.ts";
import { BUDGET_POLL_JOBS, BUDGET_SHARES, IMAGE_HEAP_HEADROOM_BYTES } from "./limits.ts";
import { HOST_FUNCTION, PRELUDE_FILENAME, PRELUDE_SOURCE } from "./prelude.ts";
import { GuestValues, type HostArgs, type Primitive, type ValueExports } from "./values.ts";
import { OUT_OF_MEMORY_EXPORT } from "./wasm/catchable-oom.ts";
import { INTERRUPT_POLL_TICKS, QUICKJS_POLL_TICKS } from "./wasm/interrupt-poll.ts";
import { LOOP_TICK_EXPORT } from "./wasm/loop-ticks.ts";
import { MARK_EXPORT } from "./wasm/write-tracking.ts";

/** The exports of the quickjs-wasi module that the reset, the job loop and the value boundary use directly. */
interface Exports extends ValueExports, ImageExports {
  _initialize(): void;
  qjs_init2(intrinsics: number): number;
  qjs_is_job_pending(): number;
  qjs_execute_pending_job(): number;
  qjs_set_memory_limit(limit: number): void;
  qjs_is_uncatchable_error(ptr: number): number;
  qjs_run_gc(): void;
  /** Present in modules instrumented by engine/wasm/write-tracking.ts. */
  [MARK_EXPORT]?: (address: number, length: number) => void;
  /** Present in modules rewritten by engine/wasm/catchable-oom.ts: the engine's out-of-memory errors so far. */
  [OUT_OF_MEMORY_EXPORT]?: WebAssembly.Global;
  /** Present in modules rewritten by engine/wasm/loop-ticks.ts: 1 while a loop's tick calls the host. */
  [LOOP_TICK_EXPORT]?: WebAssembly.Global;
}

/** quickjs-wasi's private members this module relies on (pinned version). */
interface WrapperInternals {
  exports: Exports;
  handleHostCall(namePtr: number, nameLen: number, thisPtr: number, argc: number, argvPtr: number): number;
  throwHostException(error: unknown): number;
  setInstance(instance: WebAssembly.Instance): void;
  throwPendingException(): never;
}
interface QuickJSStatics {
  instantiate(
    module: WebAssembly.Module,
    vm: unknown,
    wasi: (memory: WebAssembly.Memory) => Record<string, unknown>,
  ): Promise<{ instance: WebAssembly.Instance }>;
  applyLimits(vm: QuickJS, options: object): void;
}
const Statics = QuickJS as unknown as QuickJSStatics;
const WrapperCtor = QuickJS as unknown as new (module: WebAssembly.Module) => QuickJS;

/** Where the VM's clocks read from; the engine swaps it per execution (wall clock or a deterministic one). */
export interface VmClock {
  /** Milliseconds since the epoch, for `Date.now()`. */
  realtimeMs(): number;
  /** Milliseconds since the execution started, for `performance.now()`. */
  monotonicMs(): number;
}

const frozenClock: VmClock = { realtimeMs: () => 0, monotonicMs: () => 0 };

/** A VM's post-prelude state: its instance's memory image (image.ts) and the prelude's entry points in it. */
export interface VmImage extends MemoryImage {
  /** Tokens (quickjs-wasi exportHandle) of the prelude's entry points, valid in every VM made from this image. */
  entries: Record<EntryName, number>;
  /** SHA-256 of the prelude source, part of a deterministic run's fingerprint. */
  preludeHash: string;
  versions: Record<string, string>;
}

/** The prelude's entry points (see PRELUDE_SOURCE). */
const ENTRY_NAMES = ["configure", "prepare", "start", "settle"] as const;
export type EntryName = (typeof ENTRY_NAMES)[number];
export type EntryPoints = Record<EntryName, JSValueHandle>;

/** The single host function: reads its arguments and returns a primitive for the guest. */
export type HostCallback = (args: HostArgs) => Primitive;

const WASI_ERRNO_BADF = 8;
const WASI_FILETYPE_CHARACTER_DEVICE = 2;

/** UTF-8 length of HOST_FUNCTION, which names every call of it. */
const HOST_FUNCTION_BYTES = new TextEncoder().encode(HOST_FUNCTION).length;

export interface VmOptions {
  module: WebAssembly.Module;
  /** QuickJS's stack guard in bytes; must be safe for the thread the VM runs on. */
  maxStackSize: number;
}

export class GuestVm {
  /**
   * Bumped by every reset; async work captured under an older generation must not touch the VM (item 5 of the
   * reset's soundness list, image.ts).
   */
  generation = 0;
  clock: VmClock = frozenClock;
  /**
   * Polled by QuickJS while the guest runs, and between batches of promise jobs; `shares` is what the poll is charged
   * of the interrupt budget (see BUDGET_SHARES).
   */
  interrupt: (shares: number) => boolean = () => false;
  /**
   * Asked at every tick of a loop of the engine's C code (engine/wasm/loop-ticks.ts), inside a built-in that does not poll: true
   * pre-empts it, by throwing `Preempted` through the wasm (the VM is then broken and replaced). Only a run's turn
   * sets it.
   */
  preempt: () => boolean = () => false;
  /** The single host function the prelude calls. */
  hostCallback: HostCallback = () => undefined;
  /** Set when the VM's state can no longer be trusted (a host-side error thrown through the wasm). */
  broken = false;

  private wrapper!: QuickJS;
  private exports!: Exports;
  /** Marks host writes as written, in a module instrumented by engine/wasm/write-tracking.ts. */
  private readonly markWritten: ((address: number, length: number) => void) | undefined;
  /**
   * What one of QuickJS's polls is charged of the interrupt budget: a module rewritten by engine/wasm/loop-ticks.ts polls every
   * INTERRUPT_POLL_TICKS (engine/wasm/interrupt-poll.ts always rewrites it too), any other at QuickJS-NG's own rate.
   */
  private readonly pollShares: number;
  /** The instance's memory, captured as images and reset to them. */
  private readonly memory: InstanceMemory;
  private readonly values: GuestValues;
  private entries?: EntryPoints;

  private constructor(
    private readonly options: VmOptions,
    instance: WebAssembly.Instance,
  ) {
    const raw = instance.exports as unknown as Exports;
    const pollTicks = raw[LOOP_TICK_EXPORT] === undefined ? QUICKJS_POLL_TICKS : INTERRUPT_POLL_TICKS;
    this.pollShares = (BUDGET_SHARES * pollTicks) / QUICKJS_POLL_TICKS;
    const mark = raw[MARK_EXPORT];
    this.markWritten = mark;
    // The host writes into the memory only through buffers it allocates (strings, argument vectors) and in the WASI
    // functions below: allocations made for the host are marked as written whole.
    this.exports = mark
      ? {
          ...raw,
          wasm_malloc: (size: number) => {
            const ptr = raw.wasm_malloc(size);
            if (ptr !== 0 && size > 0) mark(ptr, size);
            return ptr;
          },
        }
      : raw;
    this.memory = new InstanceMemory(this.exports, mark !== undefined);
    this.values = new GuestValues(this.exports, {
      read: (box) => new JSValueHandle(this.wrapper, box, false, true).toString(),
      write: (value) => this.wrapper.newString(value).ptr,
    });
  }

  /** Creates a VM, runs the prelude and captures the post-prelude image. */
  static async boot(options: VmOptions): Promise<{ vm: GuestVm; image: VmImage }> {
    const vm = await GuestVm.instantiate(options);
    const ex = vm.exports;
    ex._initialize();
    if (ex.qjs_init2(Intrinsics.ALL) !== 0) throw new Error("QuickJS failed to initialize its runtime");
    vm.bindWrapper();
    const w = vm.wrapper;
    // Calls of this function arrive through the instance's import (onRawHostCall), not through the wrapper.
    const host = w.newFunction(HOST_FUNCTION, () => w.undefined);
    w.setProp(w.global, HOST_FUNCTION, host);
    host.dispose();
    const api = w.evalCode(PRELUDE_SOURCE, PRELUDE_FILENAME);
    const handles = {} as EntryPoints;
    const entries = {} as Record<EntryName, number>;
    for (const name of ENTRY_NAMES) {
      handles[name] = api.getProp(name);
      entries[name] = w.exportHandle(handles[name]);
    }
    api.dispose();
    // Grow the heap past what ordinary executions allocate, then free it: the image keeps the headroom.
    w.evalCode(`void new ArrayBuffer(${IMAGE_HEAP_HEADROOM_BYTES})`).dispose();
    const image = vm.captureImage({
      entries,
      preludeHash: sha256Hex(PRELUDE_SOURCE),
      versions: { ...w.versions },
    });
    vm.entries = handles;
    vm.dirty = true;
    // The headroom was written (allocated and cleared) on the way to the image; checking it costs full resets more.
    vm.memory.countZeroPagesWritten(IMAGE_HEAP_HEADROOM_BYTES);
    return { vm, image };
  }

  /**
   * Captures the VM's current state as an image of its own (after the prelude's `configure`, say), with the same
   * entry points as the image it was reset to. Call it only between executions' guest code: nothing may be running.
   */
  capture(): VmImage {
    const base = this.image;
    if (!base || this.broken) throw new Error("capture(): the VM has no image to derive from");
    this.image = this.captureImage(base);
    return this.image;
  }

  private captureImage(from: Pick<VmImage, "entries" | "preludeHash" | "versions">): VmImage {
    const w = this.wrapper;
    w.runGC();
    // After a collection QuickJS sets its next threshold just above the live heap, so every execution would start
    // with a full collection of the image's objects. Short executions never need one: move it into the headroom.
    w.gcThreshold = w.getAllocatedSize() + IMAGE_HEAP_HEADROOM_BYTES / 2;
    return {
      ...this.memory.capture(),
      entries: from.entries,
      preludeHash: from.preludeHash,
      versions: from.versions,
    };
  }

  /**
   * The VM's memory as pages for a snapshot of a run (snapshot.ts), between two of its turns; undefined past
   * `maxBytes` of them. The VM goes on as it was.
   */
  pages(maxBytes: number): MemoryPages | undefined {
    return this.memory.pages(maxBytes);
  }

  /** The image the VM was last reset to or captured; it is in exactly that state when `dirty` is false. */
  get currentImage(): VmImage | undefined {
    return this.image;
  }

  /** A new VM in the image's state, in a new instance of the shared module. */
  static async fromImage(options: VmOptions, image: VmImage): Promise<GuestVm> {
    const vm = await GuestVm.instantiate(options);
    vm.dirty = true;
    if (!vm.reset(image)) throw new Error("a new VM could not take the image");
    return vm;
  }

  private static async instantiate(options: VmOptions): Promise<GuestVm> {
    let vm: GuestVm | undefined;
    // quickjs-wasi's imports call back into the wrapper object they were created with. The instance outlives many
    // wrappers, so they are given this forwarder, which always reaches the current one.
    const forward = {
      handleHostCall: (namePtr: number, nameLen: number, thisPtr: number, argc: number, argvPtr: number) =>
        vm ? vm.onRawHostCall(namePtr, nameLen, thisPtr, argc, argvPtr) : 0,
      readCString: (ptr: number) => call(vm?.wrapper, "readCString", [ptr]),
      writeString: (s: string) => call(vm?.wrapper, "writeString", [s]),
      throwHostException: (e: unknown) => call(vm?.wrapper, "throwHostException", [e]),
      get exports() {
        return vm?.exports;
      },
      interruptHandler: () => vm?.poll() ?? false,
      unhandledRejectionHandler: null,
      moduleNormalizeHandler: null,
      moduleLoadHandler: null,
      timezoneOffsetHandler: () => 0,
    };
    const wasi = () => ({
      // QuickJS's own diagnostics written to stdout/stderr are dropped, not passed to the host's streams.
      fd_write(_fd: number, iovsPtr: number, iovsLen: number, nwrittenPtr: number) {
        const memory = vm?.exports.memory;
        if (!memory) return 0;
        const view = new DataView(memory.buffer);
        let total = 0;
        for (let i = 0; i < iovsLen; i++) total += view.getUint32(iovsPtr + i * 8 + 4, true);
        vm?.markWritten?.(nwrittenPtr, 4);
        view.setUint32(nwrittenPtr, total, true);
        return 0;
      },
      clock_time_get(clockId: number, _precision: bigint, resultPtr: number) {
        const clock = vm?.clock ?? frozenClock;
        const ms = clockId === 0 ? clock.realtimeMs() : clock.monotonicMs();
        const memory = vm?.exports.memory;
        if (!memory) return 0;
        vm?.markWritten?.(resultPtr, 8);
        new DataView(memory.buffer).setBigUint64(resultPtr, BigInt(Math.round(ms * 1e6)), true);
        return 0;
      },
      // The other WASI functions that write into the memory, so that their writes are marked too.
      fd_fdstat_get(fd: number, statPtr: number) {
        const memory = vm?.exports.memory;
        if (!memory) return 0;
        if (fd !== 1 && fd !== 2) return WASI_ERRNO_BADF;
        vm?.markWritten?.(statPtr, 24);
        new Uint8Array(memory.buffer, statPtr, 24).fill(0);
        new DataView(memory.buffer).setUint8(statPtr, WASI_FILETYPE_CHARACTER_DEVICE);
        return 0;
      },
      random_get(bufferPtr: number, length: number) {
        const memory = vm?.exports.memory;
        if (!memory) return 0;
        vm?.markWritten?.(bufferPtr, length);
        fillRandom(new Uint8Array(memory.buffer, bufferPtr, length));
        return 0;
      },
    });
    const { instance } = await Statics.instantiate(options.module, forward, wasi);
    vm = new GuestVm(options, instance);
    return vm;
  }

  private image?: VmImage;
  /** True when the VM has run guest code since its last reset. */
  dirty = false;

  /** Bytes the last reset restored: the blocks marked as written, or the whole image. */
  get restoredBytes(): number {
    return this.memory.restoredBytes;
  }

  /** Resets in a row, up to the last, that each filled fewer than MANY_ZERO_PAGES zero pages. */
  get quietResets(): number {
    return this.memory.quietResets;
  }

  /** The most zero pages of the image one execution wrote (see InstanceMemory.peakZeroPagesWritten). */
  get peakZeroPagesWritten(): number {
    return this.memory.peakZeroPagesWritten;
  }

  /**
   * Binds a fresh host-side wrapper to the instance and retires the previous one (item 4 of the reset's soundness
   * list, image.ts).
   */
  private bindWrapper(): void {
    const previous = this.wrapper;
    const w = new WrapperCtor(this.options.module);
    // The wrapper reaches the module through these exports (the host's allocations marked as written).
    (w as unknown as WrapperInternals).setInstance({ exports: this.exports } as unknown as WebAssembly.Instance);
    Statics.applyLimits(w, {
      maxStackSize: this.options.maxStackSize,
      interruptHandler: () => this.poll(),
      timezoneOffset: 0,
    });
    this.wrapper = w;
    this.generation++;
    // A disposed wrapper drops its exports: stale handles of the previous execution then do nothing.
    previous?.dispose();
  }

  /**
   * A call of a host function from the guest. The prelude's is answered here directly: its arguments are read from
   * their boxes and the answer is returned as a new box, which QuickJS's trampoline frees (as it frees the
   * arguments). Any other name goes to quickjs-wasi's own dispatch.
   */
  private onRawHostCall(namePtr: number, nameLen: number, thisPtr: number, argc: number, argvPtr: number): number {
    const internals = this.wrapper as unknown as WrapperInternals;
    if (nameLen !== HOST_FUNCTION_BYTES) return internals.handleHostCall(namePtr, nameLen, thisPtr, argc, argvPtr);
    try {
      return this.values.box(this.hostCallback(this.values.hostArgs(argc, argvPtr)));
    } catch (error) {
      return internals.throwHostException(error);
    }
  }

  /** Calls one of the prelude's entry points with primitive arguments; a guest exception throws a JSException. */
  callEntry(name: EntryName, ...args: Primitive[]): void {
    const result = this.values.call(this.entryPoints[name].ptr, args);
    if (result === 0) (this.wrapper as unknown as WrapperInternals).throwPendingException();
    this.values.free(result);
  }

  /** Puts the VM in its post-prelude state. Returns false when the caller must make a new VM from the image. */
  reset(image: VmImage): boolean {
    this.resetToken++;
    if (!this.dirty && this.image === image && !this.broken) return true;
    if (!this.canReset(image)) return false;
    if (!this.memory.restoreWritten(image, this.image)) this.memory.restoreAll(image);
    this.completeReset(image);
    return true;
  }

  /**
   * The same reset in steps of at most `chunkBytes`, yielding in between so that a worker can serve messages
   * meanwhile. Returns false when a new VM is needed; stops early (returning true) when a synchronous `reset()`
   * took over.
   */
  *resetGradually(image: VmImage, chunkBytes: number): Generator<void, boolean> {
    const token = ++this.resetToken;
    if (!this.dirty && this.image === image && !this.broken) return true;
    if (!this.canReset(image)) return false;
    // Restoring the written blocks takes microseconds: no steps needed.
    if (!this.memory.restoreWritten(image, this.image)) {
      const finished = yield* this.memory.restoreInSteps(image, chunkBytes, () => token !== this.resetToken);
      if (!finished) return true;
    }
    this.completeReset(image);
    return true;
  }

  private resetToken = 0;

  /** Whether `reset(image)` would need a new instance instead (its memory grew past the image, or it broke). */
  needsReplacing(image: VmImage): boolean {
    return !this.canReset(image);
  }

  private canReset(image: VmImage): boolean {
    // A VM whose memory grew past the image needs a new instance (see InstanceMemory.fits).
    return !this.broken && this.memory.fits(image);
  }

  private completeReset(image: VmImage): void {
    this.memory.complete(image);
    this.bindWrapper();
    const w = this.wrapper;
    const entries = {} as EntryPoints;
    for (const name of ENTRY_NAMES) entries[name] = w.importHandle(image.entries[name]);
    this.entries = entries;
    this.image = image;
    this.dirty = false;
  }

  /** The current wrapper; valid until the next reset. */
  get qjs(): QuickJS {
    return this.wrapper;
  }

  get entryPoints(): EntryPoints {
    if (!this.entries) throw new Error("the VM has no prelude");
    return this.entries;
  }

  setMemoryLimit(bytes: number): void {
    // 0 means "no limit" to QuickJS; the sandbox always passes a positive cap.
    this.exports.qjs_set_memory_limit(bytes);
  }

  /**
   * How many out-of-memory errors the engine raised in this instance so far (refused allocations, which the script
   * may have caught; a script's own `InternalError("out of memory")` is not counted), in a module rewritten by
   * engine/wasm/catchable-oom.ts; undefined for another module. The count lives outside the memory image, so resets leave it
   * alone: a run compares it at its start and its end.
   */
  outOfMemoryCount(): number | undefined {
    const counter = this.exports[OUT_OF_MEMORY_EXPORT];
    return counter === undefined ? undefined : (counter.value as number);
  }

  allocatedBytes(): number {
    return this.wrapper.getAllocatedSize();
  }

  memoryBytes(): number {
    return this.exports.memory.buffer.byteLength;
  }

  /**
   * Runs pending promise jobs until none is left. Every `jobsPerCheck` jobs it polls `interrupt` itself, because a
   * script such as `while (true) await null` runs a few opcodes per job, too few for QuickJS's own polling.
   * Throws a JSException for an uncatchable guest error (interrupt, out of memory), and `Interrupted` when the poll
   * between jobs fired.
   */
  drain(jobsPerCheck: number): void {
    const ex = this.exports;
    let count = 0;
    while (ex.qjs_is_job_pending()) {
      if (ex.qjs_execute_pending_job() < 0) (this.wrapper as unknown as WrapperInternals).throwPendingException();
      if (++count % jobsPerCheck === 0 && this.interrupt((BUDGET_SHARES * jobsPerCheck) / BUDGET_POLL_JOBS)) {
        throw new Interrupted();
      }
    }
  }

  /** QuickJS's interrupt poll, or a loop's tick (see `preempt`). */
  private poll(): boolean {
    const tick = this.exports[LOOP_TICK_EXPORT];
    if (tick === undefined || tick.value === 0) return this.interrupt(this.pollShares);
    if (this.broken || this.preempt()) {
      // Wherever the built-in stood, the VM's state is now unknown: it is never used again.
      this.broken = true;
      throw new Preempted();
    }
    return false;
  }

  /** True for the uncatchable errors QuickJS raises itself (an interrupt; out of memory in a module not rewritten). */
  isUncatchable(error: JSException): boolean {
    return !error.handle.disposed && this.exports.qjs_is_uncatchable_error(error.handle.ptr) !== 0;
  }

  /** Drops the instance; the VM cannot be used afterwards. */
  dispose(): void {
    this.wrapper?.dispose();
    this.entries = undefined;
    this.broken = true;
  }
}

/** The interrupt poll between promise jobs fired. */
export class Interrupted extends Error {}

/** A loop's tick pre-empted a built-in (see GuestVm.preempt); the VM is broken. */
export class Preempted extends Error {}

export { JSException };

function call(target: unknown, method: string, args: unknown[]): unknown {
  if (!target) return 0;
  const fn = (target as Record<string, (...a: unknown[]) => unknown>)[method];
  return fn?.apply(target, args);
}
