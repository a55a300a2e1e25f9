/**
 * An allocation past the heap cap fails inside the script as a catchable `InternalError: out of memory`.
 *
 * QuickJS-NG (0.18, in quickjs-wasi 3.7.0) marks that error uncatchable: `JS_ThrowOutOfMemory` throws through
 * `JS_ThrowInternalError`, which sets the flag it also sets for interrupts. A script could then not recover from a
 * refused allocation, although the cap is a hard ceiling either way (quickjs-wasi refuses the allocation itself, and
 * only the error object may use a small reserve below the cap). `catchableOutOfMemory` rewrites `JS_ThrowOutOfMemory`
 * so that after throwing it clears that flag again (`JS_ResetUncatchableError`, on the exception just thrown), and
 * counts its errors in an exported global: interrupts stay uncatchable, and a host can tell a refused allocation
 * from a script that throws its own `InternalError("out of memory")`.
 */
import {
  Decoder,
  EXPORT_GLOBAL,
  exportItem,
  I32,
  importCounts,
  MUTABLE,
  Reader,
  replaceSections,
  sectionsOf,
  WasmOp,
  WasmRewriteError,
  Writer,
  withItem,
} from "./binary.ts";

/** The exported mutable i32 global counting the out-of-memory errors the engine threw since it was last zeroed. */
export const OUT_OF_MEMORY_EXPORT = "airlock_out_of_memory_errors";

const THROW_OUT_OF_MEMORY = "JS_ThrowOutOfMemory";
const THROW_INTERNAL_ERROR = "JS_ThrowInternalError";
const RESET_UNCATCHABLE = "JS_ResetUncatchableError";

/**
 * Returns the module with `JS_ThrowOutOfMemory` rewritten (see the file comment) and `OUT_OF_MEMORY_EXPORT` added; a
 * module that exports no `JS_ThrowOutOfMemory` is not QuickJS-NG's and is returned as it is. Throws a
 * WasmRewriteError for a QuickJS module that is not shaped as expected (a function missing, or the call to rewrite not
 * found exactly once), rather than running with errors the documentation says a script can catch.
 */
export function catchableOutOfMemory(bytes: Uint8Array): Uint8Array<ArrayBuffer> {
  const sections = sectionsOf(bytes);
  const body = (id: number) => sections.find((s) => s.id === id)?.body;
  const exportBody = body(7);
  const exported = exportBody ? exportedFunctions(exportBody) : new Map<string, number>();
  // A copy, as for a rewritten module: a Buffer's slice() would share the caller's bytes.
  if (!exported.has(THROW_OUT_OF_MEMORY)) return new Uint8Array(bytes);
  const codeBody = body(10);
  const globalBody = body(6);
  if (!exportBody || !codeBody || !globalBody) throw new WasmRewriteError("the module has no code or globals");
  if (exported.has(OUT_OF_MEMORY_EXPORT))
    throw new WasmRewriteError("the module's out-of-memory errors are catchable already");
  const indexOf = (name: string) => {
    const index = exported.get(name);
    if (index === undefined) throw new WasmRewriteError(`the module exports no ${name}`);
    return index;
  };
  const throwOutOfMemory = indexOf(THROW_OUT_OF_MEMORY);
  const throwInternalError = indexOf(THROW_INTERNAL_ERROR);
  const resetUncatchable = indexOf(RESET_UNCATCHABLE);
  const imports = importCounts(body(2));
  const counter = imports.globals + new Reader(globalBody).u32();
  const defined = throwOutOfMemory - imports.functions;
  if (defined < 0) throw new WasmRewriteError(`${THROW_OUT_OF_MEMORY} is imported, not defined by the module`);

  const code = new Reader(codeBody);
  const count = code.u32();
  const out = new Writer(codeBody.length + 64);
  out.uleb(count);
  for (let i = 0; i < count; i++) {
    const start = code.pos;
    const size = code.u32();
    const end = code.pos + size;
    code.skip(size);
    if (i !== defined) out.bytes(codeBody.subarray(start, end));
    else {
      const patched = patchBody(codeBody.subarray(end - size, end), throwInternalError, resetUncatchable, counter);
      out.uleb(patched.length);
      out.bytes(patched);
    }
  }
  const replaced = new Map<number, number[] | Uint8Array>([
    [6, withItem(globalBody, [I32, MUTABLE, WasmOp.i32Const, 0, WasmOp.end])],
    [7, withItem(exportBody, exportItem(OUT_OF_MEMORY_EXPORT, EXPORT_GLOBAL, counter))],
    [10, out.result()],
  ]);
  return replaceSections(bytes, sections, replaced);
}

/**
 * After `call JS_ThrowInternalError; drop` (its one call there), adds `JS_ResetUncatchableError(ctx)` and
 * `counter += 1`. The function's first parameter is the context.
 */
function patchBody(
  body: Uint8Array,
  throwInternalError: number,
  resetUncatchable: number,
  counter: number,
): Uint8Array {
  const r = new Reader(body);
  for (let i = r.u32(); i > 0; i--) {
    r.u32();
    r.u8();
  }
  const decoder = new Decoder(body);
  let insertAt = -1;
  let found = 0;
  for (let pos = r.pos; pos < body.length; ) {
    const start = pos;
    pos = decoder.next(pos);
    if (body[start] !== WasmOp.call) continue;
    decoder.readLeb(start + 1);
    if (decoder.number !== throwInternalError) continue;
    found++;
    if (body[pos] !== WasmOp.drop) throw new WasmRewriteError(`${THROW_OUT_OF_MEMORY} uses the error it throws`);
    insertAt = pos + 1;
  }
  if (found !== 1) {
    throw new WasmRewriteError(`${THROW_OUT_OF_MEMORY} calls ${THROW_INTERNAL_ERROR} ${found} times, not once`);
  }
  const added = new Writer(32);
  added.op(WasmOp.localGet, 0);
  added.op(WasmOp.call, resetUncatchable);
  added.op(WasmOp.globalGet, counter);
  added.u8(WasmOp.i32Const);
  added.sleb(1);
  added.u8(WasmOp.i32Add);
  added.op(WasmOp.globalSet, counter);
  const patched = new Uint8Array(body.length + added.length);
  patched.set(body.subarray(0, insertAt));
  patched.set(added.result(), insertAt);
  patched.set(body.subarray(insertAt), insertAt + added.length);
  return patched;
}

function exportedFunctions(body: Uint8Array): Map<string, number> {
  const r = new Reader(body);
  const functions = new Map<string, number>();
  for (let i = r.u32(); i > 0; i--) {
    const name = r.name();
    const kind = r.u8();
    const index = r.u32();
    if (kind === 0) functions.set(name, index);
    // Names of other kinds matter only to refuse a module patched already.
    else if (name === OUT_OF_MEMORY_EXPORT) functions.set(name, -1);
  }
  return functions;
}
