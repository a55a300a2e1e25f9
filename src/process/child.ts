/**
 * Entry of a sandboxed child process: one VmRunner whose commands arrive as frames on stdin and whose events leave as
 * frames on stdout. The child shares no memory with the host; it is stopped by a `stop` command and, if it does not
 * comply in time, by SIGKILL. It exits when stdin closes. Nothing but frames is ever written to stdout.
 *
 * argv[2] is a JSON object of ChildConfig.
 */
import { WORKER_MAX_STACK_SIZE } from "../engine/limits.ts";
import { type HostCommand, PROTOCOL_VERSION, type VmEvent } from "../engine/protocol.ts";
import { VmRunner } from "../engine/runner.ts";
import { loadQuickJSWasm } from "../engine/wasm.ts";
import { encodeFrame, FrameReader } from "./frames.ts";

export interface ChildConfig {
  maxVms: number;
  /** CPU time (ms) after which the child asks to be replaced, well before its RLIMIT_CPU ends it. */
  retireCpuMs: number | null;
}

/** Messages of the child other than VM events. */
export type ChildMessage =
  | { type: "ready"; protocol: number; versions: Record<string, string> }
  | { type: "failed"; message: string }
  | { type: "retire" }
  /** The run whose turn has computed for LONG_TURN_MS (null: that turn ended); see the pool's stop grace. */
  | { type: "busy"; exec: number | null };

/**
 * Messages leave in batches: everything one turn of the VM produced is one write, so that the host sees the calls a
 * turn issued together (a deterministic run's hooks may deliver to any of them) and the child makes one syscall.
 */
let outbox: Buffer[] = [];

function send(message: VmEvent | ChildMessage): void {
  if (outbox.push(encodeFrame(message)) === 1) queueMicrotask(flush);
}

/** Writes what is queued, then `message` if given (at once: a turn that computes gives no microtask a chance). */
function flush(message?: ChildMessage): void {
  if (message !== undefined) outbox.push(encodeFrame(message));
  if (outbox.length === 0) return;
  const frames = outbox;
  outbox = [];
  process.stdout.write(frames.length === 1 ? (frames[0] as Buffer) : Buffer.concat(frames));
}

function parseConfig(text: string | undefined): ChildConfig {
  const value = JSON.parse(text ?? "{}") as Partial<ChildConfig>;
  const maxVms = value.maxVms;
  if (typeof maxVms !== "number" || !Number.isInteger(maxVms) || maxVms < 1) throw new Error("maxVms is invalid");
  const retire = value.retireCpuMs ?? null;
  if (retire !== null && (typeof retire !== "number" || !(retire > 0))) throw new Error("retireCpuMs is invalid");
  return { maxVms, retireCpuMs: retire };
}

function isCommand(value: unknown): value is HostCommand {
  if (value === null || typeof value !== "object") return false;
  const type = (value as { type?: unknown }).type;
  return type === "run" || type === "settle" || type === "stop";
}

function main(): void {
  // Anything printed by accident goes to stderr, which the host drains and bounds; stdout carries frames only.
  const toStderr = (...args: unknown[]) => process.stderr.write(`${args.map(String).join(" ")}\n`);
  for (const name of ["log", "info", "warn", "error", "debug", "trace", "dir"] as const) {
    (console as unknown as Record<string, unknown>)[name] = toStderr;
  }
  const config = parseConfig(process.argv[2]);
  const runner = new VmRunner({
    module: loadQuickJSWasm(),
    maxStackSize: WORKER_MAX_STACK_SIZE,
    maxVms: config.maxVms,
    emit: (event) => {
      send(event);
      if (event.type === "done") checkCpu();
    },
    // Written synchronously (stdout is a pipe), from inside the turn: the host reads it while the turn goes on.
    onLongTurn: (exec) => flush({ type: "busy", exec }),
  });
  let retired = false;
  const checkCpu = () => {
    if (retired || config.retireCpuMs === null) return;
    const usage = process.cpuUsage();
    if ((usage.user + usage.system) / 1000 > config.retireCpuMs) {
      retired = true;
      send({ type: "retire" });
    }
  };
  let isReady = false;
  const queued: HostCommand[] = [];
  const reader = new FrameReader();
  process.stdin.on("data", (chunk: Buffer) => {
    let messages: unknown[];
    try {
      messages = reader.push(chunk);
    } catch (error) {
      process.stderr.write(`airlock child: ${(error as Error).message}\n`);
      process.exit(70);
    }
    for (const message of messages) {
      if (!isCommand(message)) {
        process.stderr.write("airlock child: the host sent an unknown command\n");
        process.exit(70);
      }
      if (isReady) runner.handle(message);
      else queued.push(message);
    }
  });
  process.stdin.on("end", () => process.exit(0));
  runner.init().then(
    () => {
      isReady = true;
      send({ type: "ready", protocol: PROTOCOL_VERSION, versions: runner.versions });
      for (const command of queued.splice(0)) runner.handle(command);
    },
    (error: unknown) => {
      send({ type: "failed", message: error instanceof Error ? error.message : String(error) });
      process.exitCode = 1;
      process.stdin.destroy();
    },
  );
}

main();
