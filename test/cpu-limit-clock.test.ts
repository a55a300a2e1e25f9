/**
 * A program's CPU limit counts CPU time, not the wall time of its turns: on a machine with more busy threads than
 * cores a thread waits for a core, and a program that computed a fraction of its `cpuMillis` used to fail with it.
 * The thread's CPU clock is replaced here by one that runs at a quarter of the wall clock's rate, as a thread sharing
 * its core with three others sees.
 */
import { describe, expect, it, vi } from "vitest";
import { type RunRequest, runConfiguration, type VmEvent } from "../dist/engine/protocol.js";
import { VmRunner } from "../dist/engine/runner.js";
import { loadQuickJSWasm } from "../dist/engine/wasm/load.js";

const clock = vi.hoisted(() => ({ rate: 0.25 }));
vi.mock("../dist/platform/platform.js", async (original) => ({
  ...(await original<typeof import("../dist/platform/platform.js")>()),
  threadCpuMs: () => performance.now() * clock.rate,
}));

function request(exec: number, code: string, cpuLimitMs: number): RunRequest {
  return {
    exec,
    slot: exec,
    code,
    configuration: runConfiguration({ tools: [], globals: [], deterministic: false, program: false }),
    store: {},
    memoryLimitBytes: 16 * 1024 * 1024,
    timeLeftMs: 30_000,
    cpuLimitMs,
    maxCalls: 100,
    random: null,
    journal: false,
    replayClock: null,
    answers: null,
    restore: null,
    deterministic: null,
    program: null,
    interruptBudget: null,
  };
}

/** Spins for `ms` of wall time inside one turn. */
const spin = (ms: number) => `const end = Date.now() + ${ms}; while (Date.now() < end) {} return "done";`;

async function run(code: string, cpuLimitMs: number) {
  const events: VmEvent[] = [];
  const runner = new VmRunner({
    module: loadQuickJSWasm(),
    maxStackSize: 256 * 1024,
    maxVms: 1,
    emit: (e) => events.push(e),
  });
  await runner.init();
  const started = performance.now();
  runner.handle({ type: "run", request: request(1, code, cpuLimitMs) });
  while (!events.some((e) => e.type === "done")) await new Promise((r) => setTimeout(r, 1));
  const wallMs = performance.now() - started;
  runner.close();
  const done = events.find((e) => e.type === "done");
  return { result: done?.type === "done" ? done.result : undefined, wallMs };
}

describe("a run's CPU limit", () => {
  it("lets a turn whose thread computed less than the limit finish, however long it took by the wall clock", async () => {
    clock.rate = 0.25;
    // 400 ms of wall time at a quarter of a core is 100 ms of CPU, within the limit of 200.
    const { result } = await run(spin(400), 200);
    expect(result).toMatchObject({ ok: true, value: '"done"' });
  });

  it("stops a turn once its thread computed past the limit, counting CPU time", async () => {
    clock.rate = 0.25;
    const { result, wallMs } = await run(spin(5_000), 100);
    expect(result).toMatchObject({ ok: false, reason: "cpu_limit" });
    // 100 ms of CPU at a quarter of the wall clock's rate is 400 ms (less the clock's one tick of lag), not 5 s.
    expect(wallMs).toBeGreaterThanOrEqual(300);
    expect(wallMs).toBeLessThan(4_000);
  });

  it("counts the wall time where the thread's clock runs as fast", async () => {
    clock.rate = 1;
    const { result } = await run(spin(400), 200);
    expect(result).toMatchObject({ ok: false, reason: "cpu_limit" });
  });
});
