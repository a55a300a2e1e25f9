#!/usr/bin/env node
/** The `airlock` executable: wires the command line to this process and exits as soon as the command is done. */
import { EXIT_FAILED } from "./args.ts";
import { cli } from "./cli.ts";
import type { CliIo } from "./command.ts";
import { startProgress } from "./progress.ts";

for (const [name, stream] of [
  ["stdout", process.stdout],
  ["stderr", process.stderr],
] as const) {
  stream.on("error", (error: NodeJS.ErrnoException) => {
    // A closed pipe (`airlock run x.js | head -1`) is not an error worth a message.
    if (error.code === "EPIPE") return;
    // Any other (a full disk, say) ends the command with one line, not an uncaught-exception dump.
    if (name === "stdout") process.stderr.write(`airlock: cannot write to stdout: ${error.message}\n`);
    process.exit(EXIT_FAILED);
  });
}

const io: CliIo = {
  cwd: process.cwd(),
  stdout: (text) => void process.stdout.write(text),
  stderr: (text) => void process.stderr.write(text),
  async readStdin() {
    let text = "";
    process.stdin.setEncoding("utf8");
    for await (const chunk of process.stdin) text += chunk;
    return text;
  },
  onInterrupt(handler) {
    let interrupts = 0;
    const listener = () => {
      // The first Ctrl-C aborts the run; a second one while the abort is under way leaves at once.
      if (++interrupts > 1) process.exit(130);
      handler();
    };
    process.on("SIGINT", listener);
    return () => void process.off("SIGINT", listener);
  },
  progress: (text) => startProgress(process.stderr, text),
};

const status = await cli(process.argv.slice(2), io);
// Tools may leave timers or sockets open; wait for the output to drain, then leave.
await Promise.all([process.stdout, process.stderr].map((s) => new Promise((done) => s.write("", () => done(null)))));
process.exit(status);
