/**
 * One QuickJS instance and its post-prelude memory image.
 *
 * A VM is booted once (create, prelude, capture the image) and then reused: after every execution its linear memory
 * is restored from the image, which puts it in exactly its post-prelude state in well under a millisecond. With the
 * module instrumented by write-tracking.ts, only the pages the execution wrote are restored (the guest's stores and
 * bulk operations mark them; the host marks its own writes: buffers it allocates through `wasm_malloc` and what the
 * WASI functions write); otherwise the whole image is. This
 * reaches into quickjs-wasi internals (the instance's exports and the host-side wrapper), so the version is pinned and
 * a soak test compares reset VMs against fresh ones. The reset is sound only if all of this is restored:
 * 1. linear memory up to the image size;
 * 2. the module's `__stack_pointer` global;
 * 3. a VM whose memory grew past the image gets a new instance (zeroing the tail is not enough: the allocator would
 *    keep growing);
 * 4. a fresh host-side `QuickJS` wrapper per execution, so stale handles and late promise resolutions of the previous
 *    execution reach a retired wrapper and do nothing;
 * 5. host-side async work checks `generation` before touching the VM.
 */
import { createHash, randomFillSync } from "node:crypto";
import { Intrinsics, JSException, JSValueHandle, QuickJS } from "quickjs-wasi";
import { OUT_OF_MEMORY_EXPORT } from "./catchable-oom.ts";
import { IMAGE_HEAP_HEADROOM_BYTES } from "./limits.ts";
import { HOST_FUNCTION, PRELUDE_FILENAME, PRELUDE_SOURCE } from "./prelude.ts";
import { GuestValues, type HostArgs, type Primitive, type ValueExports } from "./values.ts";
import { BLOCK_SHIFT, MAP_BASE, MAP_BLOCKS, MARK_EXPORT } from "./write-tracking.ts";
import { type ZeroPages, zeroPagesFor } from "./zero-pages.ts";

/** The exports of the quickjs-wasi module that the reset, the job loop and the value boundary use directly. */
interface Exports extends ValueExports {
  memory: WebAssembly.Memory;
  __stack_pointer: WebAssembly.Global;
  _initialize(): void;
  qjs_init2(intrinsics: number): number;
  qjs_get_runtime_ptr(): number;
  qjs_get_context_ptr(): number;
  qjs_set_runtime_and_context(rt: number, ctx: number): void;
  qjs_is_job_pending(): number;
  qjs_execute_pending_job(): number;
  qjs_set_memory_limit(limit: number): void;
  qjs_is_uncatchable_error(ptr: number): number;
  qjs_run_gc(): void;
  /** Present in modules instrumented by write-tracking.ts. */
  [MARK_EXPORT]?: (address: number, length: number) => void;
  /** Present in modules rewritten by catchable-oom.ts: the engine's out-of-memory errors so far. */
  [OUT_OF_MEMORY_EXPORT]?: WebAssembly.Global;
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

export interface VmImage {
  /** Bytes of linear memory the image covers (a VM's whole memory when it was captured). */
  byteLength: number;
  stackPointer: number;
  runtimePtr: number;
  contextPtr: number;
  /** Tokens (quickjs-wasi exportHandle) of the prelude's entry points, valid in every VM made from this image. */
  entries: Record<EntryName, number>;
  /** SHA-256 of the prelude source, part of a deterministic run's fingerprint. */
  preludeHash: string;
  versions: Record<string, string>;
  /**
   * The image as runs of all-zero and other pages, in the order a reset restores them: zero runs first (checked,
   * and filled where written), then the runs with data, so that those are in the cache when the next execution runs.
   */
  segments: ImageSegment[];
}

/** The prelude's entry points (see PRELUDE_SOURCE). */
const ENTRY_NAMES = ["configure", "prepare", "start", "settle"] as const;
export type EntryName = (typeof ENTRY_NAMES)[number];
export type EntryPoints = Record<EntryName, JSValueHandle>;

/** A run of 4 KiB pages of an image: all zero, or with the bytes they hold (only these are kept in host memory). */
export type ImageSegment =
  | { from: number; to: number; zero: true }
  | { from: number; to: number; zero: false; data: Uint8Array };

/** The single host function: reads its arguments and returns a primitive for the guest. */
export type HostCallback = (args: HostArgs) => Primitive;

/** The unit of an image's segments and of the zero-page checks. */
const PAGE_BYTES = 4096;
/** The unit of write tracking (see write-tracking.ts). */
const BLOCK_BYTES = 1 << BLOCK_SHIFT;
const WASI_ERRNO_BADF = 8;
const WASI_FILETYPE_CHARACTER_DEVICE = 2;
/** Bytes at the start of the block after a written one that a store straddling the boundary may have reached. */
const STRADDLE_BYTES = 16;
/** Zero pages (256 KiB) one execution may write before its instance counts as slower to reset. */
export const MANY_ZERO_PAGES = 64;

/** UTF-8 length of HOST_FUNCTION, which names every call of it. */
const HOST_FUNCTION_BYTES = Buffer.byteLength(HOST_FUNCTION);

export interface VmOptions {
  module: WebAssembly.Module;
  /** QuickJS's stack guard in bytes; must be safe for the thread the VM runs on. */
  maxStackSize: number;
}

export class GuestVm {
  /** Bumped by every reset; async work captured under an older generation must not touch the VM. */
  generation = 0;
  clock: VmClock = frozenClock;
  /** Polled by QuickJS while the guest runs, and between batches of promise jobs. */
  interrupt: () => boolean = () => false;
  /** The single host function the prelude calls. */
  hostCallback: HostCallback = () => undefined;
  /** Set when the VM's state can no longer be trusted (a host-side error thrown through the wasm). */
  broken = false;

  private wrapper!: QuickJS;
  private exports!: Exports;
  /** Marks host writes as written, in a module instrumented by write-tracking.ts. */
  private readonly markWritten: ((address: number, length: number) => void) | undefined;
  private readonly zeroPages: ZeroPages | undefined;
  private readonly values: GuestValues;
  private entries?: EntryPoints;

  private constructor(
    private readonly options: VmOptions,
    instance: WebAssembly.Instance,
  ) {
    const raw = instance.exports as unknown as Exports;
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
    this.zeroPages = zeroPagesFor(this.exports.memory);
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
      preludeHash: createHash("sha256").update(PRELUDE_SOURCE).digest("hex"),
      versions: { ...w.versions },
    });
    vm.entries = handles;
    vm.dirty = true;
    // The headroom was written (allocated and cleared) on the way to the image; checking it costs full resets more.
    if (!vm.markWritten) vm.peakZeroPagesWritten = IMAGE_HEAP_HEADROOM_BYTES / PAGE_BYTES;
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
    const ex = this.exports;
    w.runGC();
    // After a collection QuickJS sets its next threshold just above the live heap, so every execution would start
    // with a full collection of the image's objects. Short executions never need one: move it into the headroom.
    w.gcThreshold = w.getAllocatedSize() + IMAGE_HEAP_HEADROOM_BYTES / 2;
    const memory = new Uint8Array(ex.memory.buffer);
    // Everything written so far is part of the image: tracking starts over from it.
    if (this.markWritten) memory.fill(0, MAP_BASE, MAP_BASE + MAP_BLOCKS);
    return {
      byteLength: memory.byteLength,
      segments: segmentsOf(memory),
      stackPointer: ex.__stack_pointer.value as number,
      runtimePtr: ex.qjs_get_runtime_ptr(),
      contextPtr: ex.qjs_get_context_ptr(),
      entries: from.entries,
      preludeHash: from.preludeHash,
      versions: from.versions,
    };
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
      interruptHandler: () => vm?.interrupt() ?? false,
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
        randomFillSync(new Uint8Array(memory.buffer, bufferPtr, length));
        return 0;
      },
    });
    const { instance } = await Statics.instantiate(options.module, forward, wasi);
    vm = new GuestVm(options, instance);
    return vm;
  }

  private image?: VmImage;
  /** Bytes the last reset restored: the blocks marked as written, or the whole image. */
  restoredBytes = 0;
  /** True when the VM has run guest code since its last reset. */
  dirty = false;
  /** Resets in a row, up to the last, that each filled fewer than MANY_ZERO_PAGES zero pages. */
  quietResets = 0;
  /**
   * The most zero pages of the image one execution wrote (filled again by the reset that followed): a lower bound
   * of the zero pages this instance has written. Linux backs a page that was never written with its one shared zero
   * page, which stays in the cache and makes checking it cheap; a page once written keeps memory of its own, and
   * checking it, cold, costs several times more. A VM that wrote many is worth replacing by a new instance. Only
   * whole-image resets check zero pages: a VM that tracks writes keeps this at 0.
   */
  peakZeroPagesWritten = 0;
  private zeroPagesWritten = 0;

  /** Binds a fresh host-side wrapper to the instance and retires the previous one. */
  private bindWrapper(): void {
    const previous = this.wrapper;
    const w = new WrapperCtor(this.options.module);
    // The wrapper reaches the module through these exports (the host's allocations marked as written).
    (w as unknown as WrapperInternals).setInstance({ exports: this.exports } as unknown as WebAssembly.Instance);
    Statics.applyLimits(w, {
      maxStackSize: this.options.maxStackSize,
      interruptHandler: () => this.interrupt(),
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
    if (this.resetWritten(image)) return true;
    const grownFrom = this.growTo(image);
    for (const segment of image.segments) this.restore(segment, segment.from, segment.to, grownFrom);
    this.restoredBytes = image.byteLength;
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
    if (this.resetWritten(image)) return true;
    const grownFrom = this.growTo(image);
    for (const segment of image.segments) {
      for (let offset = segment.from; offset < segment.to; offset += chunkBytes) {
        this.restore(segment, offset, Math.min(segment.to, offset + chunkBytes), grownFrom);
        yield;
        if (token !== this.resetToken) return true;
      }
    }
    this.restoredBytes = image.byteLength;
    this.completeReset(image);
    return true;
  }

  private resetToken = 0;

  /**
   * True when restoring the blocks marked as written suffices: the module tracks writes and the memory held exactly
   * this image when tracking last started (its reset to it, or its capture). A write past the image would have grown
   * the memory, which the size check catches (and canReset replaces such a VM).
   */
  private canRestoreWritten(image: VmImage): boolean {
    return (
      this.markWritten !== undefined &&
      this.image === image &&
      image.byteLength <= MAP_BLOCKS * BLOCK_BYTES &&
      this.exports.memory.buffer.byteLength === image.byteLength
    );
  }

  /** The reset by the blocks marked as written, where it suffices (see canRestoreWritten); false otherwise. */
  private resetWritten(image: VmImage): boolean {
    if (!this.canRestoreWritten(image)) return false;
    this.restoreWritten(image);
    this.completeReset(image);
    return true;
  }

  /** Restores the blocks marked as written (see write-tracking.ts) from the image and clears the marks. */
  private restoreWritten(image: VmImage): void {
    const memory = new Uint8Array(this.exports.memory.buffer);
    const sources = blockSourcesOf(image);
    const blocks = sources.length;
    const map = memory.subarray(MAP_BASE, MAP_BASE + blocks);
    const words = new Int32Array(memory.buffer, MAP_BASE, Math.ceil(blocks / 4));
    let restored = 0;
    for (let word = 0; word < words.length; word++) {
      if (words[word] === 0) continue;
      const end = Math.min(blocks, word * 4 + 4);
      for (let block = word * 4; block < end; block++) {
        if (map[block] === 0) continue;
        restored++;
        const at = block * BLOCK_BYTES;
        const source = sources[block];
        if (source) memory.set(source, at);
        else memory.fill(0, at, at + BLOCK_BYTES);
        // A store that began near the end of this block may have reached into the next one; bulk writes and the
        // host's mark every block they touch.
        const next = block + 1;
        if (next < blocks && map[next] === 0) {
          const nextSource = sources[next];
          const nextAt = at + BLOCK_BYTES;
          // Byte by byte: a subarray per block would cost more than these 16 bytes.
          for (let i = 0; i < STRADDLE_BYTES; i++) memory[nextAt + i] = nextSource ? (nextSource[i] as number) : 0;
        }
      }
    }
    map.fill(0);
    this.restoredBytes = restored * BLOCK_BYTES;
  }

  private canReset(image: VmImage): boolean {
    // A VM whose memory grew past the image needs a new instance: the allocator would keep growing otherwise.
    return !this.broken && this.exports.memory.buffer.byteLength <= image.byteLength;
  }

  /** Grows a new instance's memory to the image's size; returns where the pages the grow added begin. */
  private growTo(image: VmImage): number {
    const memory = this.exports.memory;
    const size = memory.buffer.byteLength;
    if (size < image.byteLength) memory.grow(Math.ceil((image.byteLength - size) / 65536));
    return size;
  }

  /**
   * Restores [from, to) of one segment of the image. Resets cover the whole image, the stack pages below QuickJS's
   * guard included: skipping them would let a guest that corrupts memory through an engine bug leave data there for
   * a later execution (maybe another tenant's).
   */
  private restore(segment: ImageSegment, from: number, to: number, grownFrom: number) {
    if (!segment.zero) {
      new Uint8Array(this.exports.memory.buffer).set(
        segment.data.subarray(from - segment.from, to - segment.from),
        from,
      );
      return;
    }
    // Pages a grow added are zero already: a VM's first reset need not touch them (that costs page faults).
    const end = Math.min(to, grownFrom);
    if (from >= end) return;
    if (this.zeroPages) this.zeroPagesWritten += this.zeroPages(from, end);
    else {
      new Uint8Array(this.exports.memory.buffer).fill(0, from, end);
      this.zeroPagesWritten += (end - from) / PAGE_BYTES;
    }
  }

  private completeReset(image: VmImage): void {
    this.exports.__stack_pointer.value = image.stackPointer;
    this.exports.qjs_set_runtime_and_context(image.runtimePtr, image.contextPtr);
    this.bindWrapper();
    const w = this.wrapper;
    const entries = {} as EntryPoints;
    for (const name of ENTRY_NAMES) entries[name] = w.importHandle(image.entries[name]);
    this.entries = entries;
    this.image = image;
    this.dirty = false;
    // Only full resets check the zero pages, so only they get slower once many were written (see peakZeroPagesWritten).
    if (!this.markWritten) {
      this.quietResets = this.zeroPagesWritten >= MANY_ZERO_PAGES ? 0 : this.quietResets + 1;
      this.peakZeroPagesWritten = Math.max(this.peakZeroPagesWritten, this.zeroPagesWritten);
    }
    this.zeroPagesWritten = 0;
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
   * catchable-oom.ts; undefined for another module. The count lives outside the memory image, so resets leave it
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
      if (++count % jobsPerCheck === 0 && this.interrupt()) throw new Interrupted();
    }
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

/** Splits memory into runs of 4 KiB pages that are all zero or not, zero runs first; data runs get a copy. */
function segmentsOf(memory: Uint8Array): ImageSegment[] {
  const page = PAGE_BYTES;
  const words = new BigUint64Array(memory.buffer, memory.byteOffset, memory.byteLength / 8);
  const runs: { from: number; to: number; zero: boolean }[] = [];
  for (let from = 0; from < memory.byteLength; from += page) {
    let zero = true;
    for (let i = from / 8; i < (from + page) / 8; i++) {
      if (words[i] !== 0n) {
        zero = false;
        break;
      }
    }
    const last = runs[runs.length - 1];
    if (last && last.zero === zero) last.to = from + page;
    else runs.push({ from, to: from + page, zero });
  }
  const zeros: ImageSegment[] = [];
  const data: ImageSegment[] = [];
  for (const { from, to, zero } of runs) {
    if (zero) zeros.push({ from, to, zero });
    else data.push({ from, to, zero, data: memory.slice(from, to) });
  }
  return [...zeros, ...data];
}

const blockSources = new WeakMap<VmImage, (Uint8Array | undefined)[]>();

/** The image's bytes block by block (undefined for an all-zero block), for restoring single blocks. */
function blockSourcesOf(image: VmImage): (Uint8Array | undefined)[] {
  let sources = blockSources.get(image);
  if (!sources) {
    sources = new Array<Uint8Array | undefined>(Math.ceil(image.byteLength / BLOCK_BYTES)).fill(undefined);
    for (const segment of image.segments) {
      if (segment.zero) continue;
      for (let at = segment.from; at < segment.to; at += BLOCK_BYTES) {
        sources[at / BLOCK_BYTES] = segment.data.subarray(at - segment.from, at - segment.from + BLOCK_BYTES);
      }
    }
    blockSources.set(image, sources);
  }
  return sources;
}

/** The interrupt poll between promise jobs fired. */
export class Interrupted extends Error {}

export { JSException };

function call(target: unknown, method: string, args: unknown[]): unknown {
  if (!target) return 0;
  const fn = (target as Record<string, (...a: unknown[]) => unknown>)[method];
  return fn?.apply(target, args);
}
