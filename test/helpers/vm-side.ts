/** Airlock's VM side in a child process, speaking the QuickJS protocol as newline-delimited JSON on stdio. */
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import type { QuickJsProtocolTransport } from "airlock-codemode/adapter-code-quickjs";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const VM_SIDE = `
import { createInterface } from "node:readline";
import { serveQuickJsProtocol } from "airlock-codemode/adapter-code-quickjs";
let deliver = () => {};
createInterface({ input: process.stdin }).on("line", (line) => { try { deliver(JSON.parse(line)); } catch {} });
serveQuickJsProtocol({ send: (m) => process.stdout.write(JSON.stringify(m) + "\\n"), onMessage: (h) => { deliver = h; } });
`;

/** What a test can see of each child it launched. */
export interface ChildRecord {
  pid: number | undefined;
  killed: boolean;
  exited: boolean;
}

/** Starts one VM side; a line that is not JSON reaches the host as `{ type: "garbage" }`. */
export function launchVmSideChild(children?: ChildRecord[]): QuickJsProtocolTransport {
  const child = spawn(process.execPath, ["--input-type=module", "-e", VM_SIDE], {
    cwd: ROOT,
    stdio: ["pipe", "pipe", "ignore"],
  });
  const record: ChildRecord = { pid: child.pid, killed: false, exited: false };
  children?.push(record);
  child.once("exit", () => {
    record.exited = true;
  });
  child.stdin.on("error", () => {});
  let deliver: (message: unknown) => void = () => {};
  createInterface({ input: child.stdout }).on("line", (line) => {
    let message: unknown;
    try {
      message = JSON.parse(line);
    } catch {
      message = { type: "garbage" };
    }
    deliver(message);
  });
  return {
    send: (message) => child.stdin.write(`${JSON.stringify(message)}\n`),
    onMessage: (handler) => {
      deliver = handler;
    },
    onClose: (handler) => child.once("exit", handler),
    close: () => {
      record.killed = true;
      child.kill("SIGKILL");
    },
  };
}
