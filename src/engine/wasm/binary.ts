/**
 * Reading and writing WebAssembly binaries, as much as the rewriters need (write-tracking.ts, catchable-oom.ts,
 * loop-ticks.ts, interrupt-poll.ts): sections, LEB128 numbers, value types, the opcodes they emit, a decoder that
 * walks code one instruction at a time and notes what each writes, and the editing of vector sections.
 */

export const I32 = 0x7f;
export const I64 = 0x7e;
export const F32 = 0x7d;
export const F64 = 0x7c;
export const V128 = 0x7b;
/** The block type of a block that takes and leaves nothing, and the form byte of a function type. */
export const VOID_BLOCK = 0x40;
export const FUNC_TYPE = 0x60;
/** Export kinds, and the flag of a mutable global. */
export const EXPORT_FUNC = 0x00;
export const EXPORT_GLOBAL = 0x03;
export const MUTABLE = 0x01;

/** The opcodes the rewriters emit or look for, named as in the text format. */
export const WasmOp = {
  unreachable: 0x00,
  loop: 0x03,
  if: 0x04,
  end: 0x0b,
  brIf: 0x0d,
  return: 0x0f,
  call: 0x10,
  drop: 0x1a,
  localGet: 0x20,
  localSet: 0x21,
  localTee: 0x22,
  globalGet: 0x23,
  globalSet: 0x24,
  i32Load: 0x28,
  i32Store: 0x36,
  i32Store8: 0x3a,
  i32Const: 0x41,
  i32Eqz: 0x45,
  i32LtU: 0x49,
  i32GtU: 0x4b,
  i32LeS: 0x4c,
  i32LeU: 0x4d,
  i32Add: 0x6a,
  i32Sub: 0x6b,
  i32And: 0x71,
  i32Or: 0x72,
  i32ShrU: 0x76,
} as const;

/** Value types of the stores, by opcode (0: not a store). */
export const STORE_VALUE = new Uint8Array(256);
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
    return new TextDecoder().decode(this.bytes.subarray(start, start + length));
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
export function sleb(value: number): number[] {
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
export const WRITES_NOTHING = 0;
export const WRITES_STORE = 1;
export const WRITES_BULK = 2;

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

export function skipLeb(bytes: Uint8Array, pos: number): number {
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

export function vec(items: number[][]): number[] {
  return [...uleb(items.length), ...items.flat()];
}

/** What the rewrite needs to know about the module before touching its code. */
export interface ModuleFacts {
  /** Parameter counts per type index. */
  params: number[];
  importedFunctions: number;
  /** Type index of each defined function. */
  functionTypes: number[];
}

export function readTypes(body: Uint8Array): number[] {
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

export function readFunctionTypes(body: Uint8Array): number[] {
  const r = new Reader(body);
  const types: number[] = [];
  for (let i = r.u32(); i > 0; i--) types.push(r.u32());
  return types;
}

/** The initial value of a constant i32 initializer expression. */
export function constantI32(r: Reader, what: string): number {
  if (r.u8() !== 0x41) throw new WasmRewriteError(`${what} is not a constant`);
  const value = r.signed(32);
  if (r.u8() !== 0x0b) throw new WasmRewriteError(`${what} is not a constant`);
  return value >>> 0;
}

/** A vector section's body (types, functions, globals, exports...) with one more item at its end. */
export function withItem(section: Uint8Array, item: number[]): number[] {
  const r = new Reader(section);
  const items = r.u32();
  return [...uleb(items + 1), ...section.subarray(r.pos), ...item];
}

/** The items of an export section: each name, its kind (0 function, 3 global) and index. */
export function readExports(body: Uint8Array): { name: string; kind: number; index: number }[] {
  const r = new Reader(body);
  return Array.from({ length: r.u32() }, () => ({ name: r.name(), kind: r.u8(), index: r.u32() }));
}

/** An export section's item: `name` exports the item of `kind` (0 function, 3 global) at `index`. */
export function exportItem(name: string, kind: number, index: number): number[] {
  return [...uleb(name.length), ...new TextEncoder().encode(name), kind, ...uleb(index)];
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
  return concatBytes(parts);
}

function sectionBytes(id: number, content: number[] | Uint8Array): Uint8Array {
  const head = Uint8Array.from([id, ...uleb(content.length)]);
  return concatBytes([head, content instanceof Uint8Array ? content : Uint8Array.from(content)]);
}

function concatBytes(parts: Uint8Array[]): Uint8Array<ArrayBuffer> {
  const out = new Uint8Array(parts.reduce((n, part) => n + part.byteLength, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.byteLength;
  }
  return out;
}
