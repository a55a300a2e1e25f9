/**
 * The rewrite that makes the engine's built-ins pre-emptible (loop-ticks.ts): every loop of QuickJS's C code outside
 * the functions that poll already calls the host every LOOP_TICK_PERIOD iterations, with LOOP_TICK_EXPORT set to 1.
 * Ticks are counted with quickjs-wasi's own interrupt handler, so the test does not time anything; the pre-emption
 * itself is tested in every launcher by isolation.test.ts.
 */
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { QuickJS } from "quickjs-wasi";
import { describe, expect, it } from "vitest";
import { LOOP_TICK_EXPORT, LOOP_TICK_PERIOD, tickLoops } from "../dist/engine/wasm/loop-ticks.js";
import { loadQuickJSWasm, WasmRewriteError } from "../dist/index.js";

const installed = readFileSync(createRequire(import.meta.url).resolve("quickjs-wasi/quickjs.wasm"));

/** Runs `code` on a VM of `wasm`; counts the host's interrupt calls that were ticks and those that were polls. */
async function callsOf(wasm: Uint8Array | WebAssembly.Module, code: string): Promise<{ ticks: number; polls: number }> {
  const counts = { ticks: 0, polls: 0 };
  const vm: QuickJS = await QuickJS.create({
    wasm,
    interruptHandler: () => {
      const tick = (vm as unknown as { exports: Record<string, WebAssembly.Global | undefined> }).exports[
        LOOP_TICK_EXPORT
      ];
      if (tick?.value === 1) counts.ticks++;
      else counts.polls++;
      return false;
    },
  });
  try {
    vm.evalCode(code).dispose();
    return counts;
  } finally {
    vm.dispose();
  }
}

describe("loop ticks", () => {
  it("ticks inside a built-in every LOOP_TICK_PERIOD iterations of its loop, and not in the interpreter", async () => {
    const elements = 2_000_000;
    // One call of fill: the interpreter polls only around it, the built-in's loop ticks inside it.
    const fill = await callsOf(tickLoops(installed), `new Array(${elements}).fill(1)`);
    expect(fill.ticks).toBeGreaterThanOrEqual(Math.floor(elements / LOOP_TICK_PERIOD));
    expect(fill.ticks).toBeLessThan((4 * elements) / LOOP_TICK_PERIOD);
    expect((await callsOf(installed, `new Array(${elements}).fill(1)`)).ticks).toBe(0);
    // A loop of the script's own is the interpreter's: it polls, and ticks (almost) never.
    const loop = await callsOf(tickLoops(installed), "let x = 0; for (let i = 0; i < 2e6; i++) x += i;");
    expect(loop.polls).toBeGreaterThan(100);
    expect(loop.ticks).toBeLessThan(loop.polls / 100);
    // The module every sandbox loads ticks the same way.
    expect((await callsOf(loadQuickJSWasm(), `new Array(${elements}).fill(1)`)).ticks).toBe(fill.ticks);
  });

  it("rewrites a copy, returns a module that is not quickjs-wasi's as it is, and refuses one that ticks already", () => {
    const copy = Uint8Array.from(installed);
    const ticked = tickLoops(copy);
    expect(Buffer.compare(copy, installed)).toBe(0);
    expect(ticked.length).toBeGreaterThan(installed.length);
    const other = new Uint8Array([0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00]);
    expect([...tickLoops(other)]).toEqual([...other]);
    expect(() => tickLoops(ticked)).toThrow(WasmRewriteError);
    expect(() => tickLoops(ticked)).toThrow(/tick already/);
  });
});
