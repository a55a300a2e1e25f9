/**
 * A fast path for a worker's events to the host, the other direction of lane.ts. Waking the host's sleeping thread is
 * most of what a tool call through the pool costs (the worker's `postMessage` takes ~9 us of each call, the syscall
 * that wakes the host, then the host's own wake-up): so after the host hands an answer over, it polls this shared
 * memory for a short while from `setImmediate` (its event loop keeps running: timers, I/O and messages go on), and a
 * worker whose host polls writes its next batch of events here instead of posting it. The host stops polling once a
 * batch came (the next answer asks again) or `POLL_MS` passed without one, and the worker posts again.
 *
 * Order is kept across the two paths: a batch carries the number of messages the worker had posted before it, and
 * the host takes it only once it has received exactly those (checked when it polls) or when the next posted message
 * arrives (then before handling that message).
 */

/** How long the host polls for the worker's next events after handing it an answer. */
export const POLL_MS = 0.2;
/** How long a batch may wait for the messages posted before it. */
const MAX_ORDER_WAIT_MS = 1_000;

import { LANE_BYTES, Lane } from "./lane.ts";

const State = {
  /** The host does not poll: the worker posts. */
  idle: 0,
  /** The host polls and the lane is empty. */
  polling: 1,
  /** The worker is writing a batch. */
  writing: 2,
  /** A batch waits for the host. */
  full: 3,
} as const;

/** Int32 slots of the header (the length is the lane's own slot). */
const STATE = 0;
const LENGTH = 1;
/** Messages the worker had posted before the batch in the lane. */
const POSTED = 2;

/** Same layout as lane.ts: batches of event JSON up to its payload size; larger ones are posted. */
export function createEventLaneBuffer(): SharedArrayBuffer {
  return new SharedArrayBuffer(LANE_BYTES);
}

/** The worker's end. */
export class WorkerEventLane extends Lane {
  /** Messages posted to the host so far (count each one with `posting()`). */
  private posted = 0;

  /** Writes a batch of events if the host polls and it fits; false means: post it (after `posting()`). */
  offer(json: string): boolean {
    if (Atomics.load(this.header, STATE) !== State.polling) return false;
    return this.write(json, STATE, State.polling, State.writing, State.full, [POSTED, this.posted]);
  }

  /** Whether the host polls the lane now (a batch offered then may fit). */
  hostPolls(): boolean {
    return Atomics.load(this.header, STATE) === State.polling;
  }

  /** Call for every message posted to the host. */
  posting(): void {
    this.posted++;
  }
}

/** The host's end: hands each batch's JSON to `deliver`, in order with the posted messages. */
export class HostEventLane extends Lane {
  private received = 0;
  private polling = false;
  private closed = false;
  /** When the host last asked to poll (or took a batch); it polls until POLL_MS after that. */
  private since = 0;
  /** Times the host asked to poll: a batch taken with no new request since ends the polling. */
  private asked = 0;

  /** Since when a batch waits for posted messages to arrive first (0: none waits). */
  private waitingSince = 0;

  constructor(
    buffer: SharedArrayBuffer,
    private readonly deliver: (json: string) => void,
    /** Called once when the worker breaks the lane's rules; the host then stops polling. */
    private readonly broken: (reason: string) => void,
  ) {
    super(buffer);
  }

  /** Polls for a while (after an answer was handed to the worker, whose next events come soon). */
  poll(): void {
    this.since = performance.now();
    this.asked++;
    if (this.polling || this.closed) return;
    if (Atomics.compareExchange(this.header, STATE, State.idle, State.polling) !== State.idle) return;
    this.polling = true;
    setImmediate(this.step);
  }

  /** Call when a posted message arrives, before handling it: a batch the worker wrote before posting it goes first. */
  messageArrived(): void {
    this.received++;
    if (Atomics.load(this.header, STATE) === State.full && Atomics.load(this.header, POSTED) === this.received - 1) {
      this.take();
    }
  }

  /** Stops polling for good (the worker is gone). */
  close(): void {
    this.closed = true;
  }

  private take(): void {
    const json = this.payload.toString("utf8", 0, Atomics.load(this.header, LENGTH));
    Atomics.store(this.header, STATE, State.polling);
    this.since = performance.now();
    this.deliver(json);
  }

  /** Stops polling unless the worker is taking the lane at this very moment. */
  private stop(): boolean {
    if (Atomics.compareExchange(this.header, STATE, State.polling, State.idle) !== State.polling) return false;
    this.polling = false;
    return true;
  }

  private readonly step = () => {
    if (this.closed) {
      this.polling = false;
      return;
    }
    const state = Atomics.load(this.header, STATE);
    const posted = state === State.full ? Atomics.load(this.header, POSTED) : -1;
    if (posted >= 0 && posted !== this.received) {
      // Messages posted before the batch are on their way, and take milliseconds at most. A batch that claims fewer
      // than have come, or waits on messages that never come, is a worker out of step: never spun on for good.
      const now = performance.now();
      if (this.waitingSince === 0) this.waitingSince = now;
      if (posted < this.received || now - this.waitingSince > MAX_ORDER_WAIT_MS) {
        this.close();
        this.polling = false;
        this.broken("the worker broke the event lane's order");
        return;
      }
    } else this.waitingSince = 0;
    if (posted === this.received) {
      const asked = this.asked;
      this.take();
      // The events the poll waited for came. Polling on would only spin (a run that ended waits for nothing); the
      // next answer handed over asks again.
      if (this.asked === asked && this.stop()) return;
    } else if (state === State.polling && performance.now() - this.since > POLL_MS && this.stop()) return;
    setImmediate(this.step);
  };
}
