/**
 * What a VM side across a pipe does with the commands that piled up while a turn computed, and what the host's
 * journal keeps of a moved run's calls: a run stopped in the same batch never starts (the host moved it away, and
 * starting it would compute a whole turn before its stop is read), and a run whose calls carry large arguments stays
 * movable, its replay still checked call by call.
 */
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { serveQuickJsProtocol } from "airlock-codemode/adapter-code-quickjs";
import { describe, expect, it } from "vitest";
import { WORKER_MAX_STACK_SIZE } from "../dist/engine/limits.js";
import { runConfiguration } from "../dist/engine/protocol.js";
import { serveVm } from "../dist/engine/serve.js";
import { loadQuickJSWasm } from "../dist/engine/wasm/load.js";
import { argsKey, Journal, KEPT_ARGS_CHARS, Replay } from "../dist/host/journal.js";
import { encodeFrame, FrameReader } from "../dist/process/frames.js";

const request = (exec: number, code: string) => ({
  exec,
  slot: exec - 1,
  code,
  configuration: runConfiguration({
    tools: [{ name: "add", id: "add", description: "" }],
    globals: [],
    deterministic: false,
    program: false,
  }),
  store: {},
  memoryLimitBytes: 16 * 1024 * 1024,
  timeLeftMs: 5_000,
  cpuLimitMs: null,
  interruptBudget: null,
  maxCalls: 10,
  deterministic: null,
  random: null,
  journal: false,
  replayClock: null,
  answers: null,
  restore: null,
  program: null,
});

async function vmSide() {
  const sent: { type: string; exec?: number; result?: { ok: boolean; error?: unknown } }[] = [];
  const server = serveVm(
    { send: (messages) => sent.push(...(messages as typeof sent)) },
    { module: loadQuickJSWasm(), maxStackSize: WORKER_MAX_STACK_SIZE, maxVms: 4 },
  );
  await server.ready;
  await new Promise((resolve) => setTimeout(resolve, 0));
  sent.length = 0;
  return { server, sent };
}

const settled = () => new Promise((resolve) => setTimeout(resolve, 20));

describe("a VM side's batch of commands", () => {
  it("never starts a run stopped in the same batch, and runs the others in it", async () => {
    const { server, sent } = await vmSide();
    server.receiveBatch([
      { type: "run", request: request(1, "await tools.add({ a: 1, b: 2 }); return 1") },
      { type: "run", request: request(2, "return 2") },
      { type: "stop", exec: 1, reason: "aborted" },
    ]);
    await settled();
    // The stopped run made no call: it never computed.
    expect(sent.filter((m) => m.type === "call")).toEqual([]);
    const done = sent.filter((m) => m.type === "done");
    expect(done.map((m) => [m.exec, m.result?.ok])).toEqual([
      [1, false],
      [2, true],
    ]);
    expect(done[0]?.result?.error).toMatchObject({ kind: "aborted" });
    server.close();
  });

  it("stops a waiting run before the answers that came with its stop resume it", async () => {
    const { server, sent } = await vmSide();
    server.receiveBatch([
      { type: "run", request: request(1, "const a = await tools.add({ a: 1, b: 2 }); text('resumed'); return a") },
    ]);
    await settled();
    expect(sent.filter((m) => m.type === "call")).toHaveLength(1);
    server.receiveBatch([
      { type: "settle", exec: 1, id: 1, outcome: { ok: true, value: "3" }, seq: null, now: null },
      { type: "stop", exec: 1, reason: "aborted" },
    ]);
    await settled();
    expect(sent.filter((m) => m.type === "output")).toEqual([]);
    expect(sent.filter((m) => m.type === "done").map((m) => m.result?.ok)).toEqual([false]);
    server.close();
  });

  it("takes a batch without stops in order, as one message after another", async () => {
    const { server, sent } = await vmSide();
    server.receiveBatch([
      { type: "run", request: request(1, "return 1") },
      { type: "run", request: request(2, "return 2") },
    ]);
    await settled();
    expect(sent.filter((m) => m.type === "done").map((m) => [m.exec, m.result?.ok])).toEqual([
      [1, true],
      [2, true],
    ]);
    server.close();
  });
});

/** A program run (the QuickJS protocol's VM side runs only programs) that calls `add` once, then returns. */
const programRequest = (exec: number) => ({
  ...request(exec, "async (input, tools) => { await tools.call('add', { a: 1, b: 2 }); return input; }"),
  configuration: runConfiguration({
    tools: [{ name: "add", id: "add", description: "" }],
    globals: [],
    deterministic: false,
    program: true,
  }),
  program: { input: String(exec) },
});

/** A run, another, and the first one's stop, as a pipe holds them after a turn: the first never starts. */
const batchWithStop = () => [
  { type: "run", request: programRequest(1) },
  { type: "run", request: programRequest(2) },
  { type: "stop", exec: 1, reason: "aborted" },
];

type Sent = { type: string; exec?: number; result?: { ok: boolean } };

describe("the QuickJS protocol's VM side, given a batch", () => {
  it("over a transport that hands messages over together, never starts a run stopped in the same batch", async () => {
    const sent: Sent[] = [];
    let receive: (messages: unknown[]) => void = () => {};
    const served = serveQuickJsProtocol({
      send: (message) => sent.push(message as Sent),
      onMessage: () => {},
      onMessages: (handler) => {
        receive = handler;
      },
    });
    await served.ready;
    receive(batchWithStop());
    await settled();
    // Only run 2 called its tool: run 1 never computed.
    expect(sent.filter((m) => m.type === "call").map((m) => m.exec)).toEqual([2]);
    expect(sent.filter((m) => m.type === "done").map((m) => [m.exec, m.result?.ok])).toEqual([[1, false]]);
    served.close();
  });

  it("in the container entry, takes a chunk of frames together", async () => {
    const entry = fileURLToPath(new URL("../dist/docker/vm-side.js", import.meta.url));
    const child = spawn(process.execPath, [entry], { stdio: ["pipe", "pipe", "ignore"] });
    const sent: Sent[] = [];
    const reader = new FrameReader();
    child.stdout.on("data", (chunk: Buffer) => sent.push(...(reader.push(chunk) as Sent[])));
    try {
      const until = async (what: () => boolean) => {
        const started = Date.now();
        while (!what()) {
          if (Date.now() - started > 20_000) throw new Error(`timed out; the entry sent ${JSON.stringify(sent)}`);
          await new Promise((resolve) => setTimeout(resolve, 5));
        }
      };
      await until(() => sent.some((m) => m.type === "ready"));
      // One write: the three frames reach the entry in one chunk.
      child.stdin.write(Buffer.concat(batchWithStop().map((message) => encodeFrame(message))));
      await until(() => sent.some((m) => m.type === "call"));
      await settled();
      expect(sent.filter((m) => m.type === "call").map((m) => m.exec)).toEqual([2]);
      expect(sent.filter((m) => m.type === "done").map((m) => [m.exec, m.result?.ok])).toEqual([[1, false]]);
    } finally {
      child.kill("SIGKILL");
    }
  });
});

describe("a run's journal with large call arguments", () => {
  const call = (id: number, args: string) =>
    ({ type: "call", exec: 1, id, target: "tool", name: "sink", args }) as const;

  it("keeps short arguments as they are and long ones as their length and digest, so the run stays movable", () => {
    expect(argsKey('{"a":1}')).toBe('{"a":1}');
    const long = JSON.stringify("\\".repeat(1e6));
    expect(long.length).toBeGreaterThan(KEPT_ARGS_CHARS);
    expect(argsKey(long)).toMatch(/^#2000002:[0-9a-f]+$/);
    const journal = new Journal(8 * 1024 * 1024);
    // Twenty calls of 2 Mi characters each: far past the journal's limit if it kept them.
    for (let id = 1; id <= 20; id++) journal.noteEvent(call(id, long));
    expect(journal.lost).toBe(false);
    const replay = new Replay(journal);
    for (let id = 1; id <= 20; id++) expect(replay.check(call(id, long))).toBe("replayed");
    expect(replay.caughtUp).toBe(true);
  });

  it("still tells a replay whose large arguments differ, even by one character of the same length", () => {
    const long = JSON.stringify("a".repeat(10_000));
    const other = JSON.stringify(`${"a".repeat(9_999)}b`);
    expect(other.length).toBe(long.length);
    const journal = new Journal(8 * 1024 * 1024);
    journal.noteEvent(call(1, long));
    expect(new Replay(journal).check(call(1, other))).toMatch(/where its first attempt made call 1/);
  });
});
