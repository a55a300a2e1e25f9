/**
 * The container's entry: Airlock's VM side (`serveQuickJsProtocol`) over stdin/stdout, one length-prefixed JSON frame
 * per message (the framing of the process tier). It exits when stdin closes. Nothing else is written to stdout.
 */

import { encodeFrame, FrameReader } from "../process/frames.ts";
import { serveQuickJsProtocol } from "../transport/vm-side.ts";

let receive: ((messages: unknown[]) => void) | undefined;
const reader = new FrameReader();
for (const name of ["log", "info", "warn", "error", "debug", "trace", "dir"] as const) {
  (console as unknown as Record<string, unknown>)[name] = (...args: unknown[]) =>
    process.stderr.write(`${args.map(String).join(" ")}\n`);
}
process.stdin.on("data", (chunk: Buffer) => {
  let messages: unknown[];
  try {
    messages = reader.push(chunk);
  } catch (error) {
    process.stderr.write(`airlock container: ${(error as Error).message}\n`);
    process.exit(70);
  }
  // A chunk's messages go together: a stop among them is handled first (see QuickJsServerTransport.onMessages).
  receive?.(messages);
});
process.stdin.on("end", () => process.exit(0));
serveQuickJsProtocol({
  send: (message) => process.stdout.write(encodeFrame(message)),
  onMessage: (handler) => {
    receive ??= (messages) => {
      for (const message of messages) handler(message);
    };
  },
  onMessages: (handler) => {
    receive = handler;
  },
});
