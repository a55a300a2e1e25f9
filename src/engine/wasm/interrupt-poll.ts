/**
 * QuickJS polls its interrupt handler (deadlines, stops, the CPU limit) once every `JS_INTERRUPT_COUNTER_INIT` of its
 * ticks (function calls and backward jumps), 10,000 in QuickJS-NG. A tick may be a built-in over a large value
 * (`a.fill(1)` over a million elements, `s.lastIndexOf("b")` over a mebibyte), so that a loop of them polls only every
 * few thousand such calls: seconds to minutes past a deadline, where nothing can pre-empt the VM (the inline
 * sandbox). `pollInterruptsOften` rewrites the counter's reset in the engine's poll function to
 * INTERRUPT_POLL_TICKS: ten times as often, which costs nothing measurable (a poll is a call into the host every few
 * microseconds of a tight loop), where a hundred times as often cost 5-50% of compute-bound scripts.
 */
import { Decoder, Reader, readExports, sectionsOf, WasmOp, WasmRewriteError } from "./binary.ts";

/** Ticks between two interrupt polls of the rewritten engine (QuickJS-NG's own: 10,000). */
export const INTERRUPT_POLL_TICKS = 1_000;

/** QuickJS-NG's `JS_INTERRUPT_COUNTER_INIT`: the ticks between two polls of a module not rewritten. */
export const QUICKJS_POLL_TICKS = 10_000;

/** One decoded instruction: its opcode, its first immediate (a local, a constant, a memory offset) and its bytes. */
interface Instruction {
  op: number;
  /** A local's index, a constant's value, or a memory access's offset. */
  immediate: number;
  start: number;
  end: number;
}

/** quickjs-wasi's export that installs the interrupt handler: a module without it is not quickjs-wasi's engine. */
const SET_INTERRUPT_HANDLER = "qjs_set_interrupt_handler";

/**
 * Returns the module with its interrupt counter reset to INTERRUPT_POLL_TICKS instead of 10,000; a module that is not
 * quickjs-wasi's (no SET_INTERRUPT_HANDLER export) is returned as it is. A quickjs-wasi module without QuickJS-NG's
 * poll function (see `pollResetSite`) is refused with a WasmRewriteError, rather than run with a bound the
 * documentation does not give. The counter's reset is rewritten in place (the same three bytes), so nothing else in
 * the module moves.
 */
export function pollInterruptsOften(bytes: Uint8Array): Uint8Array<ArrayBuffer> {
  const sections = sectionsOf(bytes);
  const exports = sections.find((s) => s.id === 7)?.body;
  if (!exports || !readExports(exports).some((e) => e.name === SET_INTERRUPT_HANDLER)) return new Uint8Array(bytes);
  const code = sections.find((s) => s.id === 10)?.body;
  if (!code) throw new WasmRewriteError("the module has no code");
  const poll = findPollFunction(code);
  // A copy: a Buffer's slice() would share the caller's bytes.
  const out = new Uint8Array(bytes);
  out.set(paddedSleb3(INTERRUPT_POLL_TICKS), code.byteOffset - bytes.byteOffset + poll.site);
  return out;
}

/**
 * QuickJS-NG's poll function in a code section: its index among the defined functions, and the position (in `code`)
 * of its counter's reset. Throws a WasmRewriteError unless there is exactly one.
 */
export function findPollFunction(code: Uint8Array): { defined: number; site: number } {
  const found: { defined: number; site: number }[] = [];
  const r = new Reader(code);
  const count = r.u32();
  for (let i = 0; i < count; i++) {
    const size = r.u32();
    const end = r.pos + size;
    const site = pollResetSite(code, r.pos, end);
    if (site !== undefined) found.push({ defined: i, site });
    r.pos = end;
  }
  if (found.length !== 1) {
    throw new WasmRewriteError(`expected one interrupt poll function in the engine, found ${found.length}`);
  }
  return found[0] as { defined: number; site: number };
}

/**
 * In a function body (`start`..`end`), the position of the 3-byte constant 10,000 that resets the interrupt counter
 * (or INTERRUPT_POLL_TICKS, once rewritten),
 * when the function is QuickJS-NG's poll:
 *   counter = ctx->counter; ctx->counter = counter - 1; if (counter <= 1) { ctx->counter = 10000; ...handler... }
 * with the counter at one offset of the context (the first parameter), reset exactly once.
 */
function pollResetSite(code: Uint8Array, start: number, end: number): number | undefined {
  const r = new Reader(code, start, end);
  for (let groups = r.u32(); groups > 0; groups--) {
    r.u32();
    r.u8();
  }
  const decoder = new Decoder(code);
  const head: Instruction[] = [];
  const resets: number[] = [];
  let previous: Instruction | undefined;
  let beforePrevious: Instruction | undefined;
  for (let pos = r.pos; pos < end; ) {
    const instruction = decode(code, decoder, pos);
    pos = instruction.end;
    if (head.length < 11) {
      head.push(instruction);
      // The function's opening decides: anything else is not the poll, and its body need not be read further.
      if (head.length === 11 && !isPollOpening(head)) return undefined;
    }
    if (
      instruction.op === WasmOp.i32Store &&
      previous?.op === WasmOp.i32Const &&
      (previous.immediate === QUICKJS_POLL_TICKS || previous.immediate === INTERRUPT_POLL_TICKS) &&
      beforePrevious?.op === WasmOp.localGet &&
      beforePrevious.immediate === 0 &&
      instruction.immediate === head[2]?.immediate
    ) {
      if (previous.end - previous.start !== 4)
        throw new WasmRewriteError("the interrupt counter's reset is not 3 bytes");
      resets.push(previous.start + 1);
    }
    beforePrevious = previous;
    previous = instruction;
  }
  if (head.length < 11) return undefined;
  return resets.length === 1 ? resets[0] : undefined;
}

/** `local.get 0; local.get 0; i32.load X; local.tee L; i32.const 1; i32.sub; i32.store X; local.get L; i32.const 1;
 * i32.le_s; if` */
function isPollOpening(head: Instruction[]): boolean {
  const [a, b, load, tee, one, sub, store, get, one2, le, branch] = head as [
    Instruction,
    Instruction,
    Instruction,
    Instruction,
    Instruction,
    Instruction,
    Instruction,
    Instruction,
    Instruction,
    Instruction,
    Instruction,
  ];
  return (
    a.op === WasmOp.localGet &&
    a.immediate === 0 &&
    b.op === WasmOp.localGet &&
    b.immediate === 0 &&
    load.op === WasmOp.i32Load &&
    tee.op === WasmOp.localTee &&
    one.op === WasmOp.i32Const &&
    one.immediate === 1 &&
    sub.op === WasmOp.i32Sub &&
    store.op === WasmOp.i32Store &&
    store.immediate === load.immediate &&
    get.op === WasmOp.localGet &&
    get.immediate === tee.immediate &&
    one2.op === WasmOp.i32Const &&
    one2.immediate === 1 &&
    le.op === WasmOp.i32LeS &&
    branch.op === WasmOp.if
  );
}

function decode(code: Uint8Array, decoder: Decoder, start: number): Instruction {
  const op = code[start] as number;
  const end = decoder.next(start);
  let immediate = Number.NaN;
  if (op === WasmOp.localGet || op === WasmOp.localTee) {
    decoder.readLeb(start + 1);
    immediate = decoder.number;
  } else if (op === WasmOp.i32Const) {
    immediate = new Reader(code, start + 1, end).signed(32);
  } else if (op === WasmOp.i32Load || op === WasmOp.i32Store) {
    // The alignment, then the offset.
    decoder.readLeb(decoder.readLeb(start + 1));
    immediate = decoder.number;
  }
  return { op, immediate, start, end };
}

/** A positive number below 2^20 as a signed LEB128 padded to 3 bytes. */
function paddedSleb3(value: number): number[] {
  return [0x80 | (value & 0x7f), 0x80 | ((value >> 7) & 0x7f), (value >> 14) & 0x3f];
}
