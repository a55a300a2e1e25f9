/**
 * The rewrite that makes QuickJS-NG's out-of-memory error catchable (catchable-oom.ts): a script can catch a refused
 * allocation and go on, never getting past its heap cap; interrupts stay uncatchable; and the engine counts its own
 * out-of-memory errors, so that a host can tell them from a script's `throw new InternalError("out of memory")`.
 */
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { describe, expect, it } from "vitest";
import wabtInit from "wabt";
import { GuestVm } from "../dist/engine/vm.js";
import { catchableOutOfMemory, OUT_OF_MEMORY_EXPORT } from "../dist/engine/wasm/catchable-oom.js";
import { loadQuickJSWasm, WasmRewriteError } from "../dist/index.js";

const LIMIT = 8 * 1024 * 1024;

async function bootVm(module: WebAssembly.Module) {
  const { vm } = await GuestVm.boot({ module, maxStackSize: 256 * 1024 });
  vm.setMemoryLimit(LIMIT);
  return vm;
}

function evaluate(vm: GuestVm, code: string): unknown {
  const handle = vm.qjs.evalCode(code);
  try {
    return vm.qjs.dump(handle);
  } finally {
    handle.dispose();
  }
}

describe("catchable out-of-memory errors", () => {
  it("lets a script catch a refused allocation, go on, and never pass its cap", async () => {
    for (const module of [loadQuickJSWasm(), loadQuickJSWasm(undefined, { trackWrites: false })]) {
      const vm = await bootVm(module);
      const before = vm.outOfMemoryCount() as number;
      const caught = evaluate(
        vm,
        `(() => {
          const caught = [];
          for (let round = 0; round < 3; round++) {
            const kept = [];
            try { for (;;) kept.push("x".repeat(1 << 16) + kept.length); }
            catch (error) { caught.push([error instanceof InternalError, error.message, kept.length]); }
          }
          return caught;
        })()`,
      ) as [boolean, string, number][];
      expect(caught.map(([isInternal, message]) => [isInternal, message])).toEqual(
        Array(3).fill([true, "out of memory"]),
      );
      // Each round held at most the cap: 64 KiB strings, so fewer than LIMIT / 64 KiB of them.
      for (const [, , kept] of caught) expect(kept).toBeLessThan(LIMIT / (1 << 16));
      expect(vm.allocatedBytes()).toBeLessThanOrEqual(LIMIT);
      expect(vm.outOfMemoryCount()).toBe(before + 3);
      // A script that throws its own InternalError("out of memory") is not counted.
      expect(evaluate(vm, `try { throw new InternalError("out of memory"); } catch (e) { "faked" }`)).toBe("faked");
      expect(vm.outOfMemoryCount()).toBe(before + 3);
      vm.dispose();
    }
  });

  it("keeps interrupts uncatchable", async () => {
    const vm = await bootVm(loadQuickJSWasm());
    let polls = 0;
    vm.interrupt = () => ++polls > 2;
    expect(() => evaluate(vm, "for (;;) { try { for (;;) {} } catch {} }")).toThrow(/interrupted/);
    vm.dispose();
  });

  it("returns a module that is not QuickJS's as it is, and refuses a QuickJS module of another shape", async () => {
    const wabt = await wabtInit();
    const assemble = (source: string) => {
      const parsed = wabt.parseWat("m.wat", source, {});
      const bytes = parsed.toBinary({}).buffer;
      parsed.destroy();
      return bytes;
    };
    const plain = assemble('(module (memory 1) (func (export "f")))');
    expect(Buffer.from(catchableOutOfMemory(plain)).equals(Buffer.from(plain))).toBe(true);
    // A copy, also of a Buffer (whose slice() shares its bytes): what is returned never changes the caller's bytes.
    const given = Buffer.from(plain);
    const returned = catchableOutOfMemory(given);
    returned[0] = 0xff;
    expect(given.equals(Buffer.from(plain))).toBe(true);
    const otherShape = assemble(`(module
      (global (mut i32) (i32.const 0))
      (func $internal (param i32 i32 i32) (result i64) (i64.const 0))
      (func $reset (param i32))
      (func (export "JS_ThrowOutOfMemory") (param i32) (result i64) (i64.const 6))
      (export "JS_ThrowInternalError" (func $internal))
      (export "JS_ResetUncatchableError" (func $reset)))`);
    expect(() => catchableOutOfMemory(otherShape)).toThrow(WasmRewriteError);
    expect(() => catchableOutOfMemory(otherShape)).toThrow(
      "JS_ThrowOutOfMemory calls JS_ThrowInternalError 0 times, not once",
    );
    const names = WebAssembly.Module.exports(loadQuickJSWasm()).map((e) => e.name);
    expect(names).toContain(OUT_OF_MEMORY_EXPORT);
    expect(() => catchableOutOfMemory(new Uint8Array(catchableOutOfMemory(readInstalled())))).toThrow(
      "the module's out-of-memory errors are catchable already",
    );
  });
});

function readInstalled(): Uint8Array {
  return readFileSync(createRequire(import.meta.url).resolve("quickjs-wasi/quickjs.wasm"));
}
