import { AirlockError, Budget, invokeTool, z } from "airlock-codemode";
import {
  createQuickJsProtocolAdapter,
  QUICKJS_PROTOCOL,
  QUICKJS_PROTOCOL_VERSION,
  type QuickJsProtocolTransport,
  type QuickJsVmMessage,
  serveQuickJsProtocol,
} from "airlock-codemode/adapter-code-quickjs";
import {
  CODE_PROGRAM_LIMITS,
  type CodeExecutionOutcome,
  type CodeModeInvokeTool,
  createCodeMode,
  defineCodeProgram,
} from "airlock-codemode/code-mode";
import { afterAll, describe, expect, it, vi } from "vitest";
import { runConfiguration } from "../dist/engine/protocol.js";
import { REMOTE_STOP_GRACE_MS } from "../dist/host/pool.js";
import { echoTool } from "./helpers/code-mode.ts";
import { doneMessage, fakeLaunch, stoppedMessage } from "./helpers/fake-vm-side.ts";
import { type ChildRecord, launchVmSideChild } from "./helpers/vm-side.ts";

const children: ChildRecord[] = [];
const launchChild = () => launchVmSideChild(children);

const echo = echoTool(0);
const broker: CodeModeInvokeTool = (tool, input, context) =>
  invokeTool(tool, input, {
    ...context,
    permissions: { allow: [`tool:${tool.id}`, `effect:${tool.effects}`] },
    budget: new Budget(0, 1_000),
  });
const program = (source: string, cpuMillis = 1_000, wallTimeMillis = 10_000) =>
  defineCodeProgram({
    id: "p",
    version: "1",
    intent: "A test.",
    language: "javascript",
    source,
    input: z.unknown(),
    output: z.unknown(),
    inputSchemaId: "any.v1",
    outputSchemaId: "any.v1",
    tools: [echo],
    limits: { ...CODE_PROGRAM_LIMITS, cpuMillis, wallTimeMillis, maxToolConcurrency: 2 },
  });
let sequence = 0;
const run = (signal: AbortSignal = new AbortController().signal) => ({
  runId: "r",
  executionId: `proto-${++sequence}`,
  scope: { principalId: "p" },
  signal,
});
/** A program run as the host sends it: deterministic ones start their clock at 1,000 ms, with seed 1. */
const programRequest = (code: string, deterministic: boolean, input = "null") => ({
  exec: 1,
  slot: 0,
  code,
  configuration: runConfiguration({ tools: [], globals: [], deterministic, program: true }),
  store: {},
  memoryLimitBytes: 16 * 1024 * 1024,
  timeLeftMs: 5_000,
  cpuLimitMs: 1_000,
  interruptBudget: null,
  maxCalls: 10,
  deterministic: deterministic ? { startedAt: 1_000, seed: 1 } : null,
  random: null,
  journal: false,
  replayClock: null,
  answers: null,
  restore: null,
  program: { input },
});
const codeOf = (outcome: CodeExecutionOutcome<unknown>) => (outcome.status === "succeeded" ? "OK" : outcome.error.code);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
/** A VM side served in this process over an in-memory transport: what it sent, and a way to hand it messages. */
async function servedVmSide() {
  const sent: QuickJsVmMessage[] = [];
  let handle: (message: unknown) => void = () => {};
  const server = serveQuickJsProtocol({
    // `busy` is a hint a loaded machine sends whenever a turn computes for a few milliseconds: these tests follow the
    // protocol's other messages (the adapter tests above cover `busy`).
    send: (message) => {
      if (message.type !== "busy") sent.push(message);
    },
    onMessage: (handler) => {
      handle = handler;
    },
  });
  await server.ready;
  return { sent, deliver: (message: unknown) => handle(message), server };
}

describe("the QuickJS protocol adapter", () => {
  const adapter = createQuickJsProtocolAdapter({ id: "child-process", version: "1", launch: launchChild });
  afterAll(() => adapter.close());

  it("is qualified 'test' by default: refused with UNSUPPORTED_PROFILE unless allowTestAdapter", () => {
    expect(adapter.qualification).toBe("test");
    try {
      createCodeMode({ adapter, invokeTool: broker });
      expect.unreachable();
    } catch (error) {
      expect(error).toBeInstanceOf(AirlockError);
      expect((error as AirlockError).code).toBe("UNSUPPORTED_PROFILE");
    }
    const production = createQuickJsProtocolAdapter({
      id: "declared",
      version: "1",
      qualification: "production",
      launch: launchChild,
    });
    expect(createCodeMode({ adapter: production, invokeTool: broker }).adapter.qualification).toBe("production");
    expect(() => createQuickJsProtocolAdapter({ id: "x", version: "1" } as never)).toThrow(AirlockError);
    // A misspelt option never leaves its default (here the `test` qualification) in place unnoticed.
    expect(() =>
      createQuickJsProtocolAdapter({ id: "x", version: "1", launch: launchChild, qualfication: "production" } as never),
    ).toThrowError(
      expect.objectContaining({
        code: "INVALID_CONFIG",
        message:
          'createQuickJsProtocolAdapter has no option "qualfication" (it takes id, version, qualification, launch, maxPoolSize, isAvailable)',
      }),
    );
  });

  it("runs programs and their tool calls in the child process", async () => {
    const mode = createCodeMode({ adapter, invokeTool: broker, allowTestAdapter: true });
    const sum = program(`async (input, tools) => {
      const results = await Promise.all(input.map((value) => tools.call("echo", { value })));
      return results.reduce((total, r) => total + r.output.value, 0);
    }`);
    expect(await mode.execute(sum, [1, 2, 3, 4], run())).toMatchObject({ status: "succeeded", output: 10 });
    const spin = await mode.execute(program("async () => { while (true) {} }", 50), null, run());
    expect(codeOf(spin)).toBe("LIMIT_EXCEEDED");
    const thrown = await mode.execute(program(`async () => { throw new RangeError("nope"); }`), null, run());
    expect(thrown.status !== "succeeded" && thrown.programError).toEqual({ name: "RangeError", message: "nope" });
    expect(children.filter((c) => !c.killed)).toHaveLength(1);
  });

  it("closes a VM side that is too busy to read a stop, and launches a new one for the next run", async () => {
    const mode = createCodeMode({ adapter, invokeTool: broker, allowTestAdapter: true });
    const before = children.length;
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 100);
    const started = Date.now();
    const busy = children.at(-1);
    const outcome = await mode.execute(program("async () => { while (true) {} }", 8_000), null, run(controller.signal));
    expect(outcome.status).toBe("cancelled");
    expect(Date.now() - started).toBeLessThan(3_000);
    // The next run goes to a new VM side at once; the busy one is closed when its stop grace ends.
    expect(await mode.execute(program("async () => 5"), null, run())).toMatchObject({ status: "succeeded", output: 5 });
    expect(children.length).toBe(before + 1);
    await new Promise((resolve) => setTimeout(resolve, 800));
    expect(busy?.killed).toBe(true);
    expect(busy?.exited).toBe(true);
    expect(children.at(-1)?.killed).toBe(false);
  });

  it("fails runs of a VM side that breaks the protocol, closes it once, and never runs the program on the host", async () => {
    let toolRuns = 0;
    const counting: CodeModeInvokeTool = (tool, input, context) => {
      toolRuns++;
      return broker(tool, input, context);
    };
    const misbehaving: [string, ReturnType<typeof fakeLaunch>][] = [
      ["garbage", fakeLaunch((m, reply) => m.type === "run" && reply({ type: "garbage", exec: m.request.exec }))],
      [
        "wrong field type",
        fakeLaunch(
          (m, reply) => m.type === "run" && reply({ type: "done", exec: m.request.exec, result: { ok: "yes" } }),
        ),
      ],
      [
        "a run it was never sent",
        fakeLaunch(
          (m, reply) =>
            m.type === "run" &&
            reply({ type: "call", exec: m.request.exec + 1000, id: 1, target: "tool", name: "echo", args: "{}" }),
        ),
      ],
      [
        "a script's output event",
        fakeLaunch(
          (m, reply) =>
            m.type === "run" && reply({ type: "output", exec: m.request.exec, item: { type: "text", text: "x" } }),
        ),
      ],
      [
        "another protocol version",
        fakeLaunch(() => {}, { type: "ready", protocol: QUICKJS_PROTOCOL, version: 1, versions: {} }),
      ],
      [
        "another protocol",
        fakeLaunch(() => {}, { type: "ready", protocol: "other", version: QUICKJS_PROTOCOL_VERSION, versions: {} }),
      ],
      ["a failed boot", fakeLaunch(() => {}, { type: "failed", message: "no wasm" })],
      [
        "a handshake with an unknown field",
        fakeLaunch(() => {}, {
          type: "ready",
          protocol: QUICKJS_PROTOCOL,
          version: QUICKJS_PROTOCOL_VERSION,
          versions: {},
          extra: true,
        }),
      ],
      [
        "a handshake of an earlier version of the protocol",
        fakeLaunch(() => {}, { type: "ready", protocol: QUICKJS_PROTOCOL, version: 1, engine: 2 }),
      ],
      [
        "a snapshot nobody asked for",
        fakeLaunch(
          (m, reply) =>
            m.type === "run" && reply({ type: "snapshot", exec: m.request.exec, snapshot: null, refused: "too_large" }),
        ),
      ],
      [
        "run id 0, never issued",
        fakeLaunch((m, reply) => {
          if (m.type !== "run") return;
          reply({ type: "call", exec: 0, id: 1, target: "tool", name: "echo", args: "{}" });
          reply(doneMessage(m.request.exec, 1));
        }),
      ],
    ];
    for (const [name, fake] of misbehaving) {
      const fakeAdapter = createQuickJsProtocolAdapter({ id: "fake", version: "1", launch: fake.launch });
      const mode = createCodeMode({ adapter: fakeAdapter, invokeTool: counting, allowTestAdapter: true });
      const outcome = await mode.execute(program(`async (i, tools) => tools.call("echo", { value: 1 })`), null, run());
      expect(codeOf(outcome), name).toBe("TOOL_FAILED");
      if (outcome.status !== "succeeded") expect(outcome.error.message).toBe("the sandbox failed");
      expect(fake.state.closes, name).toBe(1);
      // The next execution gets a new connection.
      await mode.execute(program("async () => 1"), null, run());
      expect(fake.state.launches, name).toBe(2);
      await fakeAdapter.close();
    }
    expect(toolRuns).toBe(0);

    const failingLaunch = createQuickJsProtocolAdapter({
      id: "fails",
      version: "1",
      launch: () => {
        throw new Error("no sandbox here");
      },
    });
    const outcome = await createCodeMode({
      adapter: failingLaunch,
      invokeTool: counting,
      allowTestAdapter: true,
    }).execute(program("async () => 1"), null, run());
    expect(codeOf(outcome)).toBe("TOOL_FAILED");
    await failingLaunch.close();
  });

  it("fails runs of a transport whose handlers cannot be registered, and the host stays up", async () => {
    const rejections: unknown[] = [];
    const onRejection = (reason: unknown) => rejections.push(reason);
    process.on("unhandledRejection", onRejection);
    try {
      const broken: [string, (t: QuickJsProtocolTransport) => QuickJsProtocolTransport][] = [
        ["onClose is not a function", (t) => ({ ...t, onClose: true }) as never],
        [
          "onClose throws",
          (t) => ({
            ...t,
            onClose: () => {
              throw new Error("cannot watch close");
            },
          }),
        ],
        [
          "onMessage throws",
          (t) => ({
            ...t,
            onMessage: () => {
              throw new Error("cannot subscribe");
            },
          }),
        ],
      ];
      for (const [name, wrap] of broken) {
        const fake = fakeLaunch((m, reply) => m.type === "run" && reply(doneMessage(m.request.exec, 1)));
        const fakeAdapter = createQuickJsProtocolAdapter({
          id: "fake",
          version: "1",
          launch: () => wrap(fake.launch()),
        });
        const mode = createCodeMode({ adapter: fakeAdapter, invokeTool: broker, allowTestAdapter: true });
        const started = Date.now();
        const outcome = await mode.execute(program("async () => 1"), null, run());
        expect(codeOf(outcome), name).toBe("TOOL_FAILED");
        expect(Date.now() - started, name).toBeLessThan(2_000);
        // What was launched is ended.
        expect(fake.state.closes, name).toBe(1);
        expect(fake.state.runsSent, name).toBe(0);
        await fakeAdapter.close();
      }
      await new Promise((resolve) => setTimeout(resolve, 20));
      expect(rejections).toEqual([]);
    } finally {
      process.off("unhandledRejection", onRejection);
    }
  });

  it("drops a run stopped before it was sent, without touching its siblings or the VM side", async () => {
    // The VM side takes longer to boot than the stop grace: a stop sent then would close the connection.
    const fake = fakeLaunch(
      (m, reply) => m.type === "run" && reply(doneMessage(m.request.exec, "ran")),
      undefined,
      800,
    );
    const fakeAdapter = createQuickJsProtocolAdapter({ id: "fake", version: "1", launch: fake.launch });
    const mode = createCodeMode({ adapter: fakeAdapter, invokeTool: broker, allowTestAdapter: true });
    const controller = new AbortController();
    const stopped = mode.execute(program("async () => 1"), null, run(controller.signal));
    const sibling = mode.execute(program("async () => 2"), null, run());
    setTimeout(() => controller.abort(), 20);
    expect((await stopped).status).toBe("cancelled");
    expect(await sibling).toMatchObject({ status: "succeeded", output: "ran" });
    await new Promise((resolve) => setTimeout(resolve, 100));
    // Only the sibling's run went out: no stop, and the stopped run was never sent once the VM side was up.
    expect(fake.state.sent.map((m) => m.type)).toEqual(["run"]);
    expect(fake.state.closes).toBe(0);
    expect(fake.state.launches).toBe(1);
    await fakeAdapter.close();
  });

  it("gives a stop more time while the VM side computes another run, which then completes", async () => {
    const own: ChildRecord[] = [];
    const received: { type?: unknown; exec?: unknown; result?: { error?: { kind?: unknown } } }[] = [];
    const busyAdapter = createQuickJsProtocolAdapter({
      id: "busy",
      version: "1",
      launch: () => {
        const transport = launchVmSideChild(own);
        return {
          ...transport,
          onMessage: (handler) =>
            transport.onMessage((message) => {
              received.push(message as (typeof received)[number]);
              handler(message);
            }),
        };
      },
    });
    // Tool calls that take longer than the whole test: the stopped runs wait on them.
    const slow: CodeModeInvokeTool = async (tool, input, context) => {
      await sleep(5_000);
      return broker(tool, input, context);
    };
    const mode = createCodeMode({ adapter: busyAdapter, invokeTool: slow, allowTestAdapter: true });
    try {
      expect(await mode.execute(program("async () => 1"), null, run())).toMatchObject({ status: "succeeded" });
      const controller = new AbortController();
      const waiting = `async (i, tools) => tools.call("echo", { value: 1 })`;
      const aborted = mode.execute(program(waiting), null, run(controller.signal));
      const timedOut = mode.execute(program(waiting, 1_000, 300), null, run());
      // 1.5 s of CPU, well within its limits: the VM side reads neither stop until this turn ends.
      const computing = mode.execute(
        program(`async () => { const end = Date.now() + 1500; while (Date.now() < end) {} return "done"; }`, 8_000),
        null,
        run(),
      );
      setTimeout(() => controller.abort(), 300);
      // Each was cut off while a tool call was in flight, so the executor reports its outcome as unknown; the VM
      // side's own end of each run (below) shows which stop it read.
      expect((await aborted).status).toBe("outcome_unknown");
      expect((await timedOut).status).toBe("outcome_unknown");
      expect(await computing).toMatchObject({ status: "succeeded", output: "done" });
      await sleep(100);
      // The VM side said it was busy, then ended both stopped runs itself once the turn was over.
      expect(received.some((m) => m.type === "busy" && typeof m.exec === "number")).toBe(true);
      const stopped = received.filter((m) => m.type === "done" && m.result?.error !== undefined);
      // The executor ends a run at its wall time by aborting it too, so both stops read "aborted".
      expect(stopped.map((m) => m.result?.error?.kind)).toEqual(["aborted", "aborted"]);
      expect(own).toHaveLength(1);
      expect(own[0]?.killed).toBe(false);
    } finally {
      await busyAdapter.close();
    }
  });

  it("gives a stop a whole grace period after the turn it waited behind ends, even just before its grace runs out", async () => {
    // The VM side computes run B's turn while run A's stop waits; B's turn ends a little before A's (second) grace
    // period would run out, and A's `done` comes soon after, well within a grace period of that turn's end.
    const fake = fakeLaunch((m, reply) => {
      if (m.type !== "stop") return;
      const [a, b] = fake.state.sent.flatMap((sent) => (sent.type === "run" ? [sent.request.exec] : []));
      reply({ type: "busy", exec: b });
      setTimeout(() => reply({ type: "busy", exec: null }), 2 * REMOTE_STOP_GRACE_MS - 40);
      setTimeout(() => reply(stoppedMessage(a as number, "aborted")), 2 * REMOTE_STOP_GRACE_MS + 40);
      setTimeout(() => reply(doneMessage(b as number, "computed")), 2 * REMOTE_STOP_GRACE_MS + 80);
    });
    const fakeAdapter = createQuickJsProtocolAdapter({ id: "fake", version: "1", launch: fake.launch });
    const mode = createCodeMode({ adapter: fakeAdapter, invokeTool: broker, allowTestAdapter: true });
    try {
      const controller = new AbortController();
      const stopped = mode.execute(program("async () => 1"), null, run(controller.signal));
      const computing = mode.execute(program("async () => 2", 8_000), null, run());
      await sleep(20);
      controller.abort();
      expect((await stopped).status).toBe("cancelled");
      expect(await computing).toMatchObject({ status: "succeeded", output: "computed" });
      // The VM side ended the stopped run in time: it was not closed, and B was neither rebuilt nor failed.
      expect(fake.state.closes).toBe(0);
      expect(fake.state.launches).toBe(1);
    } finally {
      await fakeAdapter.close();
    }
  });

  it("takes busy messages for open runs, and closes a VM side that sends a bad one", async () => {
    const good = fakeLaunch((m, reply) => {
      if (m.type !== "run") return;
      reply({ type: "busy", exec: m.request.exec });
      reply({ type: "busy", exec: null });
      reply(doneMessage(m.request.exec, "ran"));
    });
    const goodAdapter = createQuickJsProtocolAdapter({ id: "fake", version: "1", launch: good.launch });
    const goodMode = createCodeMode({ adapter: goodAdapter, invokeTool: broker, allowTestAdapter: true });
    expect(await goodMode.execute(program("async () => 1"), null, run())).toMatchObject({ output: "ran" });
    expect(good.state.closes).toBe(0);
    await goodAdapter.close();

    const bad: [string, (exec: number) => unknown][] = [
      ["a run it was never sent", (exec) => ({ type: "busy", exec: exec + 1000 })],
      ["run id 0", () => ({ type: "busy", exec: 0 })],
      ["an exec that is not a number", (exec) => ({ type: "busy", exec: String(exec) })],
      ["no exec", () => ({ type: "busy" })],
      ["an unknown field", (exec) => ({ type: "busy", exec, extra: true })],
    ];
    for (const [name, busy] of bad) {
      const fake = fakeLaunch((m, reply) => {
        if (m.type !== "run") return;
        reply(busy(m.request.exec));
        reply(doneMessage(m.request.exec, "ran"));
      });
      const fakeAdapter = createQuickJsProtocolAdapter({ id: "fake", version: "1", launch: fake.launch });
      const mode = createCodeMode({ adapter: fakeAdapter, invokeTool: broker, allowTestAdapter: true });
      expect(codeOf(await mode.execute(program("async () => 1"), null, run())), name).toBe("TOOL_FAILED");
      expect(fake.state.closes, name).toBe(1);
      await fakeAdapter.close();
    }
  });

  it("still closes a VM side that computes the very run it was told to stop", async () => {
    const fake = fakeLaunch((m, reply) => m.type === "run" && reply({ type: "busy", exec: m.request.exec }));
    const fakeAdapter = createQuickJsProtocolAdapter({ id: "fake", version: "1", launch: fake.launch });
    const mode = createCodeMode({ adapter: fakeAdapter, invokeTool: broker, allowTestAdapter: true });
    const controller = new AbortController();
    const stopped = mode.execute(program("async () => { while (true) {} }", 8_000), null, run(controller.signal));
    setTimeout(() => controller.abort(), 100);
    expect(codeOf(await stopped)).toBe("CANCELLED");
    expect(fake.state.sent.map((m) => m.type)).toEqual(["run", "stop"]);
    expect(fake.state.closes).toBe(0);
    // Its own deadline is what bounds a busy run: after one grace period the connection is closed.
    await sleep(700);
    expect(fake.state.closes).toBe(1);
    await fakeAdapter.close();
  });

  it("serves only program runs on the VM side", async () => {
    const { sent, deliver, server } = await servedVmSide();
    expect(sent[0]).toMatchObject({ type: "ready", protocol: QUICKJS_PROTOCOL, version: QUICKJS_PROTOCOL_VERSION });
    const request = programRequest("async (input) => input + 1", false, "41");
    // A script run is refused with a failed result; messages it cannot read are dropped.
    deliver({ type: "run", request: { ...request, program: null, code: "return 1" } });
    deliver({ type: "nonsense" });
    deliver(null);
    deliver({ type: "run", request: { ...request, exec: 3, extra: true } });
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(sent).toHaveLength(2);
    expect(sent[1]).toMatchObject({
      type: "done",
      exec: 1,
      result: {
        ok: false,
        reason: "vm_failed",
        error: { kind: "sandbox", message: "this VM side runs only programs" },
      },
    });
    deliver({ type: "run", request: { ...request, exec: 2 } });
    await vi.waitFor(() => expect(sent).toHaveLength(3));
    expect(sent[2]).toMatchObject({ type: "done", exec: 2, result: { ok: true, reason: "returned", value: "42" } });
    server.close();
  });
  it("applies a deterministic run's answers without waiting for the host, and drops a request whose answers break the rules", async () => {
    const { sent, deliver, server } = await servedVmSide();
    const answer = (value: string, seq: number, now: number) => ({ outcome: { ok: true, value }, seq, now });
    const request = {
      ...programRequest(
        `async (input, tools) => {
        const a = await tools.call("t", 1);
        const b = await tools.call("t", 2);
        const c = await tools.call("t", 3);
        return [a, b, c, Date.now()];
      }`,
        true,
      ),
      answers: [answer('"x"', 1, 2_000), answer('"y"', 2, 3_000)],
    };
    // Answers for a run that is not deterministic, a result number twice, more answers than calls, an extra field,
    // an outcome of the wrong shape: each request is dropped, and nothing runs.
    deliver({ type: "run", request: { ...request, exec: 2, deterministic: null } });
    deliver({ type: "run", request: { ...request, exec: 3, answers: [answer("1", 1, 0), answer("2", 1, 0)] } });
    deliver({ type: "run", request: { ...request, exec: 4, maxCalls: 1 } });
    deliver({ type: "run", request: { ...request, exec: 5, answers: [{ ...answer("1", 1, 0), id: 1 }] } });
    deliver({ type: "run", request: { ...request, exec: 6, answers: [{ outcome: { ok: "yes" }, seq: 1, now: 0 }] } });
    deliver({ type: "run", request: { ...request, exec: 7, answers: {} } });
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(sent).toHaveLength(1);

    deliver({ type: "run", request });
    await vi.waitFor(() => expect(sent.at(-1)?.type).toBe("idle"));
    // The first two calls were answered from the request; the run waits for the host only at the third.
    expect(sent.slice(1).map((message) => message.type)).toEqual(["started", "call", "call", "call", "idle"]);
    expect(sent.at(-1)).toEqual({ type: "idle", exec: 1, seq: 2, issued: 3 });
    deliver({ type: "settle", exec: 1, id: 3, outcome: { ok: true, value: '"z"' }, seq: 3, now: 4_000 });
    await vi.waitFor(() => expect(sent.at(-1)?.type).toBe("done"));
    expect(sent.at(-1)).toMatchObject({
      type: "done",
      exec: 1,
      result: { ok: true, value: JSON.stringify(["x", "y", "z", 4_000]) },
    });
    server.close();
  });

  it("captures a deterministic program run on `snapshot`, restores it from a request, and drops a snapshot that breaks the rules", async () => {
    const { sent, deliver, server } = await servedVmSide();
    const request = programRequest(
      `async (input, tools) => {
        const r = Math.random();
        const a = await tools.call("t", 1);
        const b = await tools.call("t", 2);
        return [a, b, r, Math.random(), Date.now()];
      }`,
      true,
    );
    const wait = () => new Promise((resolve) => setTimeout(resolve, 50));
    const settle = (exec: number, id: number, value: string, seq: number) =>
      deliver({ type: "settle", exec, id, outcome: { ok: true, value }, seq, now: 1_000 + seq * 1_000 });
    deliver({ type: "run", request });
    await vi.waitFor(() => expect(sent.at(-1)?.type).toBe("idle"));
    expect(sent.slice(1).map((message) => message.type)).toEqual(["started", "call", "idle"]);
    expect(sent[1]).toMatchObject({ type: "started", exec: 1, restored: false });
    deliver({ type: "snapshot", exec: 1 });
    await vi.waitFor(() => expect(sent.at(-1)?.type).toBe("snapshot"));
    const taken = sent.at(-1) as Extract<QuickJsVmMessage, { type: "snapshot" }>;
    expect(taken).toMatchObject({ type: "snapshot", exec: 1, refused: null });
    const snapshot = taken.snapshot as NonNullable<typeof taken.snapshot>;
    expect(snapshot.key).toMatch(/^[0-9a-f]{64}$/);
    expect(snapshot.run).toEqual({
      calls: 1,
      nextSeq: 1,
      clockNow: 1_000,
      open: [{ id: 1, target: "tool", name: "t", args: "1" }],
    });
    // A run that is not there is not answered; the run goes on after its snapshot.
    deliver({ type: "snapshot", exec: 99 });
    await wait();
    expect(sent.at(-1)).toBe(taken);

    // Snapshots that break the rules: each request is dropped, and nothing runs.
    const count = sent.length;
    const broken = (changes: Record<string, unknown>) => ({ ...snapshot, ...changes });
    const badRestores = [
      { deterministic: null, restore: snapshot },
      { restore: broken({ key: "not a key" }) },
      { restore: broken({ memory: { ...snapshot.memory, ranges: [8192, 4096] } }) },
      { restore: broken({ memory: { ...snapshot.memory, data: `${snapshot.memory.data}AAAA` } }) },
      { restore: broken({ run: { ...snapshot.run, open: [{ id: 2, target: "tool", name: "t" }] } }) },
      { restore: broken({ extra: true }) },
    ];
    for (const [i, changes] of badRestores.entries())
      deliver({ type: "run", request: { ...request, exec: 10 + i, ...changes } });
    await wait();
    expect(sent).toHaveLength(count);

    // Restored: no call made again, and it goes on exactly as the run it was taken from.
    deliver({ type: "run", request: { ...request, exec: 2, restore: snapshot } });
    await vi.waitFor(() => expect(sent.at(-1)?.type).toBe("idle"));
    expect(sent.slice(count)).toEqual([
      { type: "started", exec: 2, fingerprint: expect.any(String), restored: true },
      { type: "idle", exec: 2, seq: 0, issued: 1 },
    ]);
    const idleAfter = (seq: number) => sent.filter((message) => message.type === "idle" && message.seq === seq);
    for (const exec of [1, 2]) settle(exec, 1, '"x"', 1);
    await vi.waitFor(() => expect(idleAfter(1)).toHaveLength(2));
    for (const exec of [1, 2]) settle(exec, 2, '"y"', 2);
    await vi.waitFor(() => expect(sent.filter((message) => message.type === "done")).toHaveLength(2));
    const done = sent.filter((message) => message.type === "done");
    const values = done.map((message) => (message as { result: { value: string } }).result.value);
    expect(values[0]).toBe(values[1]);
    expect(JSON.parse(values[0] as string)).toEqual(["x", "y", expect.any(Number), expect.any(Number), 3_000]);

    // Another build's snapshot (another key) is not restored: the program runs from its start.
    deliver({ type: "run", request: { ...request, exec: 3, restore: broken({ key: "0".repeat(64) }) } });
    await vi.waitFor(() => expect(sent.at(-1)).toMatchObject({ type: "idle", exec: 3 }));
    const ofRun3 = sent.filter((message) => "exec" in message && message.exec === 3);
    expect(ofRun3.map((message) => message.type)).toEqual(["started", "call", "idle"]);
    expect(ofRun3[0]).toMatchObject({ restored: false });
    server.close();
  });
});
