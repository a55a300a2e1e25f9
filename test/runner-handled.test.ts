/**
 * The runner's count of handled commands, which the host reads to see a run that waits behind another run's turn
 * (and moves it away from a thread that computes). A command counts once it took effect, never while it is parked
 * inside the runner: a run waiting for a VM that is still being made could otherwise be overtaken by a neighbour's
 * endless turn with the host believing it had started.
 */
import { describe, expect, it } from "vitest";
import { type HostCommand, type RunRequest, runConfiguration, type VmEvent } from "../dist/engine/protocol.js";
import { VmRunner } from "../dist/engine/runner.js";
import { loadQuickJSWasm } from "../dist/engine/wasm/load.js";

function request(exec: number, slot: number, code: string): RunRequest {
  return {
    exec,
    slot,
    code,
    configuration: runConfiguration({
      tools: [{ name: "echo", id: "echo", description: "" }],
      globals: [],
      deterministic: false,
      program: false,
    }),
    store: {},
    memoryLimitBytes: 16 * 1024 * 1024,
    timeLeftMs: 20_000,
    cpuLimitMs: null,
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

describe("the runner's handled count", () => {
  it("counts a run once it has a VM, and an answer sent before then once, when the run takes it", async () => {
    const events: VmEvent[] = [];
    const handled = new Int32Array(4);
    const runner = new VmRunner({
      module: loadQuickJSWasm(),
      maxStackSize: 256 * 1024,
      maxVms: 3,
      handled,
      emit: (e) => events.push(e),
    });
    await runner.init();
    const send = (command: HostCommand) => runner.handle(command);
    // The first runs take the VMs booted with the runner (and keep them, waiting on a call); the last waits for a VM
    // that is still being made.
    send({ type: "run", request: request(1, 0, "return await tools.echo(1)") });
    send({ type: "run", request: request(2, 1, "return await tools.echo(2)") });
    expect([handled[0], handled[1]]).toEqual([1, 1]);
    send({ type: "run", request: request(3, 2, "return await tools.echo('x')") });
    // An answer that comes before the run has its VM (as a rebuilt run's answers do) waits with it.
    send({ type: "settle", exec: 3, id: 1, outcome: { ok: true, value: '"late"' }, seq: null, now: null });
    expect(handled[2]).toBe(0);
    while (!events.some((e) => e.type === "done" && e.exec === 3)) await new Promise((r) => setTimeout(r, 1));
    expect(handled[2]).toBe(2);
    const done = events.find((e) => e.type === "done" && e.exec === 3);
    expect(done?.type === "done" && done.result).toMatchObject({ ok: true, value: '"late"' });
    runner.close();
  });
});
