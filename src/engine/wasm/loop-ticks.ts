/**
 * Pre-emption of long built-ins. QuickJS polls its interrupt handler only from its bytecode interpreter (at calls and
 * backward jumps, interrupt-poll.ts), so one built-in over a large value (`a.fill(1)` over ten million elements, a
 * search through a large string, a sort) runs to its end without a poll, and a loop of them reaches one only every
 * INTERRUPT_POLL_TICKS calls: seconds to minutes, where nothing else can stop the VM (the calling thread) or where the
 * host learns late that it computes (a VM side across a pipe).
 *
 * `tickLoops` rewrites every loop of the engine's C code, outside the functions that poll already (the interpreter),
 * so that it counts its iterations down in a global and, every LOOP_TICK_PERIOD of them, calls the host through
 * quickjs-wasi's own `host_interrupt` import with the exported global LOOP_TICK_EXPORT set to 1 meanwhile. The host
 * may then throw (GuestVm): the wasm unwinds where it stands, the VM's state is unknown, and the VM is replaced. A
 * tick costs a call into the host every LOOP_TICK_PERIOD iterations of C loops (a fraction of a millisecond apart).
 */

import {
  Decoder,
  EXPORT_GLOBAL,
  exportItem,
  FUNC_TYPE,
  I32,
  importCounts,
  MUTABLE,
  Reader,
  readExports,
  replaceSections,
  sectionsOf,
  sleb,
  uleb,
  VOID_BLOCK,
  vec,
  WasmOp,
  WasmRewriteError,
  Writer,
  withItem,
} from "./binary.ts";
import { findPollFunction } from "./interrupt-poll.ts";

/** The exported mutable i32 global that is 1 while a loop's tick calls the host, 0 otherwise. */
export const LOOP_TICK_EXPORT = "airlock_loop_tick";
/** Iterations of a function's loops between two ticks, counted from each call of the function. */
export const LOOP_TICK_PERIOD = 10_000;

/** quickjs-wasi's import that calls the host's interrupt handler, `() -> i32`. */
const HOST_INTERRUPT = { module: "env", name: "host_interrupt" };
/** quickjs-wasi's export that installs the interrupt handler: a module without it is not quickjs-wasi's engine. */
const SET_INTERRUPT_HANDLER = "qjs_set_interrupt_handler";

interface FunctionType {
  params: number[];
  results: number[];
}

/**
 * Returns the module with its loops ticking (see the file comment) and LOOP_TICK_EXPORT added; a module that is not
 * quickjs-wasi's is returned as it is. Throws a WasmRewriteError for a quickjs-wasi module that is not shaped as
 * expected (no `host_interrupt` import of type `() -> i32`, no poll function, no loops to tick), rather than run
 * without the pre-emption the documentation gives.
 */
export function tickLoops(bytes: Uint8Array): Uint8Array<ArrayBuffer> {
  const sections = sectionsOf(bytes);
  const body = (id: number) => sections.find((s) => s.id === id)?.body;
  const exportBody = body(7);
  const exported = exportBody ? readExports(exportBody) : [];
  if (!exportBody || !exported.some((e) => e.name === SET_INTERRUPT_HANDLER)) return new Uint8Array(bytes);
  if (exported.some((e) => e.name === LOOP_TICK_EXPORT)) throw new WasmRewriteError("the module's loops tick already");
  const typeBody = body(1);
  const importBody = body(2);
  const functionBody = body(3);
  const globalBody = body(6);
  const codeBody = body(10);
  if (!typeBody || !importBody || !functionBody || !globalBody || !codeBody) {
    throw new WasmRewriteError("the module has no code, imports or globals");
  }
  const types = readFunctionTypes(typeBody);
  const hostInterrupt = importedFunction(importBody, types);
  const imports = importCounts(importBody);
  const definedFunctions = new Reader(functionBody).u32();
  const definedGlobals = new Reader(globalBody).u32();
  const inTick = imports.globals + definedGlobals;
  const tick = imports.functions + definedFunctions;
  const poll = imports.functions + findPollFunction(codeBody).defined;
  const setHandler = exported.find((e) => e.name === SET_INTERRUPT_HANDLER && e.kind === 0);
  if (!setHandler) throw new WasmRewriteError(`the module exports no function ${SET_INTERRUPT_HANDLER}`);
  const handlerOffset = interruptHandlerOffset(codeBody, setHandler.index - imports.functions);
  let voidType = types.findIndex((t) => t.params.length === 0 && t.results.length === 0);
  const newType = voidType < 0;
  if (newType) voidType = types.length;

  const code = new Reader(codeBody);
  const count = code.u32();
  const functionTypes = readIndices(functionBody);
  if (functionTypes.length !== count) throw new WasmRewriteError("the code and function sections disagree");
  const out = new Writer(codeBody.length + (codeBody.length >> 3));
  out.uleb(count + 1);
  let ticking = 0;
  for (let i = 0; i < count; i++) {
    const size = code.u32();
    const start = code.pos;
    code.skip(size);
    const fn = codeBody.subarray(start, start + size);
    const params = types[functionTypes[i] as number]?.params.length ?? 0;
    const polls = callsFunction(fn, poll) || loadsAt(fn, handlerOffset);
    const rewritten = polls ? undefined : withTicks(fn, params, tick);
    if (rewritten) ticking++;
    out.uleb((rewritten ?? fn).length);
    out.bytes(rewritten ?? fn);
  }
  if (ticking === 0) throw new WasmRewriteError("the engine has no loops to tick");
  const tickBody = [
    0, // no locals
    ...[WasmOp.i32Const, 1, WasmOp.globalSet, ...uleb(inTick)],
    ...[WasmOp.call, ...uleb(hostInterrupt), WasmOp.drop],
    ...[WasmOp.i32Const, 0, WasmOp.globalSet, ...uleb(inTick), WasmOp.end],
  ];
  out.uleb(tickBody.length);
  out.bytes(tickBody);

  const replaced = new Map<number, number[] | Uint8Array>([
    [3, withItem(functionBody, uleb(voidType))],
    [6, withItem(globalBody, [I32, MUTABLE, WasmOp.i32Const, 0, WasmOp.end])],
    [7, withItem(exportBody, exportItem(LOOP_TICK_EXPORT, EXPORT_GLOBAL, inTick))],
    [10, out.result()],
  ]);
  if (newType) replaced.set(1, withItem(typeBody, [FUNC_TYPE, 0, 0]));
  return replaceSections(bytes, sections, replaced);
}

/**
 * A function body whose loops tick: a local of its own counts their iterations down from LOOP_TICK_PERIOD (set as the
 * function starts), and at zero calls `tick` and starts again; undefined when the body holds no loop. A local, not a
 * global, so that the count stays in a register: the check costs a few instructions an iteration.
 */
function withTicks(fn: Uint8Array, params: number, tick: number): Uint8Array | undefined {
  const r = new Reader(fn);
  const declarations: number[][] = [];
  let locals = 0;
  for (let groups = r.u32(); groups > 0; groups--) {
    const count = r.u32();
    const type = r.u8();
    declarations.push([...uleb(count), type]);
    locals += count;
  }
  const counter = uleb(params + locals);
  const reset = [WasmOp.i32Const, ...sleb(LOOP_TICK_PERIOD), WasmOp.localSet, ...counter];
  const check = [
    ...[WasmOp.localGet, ...counter, WasmOp.i32Const, 1, WasmOp.i32Sub, WasmOp.localTee, ...counter, WasmOp.i32Eqz],
    ...[WasmOp.if, VOID_BLOCK, WasmOp.call, ...uleb(tick), ...reset, WasmOp.end],
  ];
  const decoder = new Decoder(fn);
  let out: Writer | undefined;
  let copied = r.pos;
  for (let pos = r.pos; pos < fn.length; ) {
    const start = pos;
    pos = decoder.next(pos);
    if (fn[start] !== WasmOp.loop) continue;
    if (!out) {
      out = new Writer(fn.length + 64);
      out.bytes(vec([...declarations, [1, I32]]));
      out.bytes(reset);
    }
    out.bytes(fn.subarray(copied, pos));
    out.bytes(check);
    copied = pos;
  }
  if (!out) return undefined;
  out.bytes(fn.subarray(copied));
  return out.result();
}

/** Whether a function body calls function `index` directly. */
function callsFunction(fn: Uint8Array, index: number): boolean {
  let found = false;
  eachInstruction(fn, (op, start, decoder) => {
    if (op !== WasmOp.call || found) return;
    decoder.readLeb(start + 1);
    if (decoder.number === index) found = true;
  });
  return found;
}

/**
 * Where the runtime keeps its interrupt handler: the offset of the last `i32.store` of SET_INTERRUPT_HANDLER, which
 * stores the handler (the one before it, its argument). A function that loads it calls the handler itself (the regular
 * expression engine polls on its own count), so its loops need no tick.
 */
function interruptHandlerOffset(code: Uint8Array, index: number): number {
  const r = new Reader(code);
  const count = r.u32();
  if (index < 0 || index >= count) throw new WasmRewriteError(`${SET_INTERRUPT_HANDLER} is not defined by the module`);
  for (let i = 0; i < index; i++) r.skip(r.u32());
  const size = r.u32();
  const fn = code.subarray(r.pos, r.pos + size);
  let offset: number | undefined;
  eachInstruction(fn, (op, start, decoder) => {
    if (op !== WasmOp.i32Store) return;
    decoder.readLeb(decoder.readLeb(start + 1));
    offset = decoder.number;
  });
  if (offset === undefined) throw new WasmRewriteError(`${SET_INTERRUPT_HANDLER} stores no handler`);
  return offset;
}

/** Whether a function body loads an i32 at memory offset `offset` (from any address). */
function loadsAt(fn: Uint8Array, offset: number): boolean {
  let found = false;
  eachInstruction(fn, (op, start, decoder) => {
    if (op !== WasmOp.i32Load || found) return;
    decoder.readLeb(decoder.readLeb(start + 1));
    if (decoder.number === offset) found = true;
  });
  return found;
}

/** Calls `visit` with each instruction of a function body: its opcode, its position and a decoder for its immediates. */
function eachInstruction(fn: Uint8Array, visit: (op: number, start: number, decoder: Decoder) => void): void {
  const r = new Reader(fn);
  for (let groups = r.u32(); groups > 0; groups--) {
    r.u32();
    r.u8();
  }
  const decoder = new Decoder(fn);
  for (let pos = r.pos; pos < fn.length; ) {
    const start = pos;
    pos = decoder.next(pos);
    visit(fn[start] as number, start, decoder);
  }
}

function readIndices(body: Uint8Array): number[] {
  const r = new Reader(body);
  return Array.from({ length: r.u32() }, () => r.u32());
}

function readFunctionTypes(body: Uint8Array): FunctionType[] {
  const r = new Reader(body);
  const types: FunctionType[] = [];
  for (let i = r.u32(); i > 0; i--) {
    if (r.u8() !== FUNC_TYPE) throw new WasmRewriteError("the type section holds a type that is not a function type");
    const params = Array.from({ length: r.u32() }, () => r.u8());
    const results = Array.from({ length: r.u32() }, () => r.u8());
    types.push({ params, results });
  }
  return types;
}

/** The index of the HOST_INTERRUPT import, which must be a function of type `() -> i32`. */
function importedFunction(body: Uint8Array, types: FunctionType[]): number {
  const r = new Reader(body);
  let functions = 0;
  for (let i = r.u32(); i > 0; i--) {
    const module = r.name();
    const name = r.name();
    const kind = r.u8();
    if (kind === 0) {
      const type = types[r.u32()];
      if (module === HOST_INTERRUPT.module && name === HOST_INTERRUPT.name) {
        const returnsI32 = type?.results.length === 1 && type.results[0] === I32;
        if (type?.params.length !== 0 || !returnsI32) {
          throw new WasmRewriteError(`${module}.${name} is not a function of type () -> i32`);
        }
        return functions;
      }
      functions++;
    } else if (kind === 1) {
      r.u8();
      r.limits();
    } else if (kind === 2) r.limits();
    else if (kind === 3) r.skip(2);
    else throw new WasmRewriteError(`the module imports something of kind ${kind}`);
  }
  throw new WasmRewriteError(`the module does not import ${HOST_INTERRUPT.module}.${HOST_INTERRUPT.name}`);
}
