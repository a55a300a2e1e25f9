/**
 * A QuickJS instance's memory image, and the reset that puts the instance back in it.
 *
 * After every execution a VM's linear memory is restored from its image, which puts it in exactly the image's state
 * in well under a millisecond. With the module instrumented by engine/wasm/write-tracking.ts, only the pages the execution wrote
 * are restored (the guest's stores and bulk operations mark them; the host marks its own writes: buffers it
 * allocates through `wasm_malloc` and what the WASI functions write, see vm.ts); otherwise the whole image is. A soak
 * test compares reset VMs against fresh ones. The reset is sound only if all of this is restored:
 * 1. linear memory up to the image size (restoreWritten, restoreAll, restoreInSteps);
 * 2. the module's `__stack_pointer` global (complete);
 * 3. a VM whose memory grew past the image gets a new instance (`fits` refuses it; zeroing the tail is not enough:
 *    the allocator would keep growing);
 * 4. a fresh host-side `QuickJS` wrapper per execution, so stale handles and late promise resolutions of the previous
 *    execution reach a retired wrapper and do nothing (GuestVm.bindWrapper, vm.ts);
 * 5. host-side async work checks `generation` before touching the VM (GuestVm.generation, vm.ts).
 */
import { BLOCK_SHIFT, MAP_BASE, MAP_BLOCKS } from "./wasm/write-tracking.ts";
import { type ZeroPages, zeroPagesFor } from "./wasm/zero-pages.ts";

/** The exports of the quickjs-wasi module that an image holds and its reset restores. */
export interface ImageExports {
  memory: WebAssembly.Memory;
  __stack_pointer: WebAssembly.Global;
  qjs_get_runtime_ptr(): number;
  qjs_get_context_ptr(): number;
  qjs_set_runtime_and_context(rt: number, ctx: number): void;
}

/** An instance's state as a reset restores it (a VmImage adds the prelude's entry points, see vm.ts). */
export interface MemoryImage {
  /** Bytes of linear memory the image covers (a VM's whole memory when it was captured). */
  byteLength: number;
  stackPointer: number;
  runtimePtr: number;
  contextPtr: number;
  /**
   * The image as runs of all-zero and other pages, in the order a reset restores them: zero runs first (checked,
   * and filled where written), then the runs with data, so that those are in the cache when the next execution runs.
   */
  segments: ImageSegment[];
}

/** A run of 4 KiB pages of an image: all zero, or with the bytes they hold (only these are kept in host memory). */
export type ImageSegment =
  | { from: number; to: number; zero: true }
  | { from: number; to: number; zero: false; data: Uint8Array };

/**
 * An instance's memory as a snapshot keeps it (snapshot.ts): its size, the globals a reset restores, and only the
 * pages that are not all zero.
 */
export interface MemoryPages {
  byteLength: number;
  stackPointer: number;
  runtimePtr: number;
  contextPtr: number;
  /** [from, to) byte ranges of the pages kept, flat: 4 KiB aligned, increasing, within `byteLength`. */
  ranges: number[];
  /** Their bytes, range after range. */
  data: Uint8Array;
}

/** The unit of an image's segments and of the zero-page checks. */
export const PAGE_BYTES = 4096;
/** The unit of write tracking (see engine/wasm/write-tracking.ts). */
const BLOCK_BYTES = 1 << BLOCK_SHIFT;
/** Bytes at the start of the block after a written one that a store straddling the boundary may have reached. */
const STRADDLE_BYTES = 16;
/** Zero pages (256 KiB) one execution may write before its instance counts as slower to reset. */
export const MANY_ZERO_PAGES = 64;

/** One instance's memory: captured as an image, and restored to one. */
export class InstanceMemory {
  /** Bytes the last reset restored: the blocks marked as written, or the whole image. */
  restoredBytes = 0;
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
  private readonly zeroPages: ZeroPages | undefined;

  /** `tracksWrites`: the module is instrumented by engine/wasm/write-tracking.ts. */
  constructor(
    private readonly exports: ImageExports,
    private readonly tracksWrites: boolean,
  ) {
    this.zeroPages = zeroPagesFor(exports.memory);
  }

  /** The memory and the globals as an image. Everything written so far is part of it: tracking starts over. */
  capture(): MemoryImage {
    const ex = this.exports;
    const memory = new Uint8Array(ex.memory.buffer);
    if (this.tracksWrites) memory.fill(0, MAP_BASE, MAP_BASE + MAP_BLOCKS);
    return {
      byteLength: memory.byteLength,
      segments: segmentsOf(memory),
      stackPointer: ex.__stack_pointer.value as number,
      runtimePtr: ex.qjs_get_runtime_ptr(),
      contextPtr: ex.qjs_get_context_ptr(),
    };
  }

  /**
   * The memory as pages (see MemoryPages), leaving the instance and its write tracking as they are; undefined when the
   * pages that are not all zero hold more than `maxBytes`. The write-tracking map is left out: it is the reset's
   * bookkeeping, not the VM's state (a VM restored from the pages restores its whole memory after its run).
   */
  pages(maxBytes: number): MemoryPages | undefined {
    const ex = this.exports;
    const memory = new Uint8Array(ex.memory.buffer);
    const words = new Int32Array(memory.buffer, 0, memory.byteLength / 4);
    const ranges: number[] = [];
    let kept = 0;
    for (let from = 0; from < memory.byteLength; from += PAGE_BYTES) {
      if (this.tracksWrites && from >= MAP_BASE && from < MAP_BASE + MAP_BLOCKS) continue;
      if (isZeroPage(words, from)) continue;
      kept += PAGE_BYTES;
      if (kept > maxBytes) return undefined;
      if (ranges.length > 0 && ranges[ranges.length - 1] === from) ranges[ranges.length - 1] = from + PAGE_BYTES;
      else ranges.push(from, from + PAGE_BYTES);
    }
    const data = new Uint8Array(kept);
    let at = 0;
    for (let i = 0; i < ranges.length; i += 2) {
      const from = ranges[i] as number;
      const to = ranges[i + 1] as number;
      data.set(memory.subarray(from, to), at);
      at += to - from;
    }
    return {
      byteLength: memory.byteLength,
      stackPointer: ex.__stack_pointer.value as number,
      runtimePtr: ex.qjs_get_runtime_ptr(),
      contextPtr: ex.qjs_get_context_ptr(),
      ranges,
      data,
    };
  }

  /** Counts zero pages written outside a reset (a boot's heap headroom, allocated and cleared before the capture). */
  countZeroPagesWritten(bytes: number): void {
    if (!this.tracksWrites) this.peakZeroPagesWritten = Math.max(this.peakZeroPagesWritten, bytes / PAGE_BYTES);
  }

  /** False for a memory that grew past the image: it needs a new instance, the allocator would keep growing otherwise. */
  fits(image: MemoryImage): boolean {
    return this.exports.memory.buffer.byteLength <= image.byteLength;
  }

  /**
   * Restores the blocks marked as written (see engine/wasm/write-tracking.ts) from the image and clears the marks, where that
   * suffices (see canRestoreWritten); returns false, having restored nothing, otherwise. `held` is the image the
   * memory was last restored to or captured as.
   */
  restoreWritten(image: MemoryImage, held: MemoryImage | undefined): boolean {
    if (!this.canRestoreWritten(image, held)) return false;
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
    return true;
  }

  /**
   * True when restoring the blocks marked as written suffices: the module tracks writes and the memory held exactly
   * this image when tracking last started (its reset to it, or its capture). A write past the image would have grown
   * the memory, which the size check catches (and `fits` refuses such a memory).
   */
  private canRestoreWritten(image: MemoryImage, held: MemoryImage | undefined): boolean {
    return (
      this.tracksWrites &&
      held === image &&
      image.byteLength <= MAP_BLOCKS * BLOCK_BYTES &&
      this.exports.memory.buffer.byteLength === image.byteLength
    );
  }

  /** Restores the whole image (a memory that `fits` it). */
  restoreAll(image: MemoryImage): void {
    const grownFrom = this.growTo(image);
    for (const segment of image.segments) this.restore(segment, segment.from, segment.to, grownFrom);
    this.restoredBytes = image.byteLength;
  }

  /**
   * The same in steps of at most `chunkBytes`, yielding after each. Returns false, unfinished, as soon as
   * `superseded()` says after a step that another reset took over.
   */
  *restoreInSteps(image: MemoryImage, chunkBytes: number, superseded: () => boolean): Generator<void, boolean> {
    const grownFrom = this.growTo(image);
    for (const segment of image.segments) {
      for (let offset = segment.from; offset < segment.to; offset += chunkBytes) {
        this.restore(segment, offset, Math.min(segment.to, offset + chunkBytes), grownFrom);
        yield;
        if (superseded()) return false;
      }
    }
    this.restoredBytes = image.byteLength;
    return true;
  }

  /** Grows a new instance's memory to the image's size; returns where the pages the grow added begin. */
  private growTo(image: MemoryImage): number {
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

  /** Ends a reset of the memory: the globals the image holds, and the zero pages it filled counted. */
  complete(image: MemoryImage): void {
    this.exports.__stack_pointer.value = image.stackPointer;
    this.exports.qjs_set_runtime_and_context(image.runtimePtr, image.contextPtr);
    // Only full resets check the zero pages, so only they get slower once many were written (see peakZeroPagesWritten).
    if (!this.tracksWrites) {
      this.quietResets = this.zeroPagesWritten >= MANY_ZERO_PAGES ? 0 : this.quietResets + 1;
      this.peakZeroPagesWritten = Math.max(this.peakZeroPagesWritten, this.zeroPagesWritten);
    }
    this.zeroPagesWritten = 0;
  }
}

/** Whether the 4 KiB page at byte `from` of `words` (the memory as 32-bit words) is all zero. */
function isZeroPage(words: Int32Array, from: number): boolean {
  const end = (from + PAGE_BYTES) >> 2;
  for (let i = from >> 2; i < end; i++) if (words[i] !== 0) return false;
  return true;
}

/** Splits memory into runs of 4 KiB pages that are all zero or not, zero runs first; data runs get a copy. */
function segmentsOf(memory: Uint8Array): ImageSegment[] {
  const page = PAGE_BYTES;
  const words = new Int32Array(memory.buffer, memory.byteOffset, memory.byteLength / 4);
  const runs: { from: number; to: number; zero: boolean }[] = [];
  for (let from = 0; from < memory.byteLength; from += page) {
    const zero = isZeroPage(words, from);
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

/**
 * Pages (see MemoryPages) as an image a reset restores, or undefined when they do not describe one: ranges out of
 * order, unaligned, past the size, or other than the bytes given.
 */
export function imageOfPages(pages: MemoryPages): MemoryImage | undefined {
  const { byteLength, ranges, data } = pages;
  if (byteLength % 65536 !== 0 || ranges.length % 2 !== 0) return undefined;
  const zeros: ImageSegment[] = [];
  const kept: ImageSegment[] = [];
  let end = 0;
  let at = 0;
  for (let i = 0; i < ranges.length; i += 2) {
    const from = ranges[i] as number;
    const to = ranges[i + 1] as number;
    if (from % PAGE_BYTES !== 0 || to % PAGE_BYTES !== 0 || from < end || to <= from || to > byteLength) {
      return undefined;
    }
    if (from > end) zeros.push({ from: end, to: from, zero: true });
    kept.push({ from, to, zero: false, data: data.subarray(at, at + to - from) });
    at += to - from;
    end = to;
  }
  if (at !== data.byteLength) return undefined;
  if (end < byteLength) zeros.push({ from: end, to: byteLength, zero: true });
  return {
    byteLength,
    stackPointer: pages.stackPointer,
    runtimePtr: pages.runtimePtr,
    contextPtr: pages.contextPtr,
    segments: [...zeros, ...kept],
  };
}

const blockSources = new WeakMap<MemoryImage, (Uint8Array | undefined)[]>();

/** The image's bytes block by block (undefined for an all-zero block), for restoring single blocks. */
function blockSourcesOf(image: MemoryImage): (Uint8Array | undefined)[] {
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
