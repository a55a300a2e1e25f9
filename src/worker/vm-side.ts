/**
 * Entry of a worker thread of the pool: the one serve loop (engine/serve.ts) over the worker's port and the shared
 * lanes. Bundlers that move Airlock's files can point `workerUrl` at a file that imports `airlock-codemode/worker`.
 */
import { isMainThread, parentPort, workerData } from "node:worker_threads";
import { vmImageOf } from "../engine/prebuilt-image.ts";
import type { VmMessage } from "../engine/protocol.ts";
import { TurnSlot } from "../engine/runner.ts";
import { serveVm } from "../engine/serve.ts";
import type { WorkerData } from "./channel.ts";
import { WorkerEventLane } from "./event-lane.ts";
import { LANE_BYTES, WorkerLane } from "./lane.ts";
import { currentThreadId } from "./thread-clock.ts";

/** How long a worker whose runs all wait on tools blocks on the lane before it goes back to its event loop. */
const LANE_WAIT_MS = 5;

if (!isMainThread && parentPort) {
  const port = parentPort;
  // Nothing a worker prints reaches the host: the VM's WASI writes are discarded already, and this drops the rest
  // (a piped stdio stream would also keep the host's event loop alive after the pool went idle).
  process.stdout.write = () => true;
  process.stderr.write = () => true;
  const data = workerData as WorkerData;
  Atomics.store(data.turn, TurnSlot.thread, currentThreadId());
  const lane = new WorkerLane(data.lane);
  const eventLane = new WorkerEventLane(data.events);
  const send = (messages: VmMessage[], chars: number) => {
    // Only batches that can fit are turned into JSON for the event lane; the rest are posted (structured clone).
    if (eventLane.hostPolls() && chars <= LANE_BYTES) {
      if (eventLane.offer(JSON.stringify(messages))) return;
    }
    eventLane.posting();
    port.postMessage(messages);
  };
  const server = serveVm(
    { send },
    {
      module: data.module,
      maxStackSize: data.maxStackSize,
      maxVms: data.maxVms,
      image: data.image && vmImageOf(data.image),
      stopFlags: data.stopFlags,
      handled: data.handled,
      computed: data.computed,
      turn: data.turn,
      turnEpochMs: data.turnEpochMs,
    },
  );
  const handleAll = (commands: unknown) => {
    if (Array.isArray(commands)) for (const command of commands) server.receive(command);
    else server.receive(commands);
    // While every run waits on tools and nothing else needs this thread, the answers come through the lane.
    while (server.onlyWaitingOnCalls) {
      server.flush();
      const json = lane.wait(LANE_WAIT_MS);
      if (json === undefined) return;
      for (const command of JSON.parse(json) as unknown[]) server.receive(command);
    }
  };
  port.on("message", (commands: unknown) => {
    lane.received++;
    handleAll(commands);
  });
}
