/**
 * The channel to a VM side on a worker thread of this process: batches posted through the worker's port, plus two
 * shared-memory lanes that skip the posting on the hot path (lane.ts: answers to a worker that waits on them;
 * event-lane.ts: the worker's next events to a host that polls for them), plus the stop flags, handled counts,
 * computed times and turn word the worker shares with the host.
 */
import { Worker } from "node:worker_threads";
import { WORKER_MAX_STACK_SIZE, WORKER_STACK_SIZE_MB } from "../engine/limits.ts";
import { type PrebuiltImage, prebuiltImage } from "../engine/prebuilt-image.ts";
import type { HostCommand } from "../engine/protocol.ts";
import { TURN_SLOTS, TurnSlot } from "../engine/runner.ts";
import type { HostChannel, SharedState } from "../host/channel.ts";
import { startWorker } from "../platform/start-worker.ts";
import { createEventLaneBuffer, HostEventLane } from "./event-lane.ts";
import { createLaneBuffer, HostLane } from "./lane.ts";
import { threadCpuMs } from "./thread-clock.ts";

/** What a worker of the pool starts with (worker/vm-side.ts reads it). */
export interface WorkerData {
  module: WebAssembly.Module;
  stopFlags: Int32Array;
  handled: Int32Array;
  computed: Int32Array;
  turn: Int32Array;
  turnEpochMs: number;
  /** See lane.ts. */
  lane: SharedArrayBuffer;
  /** See event-lane.ts. */
  events: SharedArrayBuffer;
  maxStackSize: number;
  maxVms: number;
  /** The build's post-prelude image of the module (read once, shared by every worker), if there is one. */
  image: PrebuiltImage | undefined;
}

/** Messages one batch from a worker may carry: a VM turn emits at most its output items plus its calls. */
const MAX_MESSAGES_PER_BATCH = 1_000_000;

export interface WorkerChannelOptions {
  module: WebAssembly.Module;
  maxVms: number;
  workerUrl?: string | URL;
}

export function openWorkerChannel(options: WorkerChannelOptions): HostChannel {
  const slots = options.maxVms;
  const turn = new Int32Array(new SharedArrayBuffer(TURN_SLOTS * 4));
  const shared: SharedState = {
    stopFlags: new Int32Array(new SharedArrayBuffer(slots * 4)),
    handled: new Int32Array(new SharedArrayBuffer(slots * 4)),
    computed: new Int32Array(new SharedArrayBuffer(slots * 4)),
    turn,
    turnEpochMs: Date.now(),
    // The worker writes its thread's id once it runs.
    cpuMs: () => {
      const thread = Atomics.load(turn, TurnSlot.thread);
      return thread === 0 ? undefined : threadCpuMs(thread);
    },
  };
  const laneBuffer = createLaneBuffer();
  const eventsBuffer = createEventLaneBuffer();
  const data: WorkerData = {
    module: options.module,
    stopFlags: shared.stopFlags,
    handled: shared.handled,
    computed: shared.computed,
    turn: shared.turn,
    turnEpochMs: shared.turnEpochMs,
    lane: laneBuffer,
    events: eventsBuffer,
    maxStackSize: WORKER_MAX_STACK_SIZE,
    maxVms: options.maxVms,
    image: prebuiltImage(options.module),
  };
  const worker = startWorker(Worker, options.workerUrl ?? new URL("./vm-side.js", import.meta.url), {
    workerData: data,
    resourceLimits: { stackSizeMb: WORKER_STACK_SIZE_MB },
  });
  worker.unref();
  const lane = new HostLane(laneBuffer);
  let closed = false;
  const broken = (what: string) => {
    if (closed) return;
    closed = true;
    events.close();
    channel.onerror?.(`the worker broke the protocol: ${what}`);
  };
  const gone = (reason: string) => {
    if (closed) return;
    closed = true;
    events.close();
    channel.onclose?.(reason);
  };
  const unpack = (batch: unknown) => {
    if (!Array.isArray(batch) || batch.length > MAX_MESSAGES_PER_BATCH) {
      broken("a message is not a batch of messages");
      return;
    }
    for (const message of batch) {
      if (closed) return;
      channel.onmessage?.(message);
    }
  };
  const events = new HostEventLane(
    eventsBuffer,
    (json) => {
      let batch: unknown;
      try {
        batch = JSON.parse(json);
      } catch {
        broken("an event batch is not JSON");
        return;
      }
      unpack(batch);
    },
    (reason) => broken(reason),
  );
  worker.on("message", (batch) => {
    events.messageArrived();
    unpack(batch);
  });
  worker.on("error", (error) => gone(`the worker failed: ${error.message}`));
  worker.on("exit", (code) => gone(`the worker exited with code ${code}`));

  // Commands leave in batches too: the answers to calls that settled in the same turn are one message.
  let outbox: HostCommand[] = [];
  const flush = () => {
    const commands = outbox;
    outbox = [];
    if (closed) return;
    // Call results for a worker that waits on them go through the lane (and its next events, soon, through the event
    // lane); everything else is posted.
    if (commands.every((c) => c.type === "settle") && lane.handOff(JSON.stringify(commands))) {
      events.poll();
      return;
    }
    lane.willPost();
    worker.postMessage(commands);
    lane.posted();
  };
  const channel: HostChannel = {
    shared,
    send(commands) {
      const first = outbox.length === 0;
      for (const command of commands) outbox.push(command);
      if (first) queueMicrotask(flush);
    },
    async kill() {
      closed = true;
      events.close();
      await worker.terminate();
    },
    ref(on) {
      if (on) worker.ref();
      else worker.unref();
    },
  };
  return channel;
}
