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

const I32 = 0x7f;
const I64 = 0x7e;
const F32 = 0x7d;
const F64 = 0x7c;
const V128 = 0x7b;

/** Value types of the stores, by opcode (0: not a store). */
const STORE_VALUE = new Uint8Array(256);
for (const [op, type] of [
  [0x36, I32],
  [0x37, I64],
  [0x38, F32],
  [0x39, F64],
  [0x3a, I32],
  [0x3b, I32],
  [0x3c, I64],
  [0x3d, I64],
  [0x3e, I64],
] as const) {
  STORE_VALUE[op] = type;
}

export class WasmRewriteError extends Error {
  override name = "WasmRewriteError";
}

/** Reads a module's sections (their LEB128 numbers decoded by the code Decoder's reader). */
export class Reader {
  pos: number;
  private readonly leb: Decoder;
  constructor(
    readonly bytes: Uint8Array,
    pos = 0,
    readonly end = bytes.length,
  ) {
    this.pos = pos;
    this.leb = new Decoder(bytes);
  }

  u8(): number {
    if (this.pos >= this.end) throw new WasmRewriteError(`unexpected end of the module at byte ${this.pos}`);
    return this.bytes[this.pos++] as number;
  }

  u32(): number {
    const next = this.leb.readLeb(this.pos);
    if (next > this.end) throw new WasmRewriteError(`unexpected end of the module at byte ${this.pos}`);
    this.pos = next;
    return this.leb.number;
  }

  /** A signed LEB128 of up to `bits` bits, as a number (exact up to 53 bits; only i32 values are used). */
  signed(bits: number): number {
    let result = 0;
    let shift = 0;
    let byte: number;
    do {
      byte = this.u8();
      result += (byte & 0x7f) * 2 ** shift;
      shift += 7;
      if (shift > bits + 7) throw new WasmRewriteError(`malformed LEB128 at byte ${this.pos}`);
    } while (byte & 0x80);
    if (byte & 0x40) result -= 2 ** shift;
    return result;
  }

  skip(count: number): void {
    if (this.pos + count > this.end) throw new WasmRewriteError(`unexpected end of the module at byte ${this.pos}`);
    this.pos += count;
  }

  name(): string {
    const length = this.u32();
    const start = this.pos;
    this.skip(length);
    return Buffer.from(this.bytes.subarray(start, start + length)).toString("utf8");
  }

  limits(): void {
    const flags = this.u8();
    this.u32();
    if (flags & 1) this.u32();
  }
}

/** A growable byte buffer for the rewritten code. */
export class Writer {
  private buffer: Uint8Array;
  length = 0;

  constructor(capacity = 1 << 16) {
    this.buffer = new Uint8Array(capacity);
  }

  private reserve(count: number): void {
    if (this.length + count <= this.buffer.length) return;
    let size = this.buffer.length * 2;
    while (size < this.length + count) size *= 2;
    const next = new Uint8Array(size);
    next.set(this.buffer.subarray(0, this.length));
    this.buffer = next;
  }

  bytes(values: ArrayLike<number>): void {
    this.reserve(values.length);
    this.buffer.set(values, this.length);
    this.length += values.length;
  }

  u8(value: number): void {
    this.reserve(1);
    this.buffer[this.length++] = value;
  }

  uleb(value: number): void {
    let rest = value;
    do {
      let byte = rest % 128;
      rest = Math.floor(rest / 128);
      if (rest !== 0) byte |= 0x80;
      this.u8(byte);
    } while (rest !== 0);
  }

  sleb(value: number): void {
    let rest = value | 0;
    for (;;) {
      const byte = rest & 0x7f;
      rest >>= 7;
      if ((rest === 0 && (byte & 0x40) === 0) || (rest === -1 && (byte & 0x40) !== 0)) {
        this.u8(byte);
        return;
      }
      this.u8(byte | 0x80);
    }
  }

  /** An instruction with one unsigned immediate (local.get, local.set, call...). */
  op(code: number, immediate: number): void {
    this.u8(code);
    this.uleb(immediate);
  }

  result(): Uint8Array {
    return this.buffer.subarray(0, this.length);
  }

  /** Empties the buffer for reuse (what `result()` returned is overwritten by later writes). */
  clear(): void {
    this.length = 0;
  }
}

const encoder = new Writer(16);

/** A number as an unsigned LEB128, as bytes (for the few encodings made outside a Writer). */
export function uleb(value: number): number[] {
  encoder.clear();
  encoder.uleb(value);
  return [...encoder.result()];
}

/** A number as a signed LEB128 (of its 32-bit value), as bytes. */
function sleb(value: number): number[] {
  encoder.clear();
  encoder.sleb(value);
  return [...encoder.result()];
}

/** How an opcode's immediates are laid out (the decoder's table). */
const NONE = 0;
const LEB = 1;
const LEB_2 = 2;
const LOAD = 3;
const STORE = 4;
const BLOCK = 5;
const BR_TABLE = 6;
const SELECT_TYPED = 7;
const MEMORY_INDEX = 8;
const BYTE = 9;
const FIXED_4 = 10;
const FIXED_8 = 11;
const PREFIX_FC = 12;
const PREFIX_FD = 13;
const UNKNOWN = 14;

const OPCODES = new Uint8Array(256).fill(UNKNOWN);
const classify = (kind: number, ...ops: number[]) => {
  for (const op of ops) OPCODES[op] = kind;
};
// unreachable, nop, else, end, return, drop, select, ref.is_null
classify(NONE, 0x00, 0x01, 0x05, 0x0b, 0x0f, 0x1a, 0x1b, 0xd1);
for (let op = 0x45; op <= 0xc4; op++) OPCODES[op] = NONE; // numeric, sign extension included
// block, loop, if
classify(BLOCK, 0x02, 0x03, 0x04);
// br, br_if, call, return_call, local.*, global.*, table.get/set, i32.const, i64.const, ref.func
classify(LEB, 0x0c, 0x0d, 0x10, 0x12, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x41, 0x42, 0xd2);
// call_indirect, return_call_indirect
classify(LEB_2, 0x11, 0x13);
for (let op = 0x28; op <= 0x35; op++) OPCODES[op] = LOAD;
for (let op = 0x36; op <= 0x3e; op++) OPCODES[op] = STORE;
classify(BR_TABLE, 0x0e);
classify(SELECT_TYPED, 0x1c);
classify(MEMORY_INDEX, 0x3f, 0x40); // memory.size, memory.grow
classify(BYTE, 0xd0); // ref.null
classify(FIXED_4, 0x43);
classify(FIXED_8, 0x44);
classify(PREFIX_FC, 0xfc);
classify(PREFIX_FD, 0xfd);

/** What an instruction writes. */
const WRITES_NOTHING = 0;
const WRITES_STORE = 1;
const WRITES_BULK = 2;

/**
 * Decodes code one instruction at a time, noting what each writes. It walks the bytes directly (no objects per
 * instruction): QuickJS has some 300,000 instructions, decoded at every process start. Unknown opcodes throw, so that
 * a module using features it cannot track is refused rather than tracked incompletely.
 */
export class Decoder {
  /** WRITES_NOTHING, WRITES_STORE or WRITES_BULK, for the instruction last decoded. */
  writes = WRITES_NOTHING;
  /** A store's value type and offset immediate. */
  value = 0;
  offset = 0;

  /** The value `readLeb` read last. */
  number = 0;

  constructor(private readonly bytes: Uint8Array) {}

  /** Reads an unsigned LEB128 at `pos` into `number`; returns the position after it. */
  readLeb(pos: number): number {
    const bytes = this.bytes;
    let result = 0;
    let shift = 0;
    let at = pos;
    for (;;) {
      const byte = bytes[at++] as number;
      result += (byte & 0x7f) * 2 ** shift;
      if ((byte & 0x80) === 0) {
        this.number = result;
        return at;
      }
      shift += 7;
      if (shift > 35) throw new WasmRewriteError(`malformed LEB128 at byte ${pos}`);
    }
  }

  /** Decodes the instruction at `at` and returns the position after it. */
  next(at: number): number {
    const bytes = this.bytes;
    const op = bytes[at] as number;
    let pos = at + 1;
    this.writes = WRITES_NOTHING;
    switch (OPCODES[op]) {
      case NONE:
        break;
      case LEB:
        pos = skipLeb(bytes, pos);
        break;
      case LEB_2:
        pos = skipLeb(bytes, skipLeb(bytes, pos));
        break;
      case LOAD:
        pos = this.memarg(pos, at);
        break;
      case STORE:
        pos = this.memarg(pos, at);
        this.writes = WRITES_STORE;
        this.value = STORE_VALUE[op] as number;
        break;
      case BLOCK: {
        const first = bytes[pos] as number;
        // Empty, a value type, or a type index (a signed LEB).
        pos = first === 0x40 || (first >= 0x6f && first <= 0x7f) ? pos + 1 : skipLeb(bytes, pos);
        break;
      }
      case BR_TABLE: {
        pos = this.readLeb(pos);
        for (let i = this.number; i >= 0; i--) pos = skipLeb(bytes, pos);
        break;
      }
      case SELECT_TYPED: {
        pos = this.readLeb(pos);
        pos += this.number;
        break;
      }
      case MEMORY_INDEX:
        if (bytes[pos] !== 0) throw new WasmRewriteError(`memory.size/grow at byte ${at} names a second memory`);
        pos++;
        break;
      case BYTE:
        pos++;
        break;
      case FIXED_4:
        pos += 4;
        break;
      case FIXED_8:
        pos += 8;
        break;
      case PREFIX_FC:
        pos = this.prefixedFC(pos, at);
        break;
      case PREFIX_FD:
        pos = this.prefixedSimd(pos, at);
        break;
      default:
        throw new WasmRewriteError(`unsupported opcode 0x${op.toString(16)} at byte ${at}`);
    }
    if (pos > bytes.length) throw new WasmRewriteError(`unexpected end of code at byte ${at}`);
    return pos;
  }

  /** A memory instruction's alignment and offset (kept in `offset`); only memory 0 is accepted. */
  private memarg(pos: number, at: number): number {
    let next = this.readLeb(pos);
    if (this.number & 0x40) {
      next = this.readLeb(next);
      if (this.number !== 0) throw new WasmRewriteError(`a memory instruction at byte ${at} names a second memory`);
    }
    next = this.readLeb(next);
    this.offset = this.number;
    return next;
  }

  private prefixedFC(pos: number, at: number): number {
    const bytes = this.bytes;
    pos = this.readLeb(pos);
    const sub = this.number;
    if (sub <= 7) return pos; // saturating truncations
    switch (sub) {
      case 8: // memory.init
        pos = skipLeb(bytes, pos);
        if (bytes[pos] !== 0) throw new WasmRewriteError(`memory.init at byte ${at} names a second memory`);
        this.writes = WRITES_BULK;
        return pos + 1;
      case 10: // memory.copy
        if (bytes[pos] !== 0 || bytes[pos + 1] !== 0) {
          throw new WasmRewriteError(`memory.copy at byte ${at} names a second memory`);
        }
        this.writes = WRITES_BULK;
        return pos + 2;
      case 11: // memory.fill
        if (bytes[pos] !== 0) throw new WasmRewriteError(`memory.fill at byte ${at} names a second memory`);
        this.writes = WRITES_BULK;
        return pos + 1;
      case 9: // data.drop
      case 13: // elem.drop
      case 15: // table.grow
      case 16: // table.size
      case 17: // table.fill
        return skipLeb(bytes, pos);
      case 12: // table.init
      case 14: // table.copy
        return skipLeb(bytes, skipLeb(bytes, pos));
      default:
        throw new WasmRewriteError(`unsupported opcode 0xfc ${sub} at byte ${at}`);
    }
  }

  private prefixedSimd(pos: number, at: number): number {
    pos = this.readLeb(pos);
    const sub = this.number;
    if (sub === 11 || (sub >= 88 && sub <= 91)) {
      // v128.store, v128.storeN_lane (a lane index follows)
      pos = this.memarg(pos, at);
      this.writes = WRITES_STORE;
      this.value = V128;
      return sub === 11 ? pos : pos + 1;
    }
    if (sub <= 10 || sub === 92 || sub === 93) return this.memarg(pos, at);
    if (sub >= 84 && sub <= 87) return this.memarg(pos, at) + 1;
    if (sub === 12 || sub === 13) return pos + 16;
    if (sub >= 21 && sub <= 34) return pos + 1;
    if (sub > 0x113) throw new WasmRewriteError(`unsupported opcode 0xfd ${sub} at byte ${at}`);
    return pos;
  }
}

function skipLeb(bytes: Uint8Array, pos: number): number {
  let at = pos;
  while ((bytes[at++] as number) & 0x80) {
    if (at - pos > 10) throw new WasmRewriteError(`malformed LEB128 at byte ${pos}`);
  }
  return at;
}

export interface Section {
  id: number;
  body: Uint8Array;
}

export function sectionsOf(bytes: Uint8Array): Section[] {
  if (bytes.length < 8 || bytes[0] !== 0 || bytes[1] !== 0x61 || bytes[2] !== 0x73 || bytes[3] !== 0x6d) {
    throw new WasmRewriteError("not a WebAssembly module");
  }
  const r = new Reader(bytes, 8);
  const sections: Section[] = [];
  while (r.pos < bytes.length) {
    const id = r.u8();
    const size = r.u32();
    const start = r.pos;
    r.skip(size);
    sections.push({ id, body: bytes.subarray(start, start + size) });
  }
  return sections;
}

function vec(items: number[][]): number[] {
  return [...uleb(items.length), ...items.flat()];
}

/** What the rewrite needs to know about the module before touching its code. */
interface ModuleFacts {
  /** Parameter counts per type index. */
  params: number[];
  importedFunctions: number;
  /** Type index of each defined function. */
  functionTypes: number[];
}

function readTypes(body: Uint8Array): number[] {
  const r = new Reader(body);
  const params: number[] = [];
  for (let i = r.u32(); i > 0; i--) {
    if (r.u8() !== 0x60) throw new WasmRewriteError("the type section holds a type that is not a function type");
    const count = r.u32();
    r.skip(count);
    r.skip(r.u32());
    params.push(count);
  }
  return params;
}

/** How many functions, memories and globals a module imports (each kind numbers its own before the defined ones). */
export function importCounts(body: Uint8Array | undefined): { functions: number; memories: number; globals: number } {
  const counts = { functions: 0, memories: 0, globals: 0 };
  if (!body) return counts;
  const r = new Reader(body);
  for (let i = r.u32(); i > 0; i--) {
    r.name();
    r.name();
    const kind = r.u8();
    if (kind === 0) {
      r.u32();
      counts.functions++;
    } else if (kind === 1) {
      r.u8();
      r.limits();
    } else if (kind === 2) {
      r.limits();
      counts.memories++;
    } else if (kind === 3) {
      r.skip(2);
      counts.globals++;
    } else {
      throw new WasmRewriteError(`the module imports something of kind ${kind}`);
    }
  }
  return counts;
}

function readFunctionTypes(body: Uint8Array): number[] {
  const r = new Reader(body);
  const types: number[] = [];
  for (let i = r.u32(); i > 0; i--) types.push(r.u32());
  return types;
}

/** The initial value of a constant i32 initializer expression. */
function constantI32(r: Reader, what: string): number {
  if (r.u8() !== 0x41) throw new WasmRewriteError(`${what} is not a constant`);
  const value = r.signed(32);
  if (r.u8() !== 0x0b) throw new WasmRewriteError(`${what} is not a constant`);
  return value >>> 0;
}

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
    if (g.u8() !== 0x0b) throw new WasmRewriteError("a global's initializer is not a single constant");
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
  w.op(0x21, value); // local.set value
  w.op(0x22, base + ADDRESS); // local.tee address
  if (offset !== 0) {
    w.u8(0x41); // i32.const offset
    w.sleb(offset);
    w.u8(0x6a); // i32.add
  }
  w.op(0x22, base + EFFECTIVE); // local.tee effective
  w.u8(0x41); // i32.const GUARD_END
  w.sleb(GUARD_END);
  w.u8(0x49); // i32.lt_u
  w.bytes(IF_TRAP);
  w.op(0x20, base + EFFECTIVE);
  w.bytes(MARK_BLOCK);
  w.op(0x20, base + ADDRESS);
  w.op(0x20, value);
}

/** if unreachable end */
const IF_TRAP = [0x04, 0x40, 0x00, 0x0b];
/** (address on the stack) >> BLOCK_SHIFT & MASK, then map[block] = 1. */
const MARK_BLOCK = [
  0x41,
  ...sleb(BLOCK_SHIFT),
  0x76,
  0x41,
  ...sleb(MASK),
  0x71,
  0x41,
  0x01,
  0x3a,
  0x00,
  ...uleb(MAP_BASE),
];

/** Before memory.fill/copy/init (stack: destination, value or source, length): marks the destination range. */
function bulkPrologue(w: Writer, base: number, markFunction: number): void {
  w.op(0x21, base + LENGTH);
  w.op(0x21, base + SOURCE);
  w.op(0x22, base + ADDRESS);
  w.op(0x20, base + LENGTH);
  w.op(0x10, markFunction); // call mark
  w.op(0x20, base + ADDRESS);
  w.op(0x20, base + SOURCE);
  w.op(0x20, base + LENGTH);
}

/**
 * The body of (func (param $address i32) (param $length i32)): marks every block of [address, address + length),
 * trapping when the range starts below GUARD_END. A range longer than the map covers marks the whole map: it is
 * written in a memory grown past the image (whose VM is replaced, not reset), or it traps in the operation itself.
 */
function markBody(): number[] {
  const [address, length, block, last] = [0, 1, 2, 3];
  const code = [
    ...[0x20, length, 0x45, 0x04, 0x40, 0x0f, 0x0b], // if (length == 0) return
    ...[0x20, address, 0x41, ...sleb(GUARD_END), 0x49, 0x04, 0x40, 0x00, 0x0b], // if (address < GUARD_END) trap
    ...[0x20, address, 0x41, BLOCK_SHIFT, 0x76, 0x21, block], // block = address >> BLOCK_SHIFT
    // last = (address + length - 1) >> BLOCK_SHIFT
    ...[0x20, address, 0x20, length, 0x6a, 0x41, 0x01, 0x6b, 0x41, BLOCK_SHIFT, 0x76, 0x21, last],
    // if (last < block || last - block > MASK) last = block + MASK
    ...[0x20, last, 0x20, block, 0x49, 0x20, last, 0x20, block, 0x6b, 0x41, ...sleb(MASK), 0x4b, 0x72],
    ...[0x04, 0x40, 0x20, block, 0x41, ...sleb(MASK), 0x6a, 0x21, last, 0x0b],
    ...[0x03, 0x40], // loop
    ...[0x20, block, 0x41, ...sleb(MASK), 0x71, 0x41, 0x01, 0x3a, 0x00, ...uleb(MAP_BASE)],
    ...[0x20, block, 0x41, 0x01, 0x6a, 0x22, block, 0x20, last, 0x4d, 0x0d, 0x00], // br_if (++block <= last)
    ...[0x0b, 0x0b],
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
    [1, withItem(typeBody, [0x60, 2, I32, I32, 0])],
    [3, withItem(functionBody, uleb(markType))],
    [10, bodies.result()],
  ]);
  // checkLayout found the export section (it holds __stack_pointer).
  replaced.set(7, withItem(body(7) as Uint8Array, exportItem(MARK_EXPORT, 0x00, markFunction)));
  return replaceSections(bytes, sections, replaced);
}

/** A vector section's body (types, functions, globals, exports...) with one more item at its end. */
export function withItem(section: Uint8Array, item: number[]): number[] {
  const r = new Reader(section);
  const items = r.u32();
  return [...uleb(items + 1), ...section.subarray(r.pos), ...item];
}

/** An export section's item: `name` exports the item of `kind` (0 function, 3 global) at `index`. */
export function exportItem(name: string, kind: number, index: number): number[] {
  return [...uleb(name.length), ...Buffer.from(name), kind, ...uleb(index)];
}

/** The module with the bodies of some of its (non-custom) sections replaced, by section id. */
export function replaceSections(
  bytes: Uint8Array,
  sections: Section[],
  replaced: ReadonlyMap<number, number[] | Uint8Array>,
): Uint8Array<ArrayBuffer> {
  const parts: Uint8Array[] = [bytes.subarray(0, 8)];
  for (const section of sections) {
    const content = replaced.get(section.id);
    parts.push(
      content && section.id !== 0 ? sectionBytes(section.id, content) : sectionBytes(section.id, section.body),
    );
  }
  const out = Buffer.concat(parts);
  return new Uint8Array(out.buffer.slice(out.byteOffset, out.byteOffset + out.byteLength)) as Uint8Array<ArrayBuffer>;
}

function sectionBytes(id: number, content: number[] | Uint8Array): Uint8Array {
  const head = Uint8Array.from([id, ...uleb(content.length)]);
  return Buffer.concat([head, content instanceof Uint8Array ? content : Uint8Array.from(content)]);
}
