/**
 * The memory-image reset reaches into quickjs-wasi internals (pinned version), so it is soaked here: after hostile
 * executions of many kinds, a reset VM must be byte-identical to its image (the post-prelude one, or the one its runner
 * captured after `configure`; the whole linear memory) and behave exactly like a fresh VM. Both resets are soaked:
 * restoring the pages the instrumented module marked as written, and restoring the whole image (a module that is not
 * instrumented, as a caller may pass one).
 */
import { describe, expect, it } from "vitest";
import { type RunResult, runConfiguration, type VmEvent } from "../dist/engine/protocol.js";
import { VmRunner } from "../dist/engine/runner.js";
import { GuestVm, type VmImage } from "../dist/engine/vm.js";
import { loadQuickJSWasm } from "../dist/engine/wasm/load.js";

/** QuickJS's module as published, without write tracking: every reset restores the whole image. */
const untracked = loadQuickJSWasm(undefined, { trackWrites: false });

/** The runner's private pool of VMs (vm-pool.ts), read by this test only. */
interface RunnerInternals {
  idle: GuestVm[];
  recycling: Map<GuestVm, unknown>;
  image: VmImage;
}

const hostile = [
  "return 1",
  "globalThis.leak = 'x'.repeat(1000); Object.defineProperty(globalThis, 'pinned', { value: 1 });",
  "const a = []; while (true) a.push('y'.repeat(100) + a.length);",
  "while (true) {}",
  "while (true) await null;",
  "await new Promise(() => {});",
  "function r() { return r(); } r();",
  "let o = {}; for (let i = 0; i < 500; i++) o = { o }; return JSON.stringify(o).length;",
  "try { null.x } catch (e) { throw new RangeError(e.message); }",
  "for (let i = 0; i < 50; i++) text('line ' + i); store('k', { i: 1 }); return load('k');",
  "const p = tools.slow(1); return 'did not wait';",
  "await tools.slow(2); exit(); text('after');",
  "const m = new Map(); for (let i = 0; i < 20000; i++) m.set(i, { i }); return m.size;",
  "throw 'plain';",
  "let = ;",
  "const big = new ArrayBuffer(8 * 1024 * 1024); return big.byteLength;",
  "Math.random = () => 1; return Math.random();",
  "return Array.from({ length: 2000 }, (_, i) => i * 2).reduce((a, b) => a + b, 0);",
];

/** A probe whose answer depends on the whole visible state of the VM. */
const probe = `return [Object.getOwnPropertyNames(globalThis).sort().join(","), typeof leak, typeof pinned,
  Object.isFrozen(Object.prototype), [1, 2, 3].map((x) => x * 2).join(), JSON.stringify({ a: [1, { b: 2 }] })];`;

function makeRunner(events: VmEvent[], timeoutMs: number, module = loadQuickJSWasm()) {
  const runner = new VmRunner({
    module,
    maxStackSize: 256 * 1024,
    maxVms: 1,
    emit: (event) => {
      events.push(event);
      // Tool results arrive late, after the script may have ended.
      if (event.type === "call") {
        setTimeout(
          () =>
            runner.handle({
              type: "settle",
              exec: event.exec,
              id: event.id,
              outcome: { ok: true, value: "1" },
              seq: null,
              now: null,
            }),
          2,
        );
      }
    },
  });
  let exec = 0;
  const run = async (code: string, memoryLimitBytes = 16 * 1024 * 1024): Promise<RunResult> => {
    const id = ++exec;
    runner.handle({
      type: "run",
      request: {
        exec: id,
        slot: 0,
        code,
        configuration: runConfiguration({
          tools: [{ name: "slow", id: "slow", description: "" }],
          globals: [],
          deterministic: false,
          program: false,
        }),
        store: {},
        memoryLimitBytes,
        timeLeftMs: timeoutMs,
        cpuLimitMs: null,
        interruptBudget: null,
        maxCalls: 1000,
        random: null,
        journal: false,
        replayClock: null,
        answers: null,
        restore: null,
        deterministic: null,
        program: null,
      },
    });
    for (;;) {
      const done = events.find((e) => e.type === "done" && e.exec === id);
      if (done && done.type === "done") return done.result;
      await new Promise((resolve) => setTimeout(resolve, 1));
    }
  };
  /** Waits until the VM is back in the pool, reset. */
  const settled = async () => {
    const internals = (runner as unknown as { vms: RunnerInternals }).vms;
    while (internals.idle.length === 0 || internals.recycling.size > 0) {
      await new Promise((resolve) => setImmediate(resolve));
    }
    return internals;
  };
  return { runner, run, settled };
}

describe("the memory-image reset", () => {
  it.each([
    ["restoring the written pages", loadQuickJSWasm()],
    ["restoring the whole image", untracked],
  ])(
    "leaves a VM byte-identical to its image and equal to a fresh VM after hostile executions, %s",
    async (_, module) => {
      const events: VmEvent[] = [];
      const { runner, run, settled } = makeRunner(events, 150, module);
      await runner.init();
      const fresh = await run(probe);
      expect(fresh.ok).toBe(true);
      const memoryOf = (vm: GuestVm) =>
        new Uint8Array((vm as unknown as { exports: { memory: WebAssembly.Memory } }).exports.memory.buffer);
      const { image } = (await settled()) as RunnerInternals;
      // The reset itself allocates the new wrapper's handles, so the reference for an image is a fresh VM reset to it.
      const references = new Map<VmImage, Uint8Array>();
      const referenceFor = async (target: VmImage) => {
        let reference = references.get(target);
        if (!reference) {
          const vm = await GuestVm.fromImage({ module, maxStackSize: 256 * 1024 }, image);
          expect(vm.reset(target)).toBe(true);
          reference = memoryOf(vm);
          references.set(target, reference);
        }
        return reference;
      };
      let compared = 0;
      let partial = 0;
      const seen = new Set<VmImage>();
      for (let round = 0; round < 3; round++) {
        for (const code of hostile) {
          await run(code);
          const internals = await settled();
          const vm = internals.idle[0] as GuestVm;
          const target = vm.currentImage as VmImage;
          seen.add(target);
          // A VM that grew or broke was replaced by a new instance made from the image.
          expect(vm.memoryBytes()).toBe(target.byteLength);
          const memory = memoryOf(vm);
          const reference = await referenceFor(target);
          const firstDifference = memory.findIndex((byte, i) => byte !== reference[i]);
          expect({ code, firstDifference }).toEqual({ code, firstDifference: -1 });
          compared++;
          if (vm.restoredBytes < target.byteLength / 4) partial++;
          const again = await run(probe);
          expect(again).toEqual({ ...fresh, cpuMs: again.cpuMs });
        }
      }
      // From the second execution on, VMs start from the image captured after `configure`.
      expect([...seen].some((target) => target !== image)).toBe(true);
      expect(compared).toBe(hostile.length * 3);
      // The instrumented module's resets restore a fraction of the image after most executions; the other's all of it.
      if (module === untracked) expect(partial).toBe(0);
      else expect(partial).toBeGreaterThan(hostile.length);
      runner.close();
    },
  );

  it("restores bytes written anywhere in the image's zero pages, synchronously and gradually", async () => {
    const module = untracked;
    const { vm, image } = await GuestVm.boot({ module, maxStackSize: 256 * 1024 });
    expect(vm.reset(image)).toBe(true);
    const memory = new Uint8Array((vm as unknown as { exports: { memory: WebAssembly.Memory } }).exports.memory.buffer);
    const zeroRuns = image.segments.filter((s) => s.zero);
    // The wasm stack region and the heap headroom are both zero runs of more than a page.
    expect(zeroRuns.filter((s) => s.to - s.from > 64 * 1024).length).toBeGreaterThanOrEqual(2);
    const scribble = () => {
      for (const run of zeroRuns) {
        memory[run.from] = 1;
        memory[run.to - 1] = 2;
        memory[(run.from + run.to) >> 1] = 3;
      }
      vm.dirty = true;
    };
    // The reset allocates the new wrapper's handles, so the reference is a fresh VM made from the image.
    const fresh = await GuestVm.fromImage({ module, maxStackSize: 256 * 1024 }, image);
    const reference = new Uint8Array(
      (fresh as unknown as { exports: { memory: WebAssembly.Memory } }).exports.memory.buffer,
    );
    const differences = () => memory.findIndex((byte, i) => byte !== reference[i]);
    scribble();
    expect(differences()).toBeGreaterThanOrEqual(0);
    expect(vm.reset(image)).toBe(true);
    expect(differences()).toBe(-1);
    scribble();
    const steps = vm.resetGradually(image, 64 * 1024);
    let step = steps.next();
    while (!step.done) step = steps.next();
    expect(step.value).toBe(true);
    expect(differences()).toBe(-1);
    vm.dispose();
    fresh.dispose();
  });

  it("counts the zero pages an execution wrote, and how many resets since wrote few", async () => {
    const module = untracked;
    const { image } = await GuestVm.boot({ module, maxStackSize: 256 * 1024 });
    const vm = await GuestVm.fromImage({ module, maxStackSize: 256 * 1024 }, image);
    // A new instance has written none of them.
    expect(vm.peakZeroPagesWritten).toBe(0);
    const memory = new Uint8Array((vm as unknown as { exports: { memory: WebAssembly.Memory } }).exports.memory.buffer);
    const zeroPages = image.segments
      .filter((s) => s.zero)
      .flatMap((s) => {
        const pages: number[] = [];
        for (let at = s.from; at < s.to; at += 4096) pages.push(at);
        return pages;
      });
    for (const at of zeroPages.slice(0, 100)) memory[at + 7] = 1;
    vm.dirty = true;
    expect(vm.reset(image)).toBe(true);
    expect([vm.peakZeroPagesWritten, vm.quietResets]).toEqual([100, 0]);
    for (const at of zeroPages.slice(0, 3)) memory[at] = 1;
    vm.dirty = true;
    expect(vm.reset(image)).toBe(true);
    expect([vm.peakZeroPagesWritten, vm.quietResets]).toEqual([100, 1]);
    vm.dispose();
  });

  it("replaces a VM that wrote many zero pages once 64 executions in a row wrote few", async () => {
    const events: VmEvent[] = [];
    const { runner, run, settled } = makeRunner(events, 5_000, untracked);
    await runner.init();
    const vmNow = async () => (await settled()).idle[0] as GuestVm;
    // The booted VM wrote its heap headroom on the way to the image: it is replaced after 64 quiet resets (its first
    // was the runner's, before any execution).
    const booted = await vmNow();
    for (let i = 0; i < 64; i++) expect(await run("return 1")).toMatchObject({ ok: true });
    const renewed = await vmNow();
    expect(renewed).not.toBe(booted);
    expect(renewed.peakZeroPagesWritten).toBe(0);
    // 600 KB written into the headroom: about 150 of the image's zero pages.
    expect(await run("const a = new Uint8Array(600000); a.fill(1); return a.length")).toMatchObject({
      value: "600000",
    });
    const heavy = await vmNow();
    expect(heavy).toBe(renewed);
    expect(heavy.peakZeroPagesWritten).toBeGreaterThanOrEqual(64);
    for (let i = 0; i < 64; i++) await run("return 1");
    expect([await vmNow(), heavy.quietResets]).toEqual([heavy, 64]);
    // Recycled after its 65th quiet execution, it is not reset but replaced.
    expect(await run(probe)).toMatchObject({ ok: true });
    const replaced = await vmNow();
    expect(replaced).not.toBe(heavy);
    expect(await run("return [typeof leak, 6 * 7]")).toMatchObject({ ok: true, value: '["undefined",42]' });
    runner.close();
  });

  it("answers many calls in one execution without growing the VM's memory", async () => {
    let done: ((result: RunResult) => void) | undefined;
    const runner = new VmRunner({
      module: loadQuickJSWasm(),
      maxStackSize: 256 * 1024,
      maxVms: 1,
      emit: (event) => {
        if (event.type === "call") {
          const { exec, id, args } = event;
          queueMicrotask(() =>
            runner.handle({ type: "settle", exec, id, outcome: { ok: true, value: args }, seq: null, now: null }),
          );
        }
        if (event.type === "done") done?.(event.result);
      },
    });
    await runner.init();
    const vm = (runner as unknown as { vms: RunnerInternals }).vms.idle.at(-1) as GuestVm;
    const before = vm.memoryBytes();
    const result = await new Promise<RunResult>((resolve) => {
      done = resolve;
      runner.handle({
        type: "run",
        request: {
          exec: 1,
          slot: 0,
          code: "let n = 0; for (let i = 0; i < 150000; i++) n += await tools.echo(1); return n;",
          configuration: runConfiguration({
            tools: [{ name: "echo", id: "echo", description: "" }],
            globals: [],
            deterministic: false,
            program: false,
          }),
          store: {},
          memoryLimitBytes: 64 * 1024 * 1024,
          timeLeftMs: null,
          cpuLimitMs: null,
          interruptBudget: null,
          maxCalls: 1_000_000,
          random: null,
          journal: false,
          replayClock: null,
          answers: null,
          restore: null,
          deterministic: null,
          program: null,
        },
      });
    });
    expect(result.ok && result.value).toBe("150000");
    // Each call's values are freed: a leak of even a few bytes per call would have grown the memory by megabytes.
    expect(vm.memoryBytes()).toBe(before);
    runner.close();
  });
});
