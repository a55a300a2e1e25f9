/**
 * Entry of a sandboxed child process: the one serve loop (engine/serve.ts) over framed stdio. Commands arrive as
 * frames on stdin and messages leave as frames on stdout; the child shares no memory with the host and is stopped by
 * a `stop` command or, if it does not comply in time, by SIGKILL. It exits when stdin closes. Nothing but frames is
 * ever written to stdout.
 *
 * argv[2] is a JSON object of ChildConfig.
 */
import { WORKER_MAX_STACK_SIZE } from "../engine/limits.ts";
import { prebuiltImage, vmImageOf } from "../engine/prebuilt-image.ts";
import type { VmMessage } from "../engine/protocol.ts";
import { serveVm } from "../engine/serve.ts";
import { loadQuickJSWasm } from "../engine/wasm/load.ts";
import { encodeFrame, FrameReader } from "./frames.ts";

export interface ChildConfig {
  maxVms: number;
  /** CPU time (ms) after which the child asks to be replaced, well before its RLIMIT_CPU ends it. */
  retireCpuMs: number | null;
}

function parseConfig(text: string | undefined): ChildConfig {
  const value = JSON.parse(text ?? "{}") as Partial<ChildConfig>;
  const maxVms = value.maxVms;
  if (typeof maxVms !== "number" || !Number.isInteger(maxVms) || maxVms < 1) throw new Error("maxVms is invalid");
  const retire = value.retireCpuMs ?? null;
  if (retire !== null && (typeof retire !== "number" || !(retire > 0))) throw new Error("retireCpuMs is invalid");
  return { maxVms, retireCpuMs: retire };
}

/** Frames of messages, written at once: stdout is a pipe, written synchronously (also from inside a turn). */
function write(messages: VmMessage[]): void {
  const frames = messages.map((message) => encodeFrame(message));
  process.stdout.write(frames.length === 1 ? (frames[0] as Buffer) : Buffer.concat(frames));
}

function main(): void {
  // Anything printed by accident goes to stderr, which the host drains and bounds; stdout carries frames only.
  const toStderr = (...args: unknown[]) => process.stderr.write(`${args.map(String).join(" ")}\n`);
  for (const name of ["log", "info", "warn", "error", "debug", "trace", "dir"] as const) {
    (console as unknown as Record<string, unknown>)[name] = toStderr;
  }
  const config = parseConfig(process.argv[2]);
  const fatal = (message: string) => {
    process.stderr.write(`airlock child: ${message}\n`);
    process.exit(70);
  };
  const module = loadQuickJSWasm();
  const image = prebuiltImage(module);
  const server = serveVm(
    { send: write, sendNow: (message) => write([message]) },
    {
      module,
      image: image && vmImageOf(image),
      maxStackSize: WORKER_MAX_STACK_SIZE,
      maxVms: config.maxVms,
      retireCpuMs: config.retireCpuMs,
      onProtocolError: (error) => fatal(`the host sent a command that breaks the protocol: ${error.message}`),
    },
  );
  server.ready.catch(() => {
    process.exitCode = 1;
    process.stdin.destroy();
  });
  const reader = new FrameReader();
  process.stdin.on("data", (chunk: Buffer) => {
    let messages: unknown[];
    try {
      messages = reader.push(chunk);
    } catch (error) {
      fatal((error as Error).message);
      return;
    }
    server.receiveBatch(messages);
  });
  process.stdin.on("end", () => process.exit(0));
}

main();
