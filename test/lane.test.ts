/**
 * The worker pool's lanes: call results handed to a worker that waits on shared memory instead of posted to it, and
 * the worker's events written to shared memory while the host polls.
 */
import { Worker } from "node:worker_threads";
import { afterEach, describe, expect, it } from "vitest";
import { createEventLaneBuffer, HostEventLane, WorkerEventLane } from "../dist/worker/event-lane.js";
import { createLaneBuffer, HostLane, WorkerLane } from "../dist/worker/lane.js";

let worker: Worker | undefined;
afterEach(async () => {
  await worker?.terminate();
});

function start() {
  const buffer = createLaneBuffer();
  const host = new HostLane(buffer);
  worker = new Worker(new URL("./fixtures/lane-worker.mjs", import.meta.url), { workerData: buffer });
  const replies: { ready?: boolean; json?: string; ms?: number }[] = [];
  const waiters: (() => void)[] = [];
  worker.on("message", (reply) => {
    replies.push(reply);
    for (const wake of waiters.splice(0)) wake();
  });
  const next = async () => {
    while (replies.length === 0) await new Promise<void>((resolve) => waiters.push(resolve));
    return replies.shift() as { ready?: boolean; json?: string; ms?: number };
  };
  /** Asks the worker to wait once; resolves when it is about to. */
  const askToWait = async (timeoutMs: number) => {
    host.willPost();
    worker?.postMessage({ timeoutMs });
    host.posted();
    expect((await next()).ready).toBe(true);
  };
  /** Hands `json` over as soon as the worker waits (it may still be on its way into the wait). */
  const handOffSoon = async (json: string) => {
    for (let i = 0; i < 2000; i++) {
      if (host.handOff(json)) return true;
      await new Promise((resolve) => setTimeout(resolve, 1));
    }
    return false;
  };
  return { host, next, askToWait, handOffSoon };
}

describe("the lane", () => {
  it("hands a batch to a waiting worker, and refuses when nobody waits", async () => {
    const { host, next, askToWait, handOffSoon } = start();
    expect(host.handOff('[{"type":"settle"}]')).toBe(false);
    await askToWait(10_000);
    const batch = JSON.stringify([{ type: "settle", exec: 1, id: 2, outcome: { ok: true, value: '"h\u00e9"' } }]);
    expect(await handOffSoon(batch)).toBe(true);
    const reply = await next();
    expect(reply.json).toBe(batch);
    // The lane is free again, and the worker no longer waits.
    expect(host.handOff(batch)).toBe(false);
  });

  it("gives up after its timeout, and a batch that does not fit is never handed over", async () => {
    const { host, next, askToWait } = start();
    await askToWait(200);
    expect(host.handOff("x".repeat(70 * 1024))).toBe(false);
    const reply = await next();
    expect(reply.json).toBeUndefined();
    expect(reply.ms).toBeGreaterThanOrEqual(150);
  });

  it("wakes a waiting worker at once when a message is posted", async () => {
    const { host, next, askToWait } = start();
    await askToWait(20_000);
    await new Promise((resolve) => setTimeout(resolve, 50));
    host.willPost();
    host.posted();
    const reply = await next();
    expect(reply.json).toBeUndefined();
    expect(reply.ms).toBeLessThan(5_000);
  });

  it("does not wait while a posted message is still on its way", async () => {
    const { host, next, askToWait } = start();
    // Counted as posted but not yet received: the worker must return to its event loop instead of waiting.
    host.willPost();
    await askToWait(20_000);
    const reply = await next();
    expect(reply.json).toBeUndefined();
    expect(reply.ms).toBeLessThan(1_000);
  });

  // The worker checks for a message in flight after it marked the lane as waiting; the host may act in between.
  // These replay that interleaving on one thread: the host's step runs inside the worker's check.
  class HostActsDuringCheck extends WorkerLane {
    constructor(
      buffer: SharedArrayBuffer,
      private readonly hostStep: () => void,
    ) {
      super(buffer);
    }
    protected override messageInFlight(): boolean {
      this.hostStep();
      return true;
    }
  }

  it("keeps a batch handed over while the worker finds a message in flight", () => {
    const buffer = createLaneBuffer();
    const host = new HostLane(buffer);
    const batch = '[{"type":"settle","exec":7}]';
    let handed = false;
    const lane = new HostActsDuringCheck(buffer, () => {
      handed = host.handOff(batch);
    });
    expect(lane.wait(1_000)).toBe(batch);
    expect(handed).toBe(true);
    // The lane is idle again: the host posts from now on, and the worker can wait again later.
    expect(host.handOff(batch)).toBe(false);
    expect(new Int32Array(buffer, 0, 1)[0]).toBe(0);
  });

  it("leaves the lane idle when a message is posted while the worker finds one in flight", () => {
    const buffer = createLaneBuffer();
    const host = new HostLane(buffer);
    const lane = new HostActsDuringCheck(buffer, () => {
      host.willPost();
      host.posted();
    });
    expect(lane.wait(1_000)).toBeUndefined();
    expect(new Int32Array(buffer, 0, 1)[0]).toBe(0);
  });
});

describe("the event lane", () => {
  it("delivers a worker's batches in the order it sent them, whether written to the lane or posted", async () => {
    const buffer = createEventLaneBuffer();
    const order: number[] = [];
    const host = new HostEventLane(
      buffer,
      (json) => order.push(...(JSON.parse(json) as number[])),
      (reason) => {
        throw new Error(reason);
      },
    );
    worker = new Worker(new URL("./fixtures/event-lane-worker.mjs", import.meta.url), {
      workerData: { buffer, bursts: 3000 },
    });
    // The host polls now and then, as it does after handing an answer over.
    const poller = setInterval(() => host.poll(), 1);
    const end = await new Promise<{ end: number; viaLane: number }>((resolve) => {
      worker?.on("message", (message: number[] | { end: number; viaLane: number }) => {
        host.messageArrived();
        if (Array.isArray(message)) order.push(...message);
        else resolve(message);
      });
    });
    clearInterval(poller);
    host.close();
    expect(order).toEqual(Array.from({ length: end.end }, (_, i) => i));
    // Both paths were taken (posted batches arrive in bunches between polls, past the lane's count: the case that
    // once left a batch in the lane for good).
    expect(end.viaLane).toBeGreaterThan(0);
    expect(end.viaLane).toBeLessThan(end.end);
  });

  it("never takes a batch while the host does not poll, and a batch that does not fit is posted", () => {
    const buffer = createEventLaneBuffer();
    const taken: string[] = [];
    const broken: string[] = [];
    const host = new HostEventLane(
      buffer,
      (json) => taken.push(json),
      (reason) => broken.push(reason),
    );
    const side = new WorkerEventLane(buffer);
    expect(side.offer("[1]")).toBe(false);
    host.poll();
    expect(side.offer("x".repeat(70 * 1024))).toBe(false);
    expect(side.offer("[2]")).toBe(true);
    // Full until the host takes it: the next batch is posted.
    expect(side.offer("[3]")).toBe(false);
    host.close();
    expect(taken).toEqual([]);
  });
});

describe("the event lane with a worker out of step", () => {
  const waitFor = async (check: () => boolean) => {
    for (let i = 0; i < 300 && !check(); i++) await new Promise((resolve) => setTimeout(resolve, 10));
  };

  it("gives up on a batch that claims fewer posted messages than came, at once", async () => {
    const buffer = createEventLaneBuffer();
    const broken: string[] = [];
    const host = new HostEventLane(
      buffer,
      () => {},
      (reason) => broken.push(reason),
    );
    const side = new WorkerEventLane(buffer);
    for (let i = 0; i < 3; i++) host.messageArrived();
    host.poll();
    expect(side.offer("[1]")).toBe(true);
    await waitFor(() => broken.length > 0);
    expect(broken).toEqual(["the worker broke the event lane's order"]);
  });

  it("gives up on a batch whose earlier messages never come, after a second, instead of polling for good", async () => {
    const buffer = createEventLaneBuffer();
    const broken: string[] = [];
    const taken: string[] = [];
    const host = new HostEventLane(
      buffer,
      (json) => taken.push(json),
      (reason) => broken.push(reason),
    );
    const side = new WorkerEventLane(buffer);
    side.posting();
    host.poll();
    expect(side.offer("[1]")).toBe(true);
    const started = performance.now();
    await waitFor(() => broken.length > 0);
    expect(broken).toEqual(["the worker broke the event lane's order"]);
    expect(performance.now() - started).toBeGreaterThanOrEqual(900);
    expect(taken).toEqual([]);
  });
});
