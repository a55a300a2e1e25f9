/**
 * The write-tracking rewrite of QuickJS's wasm: every store and bulk write marks its pages, stores into the map's
 * pages trap, and modules it cannot track completely are refused by name of the reason. Small modules assembled here
 * stand for the shapes QuickJS's code has (a store with a constant base and a large offset, a store straddling two
 * pages, memory.fill and memory.copy).
 */
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { describe, expect, it } from "vitest";
import wabtInit from "wabt";
import { WasmRewriteError } from "../dist/engine/wasm/binary.js";
import {
  BLOCK_SHIFT,
  GUARD_END,
  instrumentWrites,
  MAP_BASE,
  MAP_BLOCKS,
  MARK_EXPORT,
} from "../dist/engine/wasm/write-tracking.js";

/** The tracking unit: the tests below mark and read blocks of this size. */
const PAGE = 1 << BLOCK_SHIFT;

async function assemble(source: string): Promise<Uint8Array> {
  const wabt = await wabtInit();
  const parsed = wabt.parseWat("test.wat", source, { simd: true, bulk_memory: true, threads: true });
  parsed.validate();
  const { buffer } = parsed.toBinary({});
  parsed.destroy();
  return buffer;
}

/** A module shaped like QuickJS's: memory of its own, a stack pointer far above the map, data above it. */
const probe = `(module
  (memory (export "memory") 8)
  (global $sp (export "__stack_pointer") (mut i32) (i32.const 1048576))
  (data (i32.const 131072) "image data")
  (func (export "store32") (param $at i32) (param $v i32) (i32.store (local.get $at) (local.get $v)))
  (func (export "store64") (param $at i32) (param $v i64) (i64.store offset=8 (local.get $at) (local.get $v)))
  (func (export "storeF64") (param $at i32) (param $v f64) (f64.store (local.get $at) (local.get $v)))
  (func (export "store8") (param $at i32) (param $v i32) (i32.store8 (local.get $at) (local.get $v)))
  (func (export "storeV128") (param $at i32) (v128.store (local.get $at) (v128.const i64x2 -1 -1)))
  (func (export "storeGlobalVariable") (param $v i32) (i32.store offset=135168 (i32.const 0) (local.get $v)))
  (func (export "fill") (param $at i32) (param $n i32) (memory.fill (local.get $at) (i32.const 7) (local.get $n)))
  (func (export "copy") (param $to i32) (param $n i32) (memory.copy (local.get $to) (i32.const 131072) (local.get $n)))
  (func (export "sum") (param $n i32) (result i32) (local $s i32)
    (block $done (loop $next
      (br_if $done (i32.eqz (local.get $n)))
      (local.set $s (i32.add (local.get $s) (local.get $n)))
      (local.set $n (i32.sub (local.get $n) (i32.const 1)))
      (br $next)))
    (local.get $s)))`;

interface Probe {
  memory: WebAssembly.Memory;
  store32(at: number, v: number): void;
  store64(at: number, v: bigint): void;
  storeF64(at: number, v: number): void;
  store8(at: number, v: number): void;
  storeV128(at: number): void;
  storeGlobalVariable(v: number): void;
  fill(at: number, n: number): void;
  copy(to: number, n: number): void;
  sum(n: number): number;
}

async function instrumented(): Promise<Probe> {
  const bytes = instrumentWrites(await assemble(probe));
  const { instance } = await WebAssembly.instantiate(bytes);
  return instance.exports as unknown as Probe;
}

/** The blocks marked as written, read from the map. */
function marked(memory: WebAssembly.Memory): number[] {
  const map = new Uint8Array(memory.buffer, MAP_BASE, MAP_BLOCKS);
  const pages: number[] = [];
  map.forEach((byte, page) => {
    if (byte !== 0) pages.push(page);
  });
  return pages;
}

function clear(memory: WebAssembly.Memory): void {
  new Uint8Array(memory.buffer, MAP_BASE, MAP_BLOCKS).fill(0);
}

describe("write tracking", () => {
  it("marks the page of every store, at the address its offset makes", async () => {
    const m = await instrumented();
    m.store32(PAGE * 40 + 12, 5);
    expect(marked(m.memory)).toEqual([40]);
    clear(m.memory);
    // The offset (8) moves this store onto the next page.
    m.store64(PAGE * 41 - 8, 1n);
    expect(marked(m.memory)).toEqual([41]);
    clear(m.memory);
    m.storeF64(PAGE * 50, 1.5);
    m.store8(PAGE * 60 + 4095, 1);
    m.storeV128(PAGE * 70 + 16);
    expect(marked(m.memory)).toEqual([50, 60, 70]);
    clear(m.memory);
    // A global variable: constant base 0, its address in the offset (as C compilers emit them).
    m.storeGlobalVariable(9);
    expect(marked(m.memory)).toEqual([33]);
    expect(new Uint32Array(m.memory.buffer, 135168, 1)[0]).toBe(9);
  });

  it("marks the page a straddling store starts on (a reset also restores the next page's first bytes)", async () => {
    const m = await instrumented();
    m.store64(PAGE * 42 - 12, -1n);
    expect(marked(m.memory)).toEqual([41]);
    const bytes = new Uint8Array(m.memory.buffer);
    // The store reached 4 bytes into page 42: within the 16 a reset restores there.
    expect([...bytes.subarray(PAGE * 42, PAGE * 42 + 5)]).toEqual([255, 255, 255, 255, 0]);
  });

  it("marks every page of memory.fill and memory.copy, and nothing for a zero length", async () => {
    const m = await instrumented();
    m.fill(PAGE * 10 + 100, PAGE * 3);
    expect(marked(m.memory)).toEqual([10, 11, 12, 13]);
    clear(m.memory);
    m.copy(PAGE * 20, PAGE);
    expect(marked(m.memory)).toEqual([20]);
    clear(m.memory);
    m.fill(PAGE * 30, 0);
    m.copy(PAGE * 30, 0);
    expect(marked(m.memory)).toEqual([]);
    expect(new TextDecoder().decode(new Uint8Array(m.memory.buffer, PAGE * 20, 10))).toBe("image data");
  });

  it("traps stores and bulk writes aimed at the map or the page below it, before they write", async () => {
    const m = await instrumented();
    for (const at of [0, 8, MAP_BASE, MAP_BASE + 40, GUARD_END - 4]) {
      expect(() => m.store32(at, 0)).toThrow(WebAssembly.RuntimeError);
    }
    expect(() => m.fill(MAP_BASE + 10, 4)).toThrow(WebAssembly.RuntimeError);
    expect(() => m.copy(0, 16)).toThrow(WebAssembly.RuntimeError);
    expect(marked(m.memory)).toEqual([]);
    // A range longer than the map covers marks all of it (here it is past the memory's end, so the fill then traps).
    expect(() => m.fill(GUARD_END, MAP_BLOCKS * PAGE + 1)).toThrow(WebAssembly.RuntimeError);
    expect(marked(m.memory)).toHaveLength(MAP_BLOCKS);
    clear(m.memory);
    // The first address above the guard is an ordinary store.
    m.store32(GUARD_END, 1);
    expect(marked(m.memory)).toEqual([GUARD_END / PAGE]);
  });

  it("keeps code without writes working, and exports a marking function that traps under the guard", async () => {
    const original = await assemble(probe);
    const bytes = instrumentWrites(original);
    const module = new WebAssembly.Module(bytes);
    expect(WebAssembly.Module.exports(module).map((e) => e.name)).toContain(MARK_EXPORT);
    const { exports } = new WebAssembly.Instance(module) as unknown as { exports: Probe & Record<string, unknown> };
    expect(exports.sum(100)).toBe(5050);
    const mark = exports[MARK_EXPORT] as (at: number, length: number) => void;
    mark(PAGE * 100 + 5, PAGE * 2);
    expect(marked(exports.memory)).toEqual([100, 101, 102]);
    expect(() => mark(100, 4)).toThrow(WebAssembly.RuntimeError);
  });

  it("instruments the installed QuickJS module into one that validates and exports the marking function", () => {
    const path = createRequire(import.meta.url).resolve("quickjs-wasi/quickjs.wasm");
    const bytes = instrumentWrites(readFileSync(path));
    expect(WebAssembly.validate(bytes)).toBe(true);
    expect(WebAssembly.Module.exports(new WebAssembly.Module(bytes)).map((e) => e.name)).toContain(MARK_EXPORT);
  });

  it("refuses modules it cannot track completely, naming why", async () => {
    const refusals: [string, RegExp][] = [
      ["(module)", /no __stack_pointer/],
      [
        `(module (import "env" "memory" (memory 1)) (global (export "__stack_pointer") (mut i32) (i32.const 1048576)))`,
        /imports its memory/,
      ],
      [`(module (memory 20) (global (export "__stack_pointer") (mut i32) (i32.const 65536)))`, /stack starts at 65536/],
      [
        `(module (memory 20) (global (export "__stack_pointer") (mut i32) (i32.const 1048576))
          (data (i32.const 4200) "x"))`,
        /data segment at 4200 overlaps the write map/,
      ],
      [
        `(module (memory 20 20) (global (export "__stack_pointer") (mut i32) (i32.const 1048576))
          (func (param i32) (i32.atomic.store (local.get 0) (i32.const 1))))`,
        /unsupported opcode 0xfe/,
      ],
    ];
    for (const [source, reason] of refusals) {
      const bytes = await assemble(source);
      expect(() => instrumentWrites(bytes)).toThrow(WasmRewriteError);
      expect(() => instrumentWrites(bytes)).toThrow(reason);
    }
    expect(() => instrumentWrites(new Uint8Array([1, 2, 3]))).toThrow(/not a WebAssembly module/);
    const once = instrumentWrites(await assemble(probe));
    expect(() => instrumentWrites(once)).toThrow(/instrumented already/);
  });
});
