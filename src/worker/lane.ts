/**
 * A fast path from the host to a worker that has nothing to do but wait for answers to its tool calls. Such a worker
 * blocks on this shared memory (`Atomics.wait`) instead of sleeping in its event loop, and the host writes the next
 * batch of call results straight into it, skipping a `postMessage` on each side. While answers come back quickly the
 * worker spins briefly before it sleeps: waking a sleeping thread costs the waker an inter-processor interrupt, which
 * in a virtual machine is several microseconds. Everything else, and anything that does not fit, still goes through
 * `postMessage`; a message posted while the worker waits here wakes it, so nothing waits on this lane's timeout.
 */

/** Bytes of command JSON the lane carries; larger batches are posted. */
const LANE_PAYLOAD_BYTES = 64 * 1024;
/** How long a worker spins for an answer before it sleeps, while the previous answers came within this time. */
const SPIN_MS = 0.05;

const State = {
  /** The worker runs its event loop; the host posts messages. */
  idle: 0,
  /** The worker is blocked on the lane. */
  waiting: 1,
  /** The host is writing a batch into the lane. */
  writing: 2,
  /** A batch is in the lane for the worker to take. */
  handed: 3,
  /** A message was posted: the worker must go back to its event loop. */
  wake: 4,
} as const;

/** Int32 slots of the header. */
const STATE = 0;
const LENGTH = 1;
/** Messages the host has posted (the worker counts those it received, and never waits while one is in flight). */
const POSTED = 2;
const HEADER_BYTES = 16;

/** Bytes of a lane's shared memory. */
export const LANE_BYTES = HEADER_BYTES + LANE_PAYLOAD_BYTES;

export function createLaneBuffer(): SharedArrayBuffer {
  return new SharedArrayBuffer(LANE_BYTES);
}

/** Shared memory of a lane: a header of Int32 slots, then the payload (event-lane.ts has the same layout). */
export class Lane {
  protected readonly header: Int32Array;
  protected readonly payload: Buffer;

  constructor(buffer: SharedArrayBuffer) {
    this.header = new Int32Array(buffer, 0, HEADER_BYTES / 4);
    this.payload = Buffer.from(buffer, HEADER_BYTES);
  }

  /** Writes `json` as the batch if it fits and the lane is still in state `from`, then sets state `to`. */
  protected write(json: string, stateSlot: number, from: number, writing: number, to: number, set?: [number, number]) {
    const header = this.header;
    if (json.length > this.payload.length) return false;
    const bytes = Buffer.byteLength(json);
    if (bytes > this.payload.length) return false;
    if (Atomics.compareExchange(header, stateSlot, from, writing) !== from) return false;
    this.payload.write(json, 0, bytes, "utf8");
    Atomics.store(header, LENGTH, bytes);
    if (set) Atomics.store(header, set[0], set[1]);
    Atomics.store(header, stateSlot, to);
    return true;
  }
}

/** The host's end. */
export class HostLane extends Lane {
  /** Writes `json` into the lane if the worker waits on it and it fits; false means: post it instead. */
  handOff(json: string): boolean {
    if (Atomics.load(this.header, STATE) !== State.waiting) return false;
    if (!this.write(json, STATE, State.waiting, State.writing, State.handed)) return false;
    Atomics.notify(this.header, STATE);
    return true;
  }

  /** Call before posting a message, so that the worker does not start waiting with one in flight. */
  willPost(): void {
    Atomics.add(this.header, POSTED, 1);
  }

  /** Call after posting a message: a worker waiting on the lane goes back to its event loop to read it. */
  posted(): void {
    if (Atomics.compareExchange(this.header, STATE, State.waiting, State.wake) === State.waiting) {
      Atomics.notify(this.header, STATE);
    }
  }
}

/** The worker's end. */
export class WorkerLane extends Lane {
  /** Messages received through the port. */
  received = 0;
  /** Whether the last answer came within the spin time (then the next wait spins first). */
  private answersQuickly = true;

  /** Whether the host posted a message this worker has not received yet. */
  protected messageInFlight(): boolean {
    return Atomics.load(this.header, POSTED) !== this.received;
  }

  /**
   * Blocks for at most `timeoutMs` for a batch from the host and returns its JSON, or undefined when the time ran
   * out or a message was posted instead (or is in flight).
   */
  wait(timeoutMs: number): string | undefined {
    const header = this.header;
    if (Atomics.compareExchange(header, STATE, State.idle, State.waiting) !== State.idle) return undefined;
    const started = performance.now();
    if (this.messageInFlight()) {
      // Leave without waiting, unless the host took the lane since it saw it waiting: then take its batch below.
      if (Atomics.compareExchange(header, STATE, State.waiting, State.idle) === State.waiting) return undefined;
    } else {
      if (this.answersQuickly) {
        while (Atomics.load(header, STATE) === State.waiting && performance.now() - started < SPIN_MS) {}
      }
      Atomics.wait(header, STATE, State.waiting, timeoutMs);
    }
    for (;;) {
      switch (Atomics.load(header, STATE)) {
        case State.waiting:
          // Timed out; the host may take the lane at this very moment, so leave it only if it did not.
          if (Atomics.compareExchange(header, STATE, State.waiting, State.idle) === State.waiting) {
            this.answersQuickly = false;
            return undefined;
          }
          break;
        case State.writing:
          Atomics.wait(header, STATE, State.writing, 10);
          break;
        case State.handed: {
          const json = this.payload.toString("utf8", 0, Atomics.load(header, LENGTH));
          Atomics.store(header, STATE, State.idle);
          this.answersQuickly = performance.now() - started < SPIN_MS;
          return json;
        }
        default:
          Atomics.store(header, STATE, State.idle);
          return undefined;
      }
    }
  }
}
