/**
 * Entry of a worker thread of the pool: one VmRunner whose events go to the parent as messages. Bundlers that move
 * Airlock's files can point `workerUrl` at a file that imports `airlock/worker`.
 */
import { isMainThread, parentPort, workerData } from "node:worker_threads";
import type { HostCommand } from "../engine/protocol.ts";
import { PROTOCOL_VERSION } from "../engine/protocol.ts";
import { VmRunner } from "../engine/runner.ts";

export interface WorkerData {
  module: WebAssembly.Module;
  stopFlags: Int32Array;
  maxStackSize: number;
  maxVms: number;
}

if (!isMainThread && parentPort) {
  const port = parentPort;
  const data = workerData as WorkerData;
  const runner = new VmRunner({ ...data, emit: (event) => port.postMessage(event) });
  let isReady = false;
  const ready = runner.init().then(() => {
    isReady = true;
  });
  port.on("message", (command: HostCommand) => {
    if (isReady) runner.handle(command);
    else ready.then(() => runner.handle(command));
  });
  ready.then(
    () => port.postMessage({ type: "ready", protocol: PROTOCOL_VERSION, versions: runner.versions }),
    (error: unknown) =>
      port.postMessage({ type: "failed", message: error instanceof Error ? error.message : String(error) }),
  );
}
