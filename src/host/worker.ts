/**
 * Entry of a worker thread of the pool: one VmRunner whose events go to the parent as messages. Bundlers that move
 * Airlock's files can point `workerUrl` at a file that imports `airlock-codemode/worker`.
 */
import { isMainThread, parentPort, workerData } from "node:worker_threads";
import type { HostCommand, VmEvent } from "../engine/protocol.ts";
import { PROTOCOL_VERSION } from "../engine/protocol.ts";
import { VmRunner } from "../engine/runner.ts";
import { WorkerEventLane } from "./event-lane.ts";
import { WorkerLane } from "./lane.ts";

export interface WorkerData {
  module: WebAssembly.Module;
  stopFlags: Int32Array;
  /** See lane.ts. */
  lane: SharedArrayBuffer;
  /** See event-lane.ts. */
  events: SharedArrayBuffer;
  maxStackSize: number;
  maxVms: number;
  /** See RunnerOptions.running. */
  running: Int32Array;
}

/** How long a worker whose runs all wait on tools blocks on the lane before it goes back to its event loop. */
const LANE_WAIT_MS = 5;

if (!isMainThread && parentPort) {
  const port = parentPort;
  // Nothing a worker prints reaches the host: the VM's WASI writes are discarded already, and this drops the rest
  // (a piped stdio stream would also keep the host's event loop alive after the pool went idle).
  process.stdout.write = () => true;
  process.stderr.write = () => true;
  const data = workerData as WorkerData;
  const lane = new WorkerLane(data.lane);
  const eventLane = new WorkerEventLane(data.events);
  // Events leave in batches: everything one turn of the VM produced (calls started together, a loop of text()) is one
  // message, sent once the current command has been handled.
  let outbox: VmEvent[] = [];
  const flush = () => {
    if (outbox.length === 0) return;
    const events = outbox;
    outbox = [];
    if (eventLane.offer(JSON.stringify(events))) return;
    eventLane.posting();
    port.postMessage(events);
  };
  const runner = new VmRunner({
    ...data,
    emit: (event) => {
      if (outbox.push(event) === 1) queueMicrotask(flush);
    },
  });
  let isReady = false;
  const ready = runner.init().then(() => {
    isReady = true;
  });
  const handleAll = (commands: HostCommand[]) => {
    for (const command of commands) runner.handle(command);
    // While every run waits on tools and nothing else needs this thread, the answers come through the lane.
    while (runner.onlyWaitingOnCalls) {
      flush();
      const json = lane.wait(LANE_WAIT_MS);
      if (json === undefined) return;
      for (const command of JSON.parse(json) as HostCommand[]) runner.handle(command);
    }
  };
  port.on("message", (commands: HostCommand[]) => {
    lane.received++;
    if (isReady) handleAll(commands);
    else ready.then(() => handleAll(commands));
  });
  ready.then(
    () => port.postMessage({ type: "ready", protocol: PROTOCOL_VERSION, versions: runner.versions }),
    (error: unknown) =>
      port.postMessage({ type: "failed", message: error instanceof Error ? error.message : String(error) }),
  );
}
