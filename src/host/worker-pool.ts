/**
 * Runs VMs on a warm pool of worker threads. Each worker boots once (module, prelude, image) and then runs many
 * executions, each on its own post-prelude VM; executions waiting on tools do not block each other, and a script that
 * computes occupies only its worker. The host stops a run through a shared flag that the VM polls; a worker that does
 * not stop in time is terminated and replaced off the request path.
 */
import { availableParallelism } from "node:os";
import { Worker, type WorkerOptions } from "node:worker_threads";
import { WORKER_MAX_STACK_SIZE, WORKER_STACK_SIZE_MB } from "../engine/limits.ts";
import {
  type HostCommand,
  PROTOCOL_VERSION,
  parseVmEvent,
  StopCode,
  sandboxFailure,
  type VmEvent,
} from "../engine/protocol.ts";
import { createEventLaneBuffer, HostEventLane } from "./event-lane.ts";
import { createLaneBuffer, HostLane } from "./lane.ts";
import {
  armStopGrace,
  failRuns,
  type LaunchedRun,
  type Launcher,
  type LaunchRequest,
  type RunEntry,
} from "./launcher.ts";
import type { WorkerData } from "./worker.ts";

/** Time a worker has to end a stopped run before it is terminated (generous: a loaded machine can delay a thread). */
export const STOP_GRACE_MS = 2_000;
/** Executions one worker can track at once (the size of its shared stop flags); more wait on the host. */
const SLOTS_PER_WORKER = 4096;
/** Events one message may carry: a VM turn emits at most its output items plus its calls. */
const MAX_EVENTS_PER_MESSAGE = 1_000_000;

export interface WorkerPoolOptions {
  module: WebAssembly.Module;
  /** Worker threads; default: the machine's available parallelism. */
  size?: number;
  /** VMs per worker, for executions that wait on tools concurrently. */
  maxVmsPerWorker: number;
  workerUrl?: string | URL;
  /** Executions per worker before more wait (internal: tests use a few); default `SLOTS_PER_WORKER`. */
  slotsPerWorker?: number;
}

/** An execution waiting for a free slot; `run` is set once it started on a worker. */
interface Waiting {
  exec: number;
  request: LaunchRequest;
  onEvent: (event: VmEvent) => void;
  run: LaunchedRun | undefined;
}

interface PoolRunEntry extends RunEntry {
  slot: number;
}

class PoolWorker {
  readonly worker: Worker;
  readonly flags: Int32Array;
  /** Which run the worker is computing (see RunnerOptions.running). */
  readonly running = new Int32Array(new SharedArrayBuffer(4));
  private readonly laneBuffer = createLaneBuffer();
  private readonly lane = new HostLane(this.laneBuffer);
  private readonly eventsBuffer = createEventLaneBuffer();
  private readonly events = new HostEventLane(
    this.eventsBuffer,
    (json) => {
      let batch: unknown;
      try {
        batch = JSON.parse(json);
      } catch {
        this.kill("the worker broke the protocol: an event batch is not JSON");
        return;
      }
      this.onMessage(batch);
    },
    (reason) => this.kill(reason),
  );
  readonly runs = new Map<number, PoolRunEntry>();
  private readonly freeSlots: number[] = [];
  readonly ready: Promise<void>;
  dead = false;
  booted = false;

  constructor(
    private readonly pool: WorkerPool,
    options: WorkerPoolOptions,
  ) {
    const slots = options.slotsPerWorker ?? SLOTS_PER_WORKER;
    this.flags = new Int32Array(new SharedArrayBuffer(slots * 4));
    for (let i = slots - 1; i >= 0; i--) this.freeSlots.push(i);
    const data: WorkerData = {
      module: options.module,
      stopFlags: this.flags,
      running: this.running,
      lane: this.laneBuffer,
      events: this.eventsBuffer,
      maxStackSize: WORKER_MAX_STACK_SIZE,
      maxVms: options.maxVmsPerWorker,
    };
    this.worker = startWorker(options.workerUrl ?? new URL("./worker.js", import.meta.url), {
      workerData: data,
      resourceLimits: { stackSizeMb: WORKER_STACK_SIZE_MB },
    });
    this.worker.unref();
    this.ready = new Promise((resolve, reject) => {
      const onFirst = (message: unknown) => {
        const m = message as { type?: string; protocol?: number; message?: string };
        if (m?.type === "ready" && m.protocol === PROTOCOL_VERSION) {
          this.worker.on("message", (event) => {
            this.events.messageArrived();
            this.onMessage(event);
          });
          this.booted = true;
          resolve();
        } else {
          reject(
            new Error(
              m?.type === "failed" ? `the worker could not boot: ${m.message}` : "the worker spoke another protocol",
            ),
          );
          this.kill("the worker could not boot");
        }
      };
      this.worker.once("message", onFirst);
      this.worker.once("error", (error) => reject(error));
      this.worker.once("exit", (code) => reject(new Error(`the worker exited with code ${code} while booting`)));
    });
    this.ready.catch(() => {});
    this.worker.on("error", (error) => this.kill(`the worker failed: ${error.message}`));
    this.worker.on("exit", (code) => this.kill(`the worker exited with code ${code}`));
  }

  takeSlot(): number | undefined {
    const slot = this.freeSlots.pop();
    if (slot !== undefined) Atomics.store(this.flags, slot, StopCode.none);
    return slot;
  }

  /** Commands leave in batches too: the answers to calls that settled in the same turn are one message. */
  private outbox: HostCommand[] = [];

  send(command: HostCommand): void {
    if (this.outbox.push(command) === 1) queueMicrotask(() => this.flush());
  }

  private flush(): void {
    const commands = this.outbox;
    this.outbox = [];
    if (this.dead) return;
    // Call results for a worker that waits on them go through the lane (and its next events, soon, through the event
    // lane); everything else is posted.
    if (commands.every((c) => c.type === "settle") && this.lane.handOff(JSON.stringify(commands))) {
      this.events.poll();
      return;
    }
    this.lane.willPost();
    this.worker.postMessage(commands);
    this.lane.posted();
  }

  private onMessage(message: unknown): void {
    if (this.dead) return;
    if (!Array.isArray(message) || message.length > MAX_EVENTS_PER_MESSAGE) {
      this.kill("the worker broke the protocol: a message is not a batch of events");
      return;
    }
    for (const item of message) {
      if (this.dead) return;
      let event: VmEvent;
      try {
        event = parseVmEvent(item);
      } catch (error) {
        this.kill(`the worker broke the protocol: ${(error as Error).message}`);
        return;
      }
      this.dispatch(event);
    }
  }

  private dispatch(event: VmEvent): void {
    const entry = this.runs.get(event.exec);
    if (!entry) {
      // Late traffic of a run the host already stopped is expected; a run id it never issued is not.
      if (event.exec > this.pool.lastExec) this.kill("the worker sent a message for an unknown execution");
      return;
    }
    if (event.type === "done") this.finishRun(event.exec, entry);
    entry.onEvent(event);
  }

  addRun(exec: number, entry: PoolRunEntry): void {
    if (this.runs.size === 0) this.worker.ref();
    this.runs.set(exec, entry);
  }

  finishRun(exec: number, entry: PoolRunEntry): void {
    this.runs.delete(exec);
    // An idle pool does not keep the process alive.
    if (this.runs.size === 0) this.worker.unref();
    if (entry.stopTimer) clearTimeout(entry.stopTimer);
    this.freeSlots.push(entry.slot);
    this.pool.startWaiting();
  }

  /** Terminates the worker once and fails its open runs with a `sandbox` error. */
  kill(reason: string): void {
    if (this.dead) return;
    this.dead = true;
    this.events.close();
    void this.worker.terminate();
    failRuns(this.runs, reason);
    this.pool.replace(this);
    this.pool.startWaiting();
  }
}

/**
 * Starts a worker with the host's Node flags. A worker inherits them by default, whatever they are, except that
 * `--input-type` (a host run with `-e`) stops it from starting. Leaving that one out means listing the rest, and Node
 * refuses a list with V8 or process-wide flags (`--max-old-space-size`, `--expose-gc`), which a worker shares with
 * the process anyway: such a host's workers start with no flags of their own.
 */
function startWorker(url: string | URL, options: WorkerOptions): Worker {
  const execArgv = process.execArgv;
  const inputType = execArgv.findIndex((flag) => flag === "--input-type" || flag.startsWith("--input-type="));
  if (inputType < 0) return new Worker(url, options);
  const kept = execArgv.filter(
    (_, i) => i !== inputType && !(i === inputType + 1 && execArgv[inputType] === "--input-type"),
  );
  try {
    return new Worker(url, { ...options, execArgv: kept });
  } catch (error) {
    if ((error as { code?: unknown }).code !== "ERR_WORKER_INVALID_EXEC_ARGV") throw error;
    return new Worker(url, { ...options, execArgv: [] });
  }
}

export class WorkerPool implements Launcher {
  private workers: PoolWorker[] = [];
  private closed = false;
  /** Executions past every worker's slots, in the order they were launched. */
  private readonly waiting: Waiting[] = [];
  lastExec = 0;
  readonly size: number;

  constructor(private readonly options: WorkerPoolOptions) {
    this.size = options.size ?? Math.max(1, availableParallelism());
    if (!Number.isInteger(this.size) || this.size < 1) throw new RangeError("poolSize must be a positive integer");
    for (let i = 0; i < this.size; i++) this.workers.push(new PoolWorker(this, options));
  }

  /** Resolves once every worker has booted. */
  async warm(): Promise<void> {
    await Promise.all(this.workers.map((w) => w.ready));
  }

  /** Live worker threads (for tests and monitoring). */
  get threadCount(): number {
    return this.workers.filter((w) => !w.dead).length;
  }

  launch(request: LaunchRequest, onEvent: (event: VmEvent) => void): LaunchedRun {
    const exec = ++this.lastExec;
    const fail = (message: string) => onEvent(sandboxFailure(exec, message));
    const noop: LaunchedRun = { settle: () => {}, stop: () => {} };
    if (this.closed) {
      queueMicrotask(() => fail("the sandbox is closed"));
      return noop;
    }
    if (this.waiting.length === 0) {
      const worker = this.pick();
      const slot = worker.takeSlot();
      if (slot !== undefined) return this.start(worker, slot, exec, request, onEvent);
    }
    // Every slot is taken: the execution waits its turn. Its deadline and abort count all the same (the Execution
    // keeps them); a stop while it waits just drops it.
    const waiting: Waiting = { exec, request, onEvent, run: undefined };
    this.waiting.push(waiting);
    return {
      settle: (id, outcome, seq, now) => waiting.run?.settle(id, outcome, seq, now),
      stop: (reason) => {
        if (waiting.run) waiting.run.stop(reason);
        else {
          const index = this.waiting.indexOf(waiting);
          if (index >= 0) this.waiting.splice(index, 1);
        }
      },
    };
  }

  /** Starts waiting executions, oldest first, while a worker has a free slot. */
  startWaiting(): void {
    while (this.waiting.length > 0 && !this.closed) {
      const worker = this.pick();
      const slot = worker.takeSlot();
      if (slot === undefined) return;
      const next = this.waiting.shift() as Waiting;
      next.run = this.start(worker, slot, next.exec, next.request, next.onEvent);
    }
  }

  private start(
    worker: PoolWorker,
    slot: number,
    exec: number,
    request: LaunchRequest,
    onEvent: (event: VmEvent) => void,
  ): LaunchedRun {
    const entry: PoolRunEntry = { onEvent, slot };
    worker.addRun(exec, entry);
    worker.send({ type: "run", request: { ...request, exec, slot } });
    return {
      settle: (id, outcome, seq, now) => {
        if (worker.runs.has(exec)) worker.send({ type: "settle", exec, id, outcome, seq, now });
      },
      stop: (reason) => {
        if (!worker.runs.has(exec) || entry.stopTimer) return;
        Atomics.store(worker.flags, slot, reason === "timeout" ? StopCode.timeout : StopCode.aborted);
        worker.send({ type: "stop", exec, reason });
        armStopGrace(
          entry,
          STOP_GRACE_MS,
          () => {
            const computing = Atomics.load(worker.running, 0);
            return computing !== 0 && computing !== slot + 1;
          },
          () => worker.kill("the worker did not stop a run in time"),
        );
      },
    };
  }

  /** The live worker with the fewest runs; a worker that failed to boot is restarted here, on demand. */
  private pick(): PoolWorker {
    let best = this.workers[0] as PoolWorker;
    for (const w of this.workers) if (!w.dead && (best.dead || w.runs.size < best.runs.size)) best = w;
    if (best.dead) {
      const index = this.workers.indexOf(best);
      best = new PoolWorker(this, this.options);
      this.workers[index] = best;
    }
    return best;
  }

  /** Replaces a worker that died after booting, off the request path. One that never booted is not respawned in a loop. */
  replace(dead: PoolWorker): void {
    if (this.closed || !dead.booted) return;
    const index = this.workers.indexOf(dead);
    if (index >= 0) this.workers[index] = new PoolWorker(this, this.options);
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const w of this.waiting.splice(0)) w.onEvent(sandboxFailure(w.exec, "the sandbox is closed"));
    const workers = this.workers;
    for (const w of workers) w.kill("the sandbox is closed");
    await Promise.all(workers.map((w) => w.worker.terminate()));
  }
}
