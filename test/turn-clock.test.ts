/**
 * How long a worker's turn computed, as the pool sees it: past the first WALL_TIMED_MS, the CPU time of the worker's
 * thread, so that a worker waiting for a core (a machine with more busy threads than cores) does not look like one
 * that computes, and runs are not moved away from it nor spares started for it.
 */
import { afterEach, describe, expect, it } from "vitest";
import { runConfiguration, UNSEEDED } from "../dist/engine/protocol.js";
import { TURN_SLOTS, TurnSlot } from "../dist/engine/runner.js";
import type { HostChannel, SharedState } from "../dist/host/channel.js";
import { HostPeer, WALL_TIMED_MS } from "../dist/host/peer.js";
import { CodemodeSandbox } from "../dist/index.js";
import { currentThreadId, threadCpuMs } from "../dist/worker/thread-clock.js";

const onLinux = process.platform === "linux";
if (!onLinux) console.log(`turn-clock: /proc is not there on ${process.platform}; the thread CPU clock tests skip`);

const request = {
  code: "return 1",
  configuration: runConfiguration({ tools: [], globals: [], deterministic: false, program: false }),
  store: {},
  memoryLimitBytes: 16 * 1024 * 1024,
  deadline: null,
  cpuLimitMs: null,
  interruptBudget: null,
  maxCalls: 10,
  deterministic: null,
  answers: null,
  restore: null,
  program: null,
};

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const peers: HostPeer[] = [];
afterEach(() => {
  for (const peer of peers.splice(0)) peer.kill("the test ended");
});

/** A peer over a channel that goes nowhere, whose turn word and thread clock the test sets. */
function peerWithClock(cpuMs: (() => number | undefined) | undefined) {
  const shared: SharedState = {
    stopFlags: new Int32Array(new SharedArrayBuffer(16)),
    handled: new Int32Array(new SharedArrayBuffer(16)),
    computed: new Int32Array(new SharedArrayBuffer(16)),
    turn: new Int32Array(new SharedArrayBuffer(TURN_SLOTS * 4)),
    turnEpochMs: Date.now(),
    cpuMs,
  };
  const channel: HostChannel = {
    send: () => {},
    kill: async () => {},
    shared,
  };
  const peer = new HostPeer(channel, {
    bootTimeoutMs: 60_000,
    stopGraceMs: 50,
    capacity: 4,
    what: "worker",
    onGone: () => {},
    onRetire: () => {},
    onBusy: () => {},
  });
  peers.push(peer);
  expect(peer.launch(request, UNSEEDED, 1, () => {})).toBe(true);
  /** Marks run 1 (slot 0) as computing turn `count`, begun `agoMs` ago. */
  const beginTurn = (count: number, agoMs: number) => {
    Atomics.store(shared.turn, TurnSlot.startedAt, Date.now() - shared.turnEpochMs - agoMs);
    Atomics.store(shared.turn, TurnSlot.count, count);
    Atomics.store(shared.turn, TurnSlot.running, 1);
  };
  return { peer, beginTurn };
}

describe("the length of a worker's turn", () => {
  it("counts only the CPU time its thread computed once past WALL_TIMED_MS: a thread waiting for a core is not computing", async () => {
    let cpu = 1_000;
    const { peer, beginTurn } = peerWithClock(() => cpu);
    beginTurn(1, 1);
    // Below WALL_TIMED_MS: the wall clock.
    expect(peer.computing()?.forMs).toBeLessThan(WALL_TIMED_MS);
    beginTurn(2, 40);
    // 40 ms on the wall clock, no CPU time since the host first saw it: WALL_TIMED_MS.
    expect(peer.computing()).toEqual({ exec: 1, forMs: WALL_TIMED_MS });
    await pause(5);
    expect(peer.computing()?.forMs).toBe(WALL_TIMED_MS);
    // Its thread computes 12 ms: the turn is that much longer.
    cpu += 12;
    await pause(2);
    expect(peer.computing()?.forMs).toBe(WALL_TIMED_MS + 12);
    // A new turn starts from its own first sight.
    beginTurn(3, 30);
    expect(peer.computing()?.forMs).toBe(WALL_TIMED_MS);
    // Never longer than the wall clock says.
    cpu += 500;
    await pause(2);
    const forMs = peer.computing()?.forMs ?? 0;
    expect(forMs).toBeGreaterThanOrEqual(30);
    expect(forMs).toBeLessThan(500);
  });

  it("is the wall clock where the thread's CPU time cannot be read", () => {
    const none = peerWithClock(undefined);
    none.beginTurn(1, 40);
    expect(none.peer.computing()?.forMs).toBeGreaterThanOrEqual(40);
    const unreadable = peerWithClock(() => undefined);
    unreadable.beginTurn(1, 40);
    expect(unreadable.peer.computing()?.forMs).toBeGreaterThanOrEqual(40);
  });
});

describe.skipIf(!onLinux)("the thread CPU clock", () => {
  it("reads this thread's CPU time, which grows while it computes and not while it sleeps", async () => {
    const id = currentThreadId();
    expect(id).toBeGreaterThan(0);
    const before = threadCpuMs(id) as number;
    const end = performance.now() + 60;
    while (performance.now() < end) {}
    // The kernel adds to it at ticks (up to 10 ms apart) and switches: a sleep makes it current.
    await pause(15);
    const spun = threadCpuMs(id) as number;
    expect(spun - before).toBeGreaterThanOrEqual(40);
    await pause(60);
    expect((threadCpuMs(id) as number) - spun).toBeLessThan(20);
    expect(threadCpuMs(2 ** 30)).toBeUndefined();
  });

  it("is what the pool reads of a worker: a spinning worker's turn grows with its CPU time", async () => {
    const sandbox = new CodemodeSandbox({ poolSize: 1, maxPoolSize: 1 });
    try {
      await sandbox.warm();
      const spinning = sandbox.execute("while (true) {}", { timeoutMs: 400 });
      await pause(250);
      // biome-ignore lint/suspicious/noExplicitAny: the pool's peers are internal; the test reads the one worker's
      const peer = (sandbox as any).pool.pool.livePeers[0] as HostPeer;
      const first = peer.computing();
      await pause(100);
      const later = peer.computing();
      expect(first?.forMs).toBeGreaterThanOrEqual(WALL_TIMED_MS);
      // Sleeping 100 ms here while the worker spins: its turn grew by about as much CPU time (a tick's lag aside).
      expect((later?.forMs ?? 0) - (first?.forMs ?? 0)).toBeGreaterThanOrEqual(50);
      const result = await spinning;
      expect(result.ok).toBe(false);
    } finally {
      await sandbox.close();
    }
  });
});
