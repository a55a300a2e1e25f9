/**
 * Write tracking for QuickJS's wasm. A reset used to copy the whole post-prelude image back (2.6 MiB: checking the
 * zero pages, copying the data pages) although an execution writes a few dozen of its 4 KiB pages: under load that
 * traffic, not the copy's size, is what costs, since it evicts the cache everything else runs on.
 *
 * `instrumentWrites` rewrites the module so that every store marks its block (a 4 KiB page) in a byte map inside
 * linear memory before it writes, and every `memory.fill`/`memory.copy`/`memory.init` marks its whole range. A reset
 * then restores only the marked blocks (and the first bytes of the block after each, which a store straddling the
 * boundary may reach), and clears the map. The host's own writes into the memory are marked by the VM (see GuestVm).
 * Smaller blocks copy less (256 B: a sixth of the bytes) but cost more per block in the reset's loop; they measured
 * no faster.
 *
 * The map lives in the lowest pages of the wasm stack region, which QuickJS's stack guard keeps far from the stack:
 * stores aimed below `GUARD_END` trap instead of writing, so that no store (nor a memory-corrupting engine bug) can
 * clear marks and leave a block unrestored for the next execution.
 */

/** Bytes per tracked block (log2). */
export const BLOCK_SHIFT = 12;
/** Where the byte map starts: one byte per block, set to 1 when the block was written. */
export const MAP_BASE = 4096;
/** Blocks the map covers (16 MiB of memory); a VM whose memory grew past its image is replaced, not reset. */
export const MAP_BLOCKS = (16 * 1024 * 1024) >> BLOCK_SHIFT;
/** Stores below this address trap: the map and the page under it. */
export const GUARD_END = MAP_BASE + MAP_BLOCKS;
/** The export that marks an instrumented module (a function marking [address, address + length) as written). */
export const MARK_EXPORT = "airlock_mark_written";

const MASK = MAP_BLOCKS - 1;
/** The stack the module starts with must lie well above the map: QuickJS's guard stops recursion long before. */
const MIN_STACK_TOP = 512 * 1024;

import {
  constantI32,
  Decoder,
  EXPORT_FUNC,
  exportItem,
  F32,
  F64,
  FUNC_TYPE,
  I32,
  I64,
  importCounts,
  type ModuleFacts,
  Reader,
  readFunctionTypes,
  readTypes,
  replaceSections,
  type Section,
  sectionsOf,
  sleb,
  uleb,
  V128,
  VOID_BLOCK,
  vec,
  WasmOp,
  WasmRewriteError,
  WRITES_NOTHING,
  WRITES_STORE,
  Writer,
  withItem,
} from "./binary.ts";

/** Refuses a module whose memory layout would put data or the stack on the map. */
function checkLayout(sections: Section[]): void {
  const exports = sections.find((s) => s.id === 7);
  const globals = sections.find((s) => s.id === 6);
  let stackGlobal = -1;
  if (exports) {
    const r = new Reader(exports.body);
    for (let i = r.u32(); i > 0; i--) {
      const name = r.name();
      const kind = r.u8();
      const index = r.u32();
      if (name === MARK_EXPORT) throw new WasmRewriteError("the module is instrumented already");
      if (name === "__stack_pointer" && kind === 3) stackGlobal = index;
    }
  }
  if (stackGlobal < 0 || !globals) throw new WasmRewriteError("the module exports no __stack_pointer global");
  const g = new Reader(globals.body);
  let stackTop = -1;
  for (let i = 0, count = g.u32(); i < count; i++) {
    g.skip(2);
    if (i === stackGlobal) {
      stackTop = constantI32(g, "__stack_pointer's initial value");
      break;
    }
    // Skip an initializer expression of one constant instruction.
    g.pos = new Decoder(globals.body).next(g.pos);
    if (g.u8() !== WasmOp.end) throw new WasmRewriteError("a global's initializer is not a single constant");
  }
  if (stackTop < MIN_STACK_TOP) {
    throw new WasmRewriteError(`the stack starts at ${stackTop}, too close to the write map at ${MAP_BASE}`);
  }
  const data = sections.find((s) => s.id === 11);
  if (!data) return;
  const r = new Reader(data.body);
  for (let i = r.u32(); i > 0; i--) {
    const flags = r.u32();
    if (flags === 1) {
      r.skip(r.u32());
      continue;
    }
    if (flags === 2 && r.u32() !== 0) throw new WasmRewriteError("a data segment names a second memory");
    if (flags !== 0 && flags !== 2) throw new WasmRewriteError(`a data segment has flags ${flags}`);
    const offset = constantI32(r, "a data segment's offset");
    const length = r.u32();
    r.skip(length);
    if (length > 0 && offset < GUARD_END) {
      throw new WasmRewriteError(`a data segment at ${offset} overlaps the write map (below ${GUARD_END})`);
    }
  }
}

/**
 * Scratch locals of a rewritten function, after its own: `address`, `effective`, `source`, `length` (i32), then one
 * per value type a store may hold (in the order of VALUE_SLOT).
 */
const ADDRESS = 0;
const EFFECTIVE = 1;
const SOURCE = 2;
const LENGTH = 3;
const VALUE_SLOT: Record<number, number> = { [I32]: 4, [I64]: 5, [F32]: 6, [F64]: 7, [V128]: 8 };

/** The code of the function being rewritten (reused: functions are rewritten one at a time). */
const code = new Writer(1 << 16);

function rewriteBody(body: Uint8Array, paramCount: number, markFunction: number, out: Writer): void {
  const r = new Reader(body);
  const declarations: number[][] = [];
  let locals = 0;
  for (let i = r.u32(); i > 0; i--) {
    const count = r.u32();
    const type = r.u8();
    declarations.push([...uleb(count), type]);
    locals += count;
  }
  const base = paramCount + locals;
  code.clear();
  const decoder = new Decoder(body);
  let copied = r.pos;
  let writes = 0;
  let simd = false;
  for (let pos = r.pos; pos < body.length; ) {
    const start = pos;
    pos = decoder.next(pos);
    if (decoder.writes === WRITES_NOTHING) continue;
    writes++;
    // Plain instructions are copied in runs, up to the write.
    code.bytes(body.subarray(copied, start));
    if (decoder.writes === WRITES_STORE) {
      storePrologue(code, base, decoder.value, decoder.offset);
      if (decoder.value === V128) simd = true;
    } else bulkPrologue(code, base, markFunction);
    copied = start;
  }
  if (writes === 0) {
    out.uleb(body.length);
    out.bytes(body);
    return;
  }
  code.bytes(body.subarray(copied));
  // Declared whether used or not (engines drop unused locals); v128 only where a SIMD store needs it.
  const added = [
    [5, I32],
    [1, I64],
    [1, F32],
    [1, F64],
  ];
  if (simd) added.push([1, V128]);
  const head = vec([...declarations, ...added]);
  out.uleb(head.length + code.length);
  out.bytes(head);
  out.bytes(code.result());
}

/** Before a store (stack: address, value): traps below GUARD_END, marks the block, and puts both operands back. */
function storePrologue(w: Writer, base: number, valueType: number, offset: number): void {
  const value = base + (VALUE_SLOT[valueType] as number);
  w.op(WasmOp.localSet, value);
  w.op(WasmOp.localTee, base + ADDRESS);
  if (offset !== 0) {
    w.u8(WasmOp.i32Const);
    w.sleb(offset);
    w.u8(WasmOp.i32Add);
  }
  w.op(WasmOp.localTee, base + EFFECTIVE);
  w.u8(WasmOp.i32Const);
  w.sleb(GUARD_END);
  w.u8(WasmOp.i32LtU);
  w.bytes(IF_TRAP);
  w.op(WasmOp.localGet, base + EFFECTIVE);
  w.bytes(MARK_BLOCK);
  w.op(WasmOp.localGet, base + ADDRESS);
  w.op(WasmOp.localGet, value);
}

/** if unreachable end */
const IF_TRAP = [WasmOp.if, VOID_BLOCK, WasmOp.unreachable, WasmOp.end];
/** (address on the stack) >> BLOCK_SHIFT & MASK, then map[block] = 1 (i32.store8 with alignment 0). */
const MARK_BLOCK = [
  ...[WasmOp.i32Const, ...sleb(BLOCK_SHIFT), WasmOp.i32ShrU],
  ...[WasmOp.i32Const, ...sleb(MASK), WasmOp.i32And],
  ...[WasmOp.i32Const, 1, WasmOp.i32Store8, 0, ...uleb(MAP_BASE)],
];

/** Before memory.fill/copy/init (stack: destination, value or source, length): marks the destination range. */
function bulkPrologue(w: Writer, base: number, markFunction: number): void {
  w.op(WasmOp.localSet, base + LENGTH);
  w.op(WasmOp.localSet, base + SOURCE);
  w.op(WasmOp.localTee, base + ADDRESS);
  w.op(WasmOp.localGet, base + LENGTH);
  w.op(WasmOp.call, markFunction);
  w.op(WasmOp.localGet, base + ADDRESS);
  w.op(WasmOp.localGet, base + SOURCE);
  w.op(WasmOp.localGet, base + LENGTH);
}

/**
 * The body of (func (param $address i32) (param $length i32)): marks every block of [address, address + length),
 * trapping when the range starts below GUARD_END. A range longer than the map covers marks the whole map: it is
 * written in a memory grown past the image (whose VM is replaced, not reset), or it traps in the operation itself.
 */
function markBody(): number[] {
  const [address, length, block, last] = [0, 1, 2, 3];
  const O = WasmOp;
  const code = [
    // if (length == 0) return
    ...[O.localGet, length, O.i32Eqz, O.if, VOID_BLOCK, O.return, O.end],
    // if (address < GUARD_END) trap
    ...[O.localGet, address, O.i32Const, ...sleb(GUARD_END), O.i32LtU, O.if, VOID_BLOCK, O.unreachable, O.end],
    // block = address >> BLOCK_SHIFT
    ...[O.localGet, address, O.i32Const, BLOCK_SHIFT, O.i32ShrU, O.localSet, block],
    // last = (address + length - 1) >> BLOCK_SHIFT
    ...[O.localGet, address, O.localGet, length, O.i32Add, O.i32Const, 1, O.i32Sub],
    ...[O.i32Const, BLOCK_SHIFT, O.i32ShrU, O.localSet, last],
    // if (last < block || last - block > MASK) last = block + MASK
    ...[O.localGet, last, O.localGet, block, O.i32LtU],
    ...[O.localGet, last, O.localGet, block, O.i32Sub, O.i32Const, ...sleb(MASK), O.i32GtU, O.i32Or],
    ...[O.if, VOID_BLOCK, O.localGet, block, O.i32Const, ...sleb(MASK), O.i32Add, O.localSet, last, O.end],
    // loop: map[block & MASK] = 1
    ...[O.loop, VOID_BLOCK],
    ...[O.localGet, block, O.i32Const, ...sleb(MASK), O.i32And, O.i32Const, 1, O.i32Store8, 0, ...uleb(MAP_BASE)],
    // br_if (++block <= last)
    ...[O.localGet, block, O.i32Const, 1, O.i32Add, O.localTee, block, O.localGet, last, O.i32LeU, O.brIf, 0],
    ...[O.end, O.end],
  ];
  return [...vec([[2, I32]]), ...code];
}

/**
 * Returns the module with every memory write tracked (see the file comment), plus an export `MARK_EXPORT`. Throws a
 * WasmRewriteError for a module it cannot track completely (an unknown instruction, an imported memory, data or a
 * stack near the map).
 */
export function instrumentWrites(bytes: Uint8Array): Uint8Array<ArrayBuffer> {
  const sections = sectionsOf(bytes);
  checkLayout(sections);
  const body = (id: number) => sections.find((s) => s.id === id)?.body;
  const imports = importCounts(body(2));
  if (imports.memories > 0) {
    throw new WasmRewriteError("the module imports its memory; only a memory of its own can be tracked");
  }
  const importedFunctions = imports.functions;
  const typeBody = body(1);
  const functionBody = body(3);
  const codeBody = body(10);
  if (!typeBody || !functionBody || !codeBody) throw new WasmRewriteError("the module has no code");
  const facts: ModuleFacts = {
    params: readTypes(typeBody),
    importedFunctions,
    functionTypes: readFunctionTypes(functionBody),
  };
  const markType = facts.params.length;
  const markFunction = facts.importedFunctions + facts.functionTypes.length;

  const code = new Reader(codeBody);
  const count = code.u32();
  if (count !== facts.functionTypes.length) throw new WasmRewriteError("the code and function sections disagree");
  const bodies = new Writer(codeBody.length * 2);
  bodies.uleb(count + 1);
  for (let i = 0; i < count; i++) {
    const size = code.u32();
    const start = code.pos;
    code.skip(size);
    const type = facts.functionTypes[i] as number;
    rewriteBody(codeBody.subarray(start, start + size), facts.params[type] as number, markFunction, bodies);
  }
  const mark = markBody();
  bodies.uleb(mark.length);
  bodies.bytes(mark);

  const replaced = new Map<number, number[] | Uint8Array>([
    [1, withItem(typeBody, [FUNC_TYPE, 2, I32, I32, 0])],
    [3, withItem(functionBody, uleb(markType))],
    [10, bodies.result()],
  ]);
  // checkLayout found the export section (it holds __stack_pointer).
  replaced.set(7, withItem(body(7) as Uint8Array, exportItem(MARK_EXPORT, EXPORT_FUNC, markFunction)));
  return replaceSections(bytes, sections, replaced);
}
