/**
 * The rewrite that makes QuickJS poll its interrupt handler every INTERRUPT_POLL_TICKS ticks instead of 10,000
 * (interrupt-poll.ts): a loop of slow built-ins, which nothing pre-empts on the calling thread, reaches its deadline
 * check ten times sooner. Polls are counted with quickjs-wasi's own interrupt handler, so the test does not time
 * anything.
 */
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { QuickJS } from "quickjs-wasi";
import { describe, expect, it } from "vitest";
import { INTERRUPT_POLL_TICKS, pollInterruptsOften } from "../dist/engine/wasm/interrupt-poll.js";
import { InlineCodemodeSandbox, loadQuickJSWasm, WasmRewriteError } from "../dist/index.js";

const installed = readFileSync(createRequire(import.meta.url).resolve("quickjs-wasi/quickjs.wasm"));
/** A loop of two ticks an iteration (its backward jump and its call), 200,000 ticks in all. */
const LOOP = "let x = 0; for (let i = 0; i < 100000; i++) x = Math.max(x, i);";

async function pollsOf(wasm: Uint8Array | WebAssembly.Module): Promise<number> {
  let polls = 0;
  const vm = await QuickJS.create({
    wasm,
    interruptHandler: () => {
      polls++;
      return false;
    },
  });
  try {
    vm.evalCode(LOOP).dispose();
    return polls;
  } finally {
    vm.dispose();
  }
}

describe("interrupt polls", () => {
  it(`polls every ${INTERRUPT_POLL_TICKS} ticks instead of QuickJS's 10,000`, async () => {
    const before = await pollsOf(installed);
    const after = await pollsOf(pollInterruptsOften(installed));
    // The loop's ticks do not depend on the rewrite: the polls grow by the ratio of the two periods, give or take the
    // rounding of each count to whole periods.
    const ratio = 10_000 / INTERRUPT_POLL_TICKS;
    expect(before).toBeGreaterThan(10);
    expect(Math.abs(after - before * ratio)).toBeLessThanOrEqual(ratio);
    // The module every sandbox loads (rewritten, tracked or not) polls the same way.
    expect(await pollsOf(loadQuickJSWasm())).toBe(after);
    expect(await pollsOf(loadQuickJSWasm(undefined, { trackWrites: false }))).toBe(after);
  });

  it("rewrites a copy, returns a module that is not quickjs-wasi's as it is, and refuses an unknown poll", () => {
    const copy = Uint8Array.from(installed);
    pollInterruptsOften(copy);
    expect(Buffer.compare(copy, installed)).toBe(0);

    const other = new Uint8Array([0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00]);
    expect([...pollInterruptsOften(other)]).toEqual([...other]);

    // The counter's reset changed to another value: the poll is no longer the one this rewrite knows.
    const reset = Buffer.from([0x41, 0x90, 0xce, 0x00, 0x36]);
    const at = installed.indexOf(reset);
    expect(at).toBeGreaterThan(0);
    const changed = Buffer.from(installed);
    changed[at + 1] = 0x91;
    expect(() => pollInterruptsOften(changed)).toThrow(WasmRewriteError);
    expect(() => pollInterruptsOften(changed)).toThrow(/one interrupt poll function in the engine, found 0/);
  });

  it("stops an inline loop of slow built-ins at its deadline, and the sandbox goes on", async () => {
    const sandbox = new InlineCodemodeSandbox({ timeoutMs: 100 });
    // Its VM booted first: a first execution of a new sandbox on a loaded machine may spend its 100 ms booting.
    await sandbox.warm();
    // Each fill is one tick of about a millisecond: at QuickJS's own period the first poll would come after some
    // 5,000 fills; at INTERRUPT_POLL_TICKS, after some 500.
    const result = await sandbox.execute("const a = new Array(1e5); for (;;) a.fill(1);");
    expect(result).toMatchObject({ ok: false, error: { kind: "timeout" } });
    // A new VM replaces the one the fills grew, which on a loaded machine may take more than the 100 ms.
    expect(await sandbox.execute("return 1 + 1", { timeoutMs: 10_000 })).toMatchObject({ ok: true, value: 2 });
  });
});
