/**
 * Mayura's protocol adapter suite (packages/adapter-code-quickjs/test/protocol.test.ts), ported to Airlock's protocol
 * (PROTOCOL.md): its qualification, its options, a launch that fails, and a VM side that misbehaves, written by the
 * test. Airlock's own VM side over a real child process runs the shared suites (quickjs.test.ts).
 */
import { createQuickJsProtocolAdapter, type QuickJsHostMessage } from "airlock-codemode/adapter-code-quickjs";
import { type CodeModeInvokeTool, createCodeMode } from "airlock-codemode/code-mode";
import { describe, expect, it } from "vitest";
import { doneMessage, fakeLaunch } from "../../helpers/fake-vm-side.ts";
import { codeOf, double, options, program } from "./fixtures.ts";

const unusedLaunch = () => {
  throw new Error("unused");
};

/** A broker that echoes its input and counts its calls. */
function counting() {
  const state = { calls: 0 };
  const broker: CodeModeInvokeTool = (_tool, input) => {
    state.calls++;
    return { status: "succeeded", output: input };
  };
  return { state, broker };
}

const withDouble = program(`async (input, tools) => tools.call("number.double", input)`, { tools: [double] });

describe("the QuickJS protocol adapter", () => {
  it("is qualified 'test' by default, so a launcher of your own is taken only when asked", () => {
    const adapter = createQuickJsProtocolAdapter({ id: "custom.launcher", version: "1", launch: unusedLaunch });
    expect(adapter.qualification).toBe("test");
    expect(() => createCodeMode({ adapter, invokeTool: counting().broker })).toThrowError(
      expect.objectContaining({ code: "UNSUPPORTED_PROFILE" }),
    );
    expect(() => createCodeMode({ adapter, allowTestAdapter: true, invokeTool: counting().broker })).not.toThrow();
    const production = createQuickJsProtocolAdapter({
      id: "custom.production",
      version: "1",
      qualification: "production",
      launch: unusedLaunch,
    });
    expect(() => createCodeMode({ adapter: production, invokeTool: counting().broker })).not.toThrow();
  });

  it("refuses bad options with INVALID_CONFIG", () => {
    for (const bad of [
      undefined,
      {},
      { id: "x", version: "1", launch: "no" },
      { id: "x", version: "1", launch: unusedLaunch, qualification: "trusted" },
      { id: "x", version: "1", launch: unusedLaunch, isAvailable: true },
      { id: "1bad", version: "1", launch: unusedLaunch },
      { id: "x", version: "1", launch: unusedLaunch, lauch: unusedLaunch },
    ]) {
      expect(() => createQuickJsProtocolAdapter(bad as never), JSON.stringify(bad)).toThrowError(
        expect.objectContaining({ code: "INVALID_CONFIG" }),
      );
    }
  });

  it("fails an execution whose launch fails, without the launch's text, and runs nothing", async () => {
    const { state, broker } = counting();
    const adapter = createQuickJsProtocolAdapter({
      id: "fake.launch",
      version: "1",
      qualification: "production",
      launch: () => {
        throw new Error("SECRET launch detail");
      },
    });
    const outcome = await createCodeMode({ adapter, invokeTool: broker }).execute(withDouble, { value: 1 }, options());
    expect(outcome).toMatchObject({ status: "failed", error: { code: "TOOL_FAILED" } });
    expect(JSON.stringify(outcome)).not.toContain("SECRET");
    expect(state.calls).toBe(0);
    await adapter.close();
  });

  it("relays a call through the host's broker and answers it once", async () => {
    const { state, broker } = counting();
    const fake = fakeLaunch((message, reply) => {
      if (message.type === "run") {
        reply({
          type: "call",
          exec: message.request.exec,
          id: 1,
          target: "tool",
          name: "number.double",
          args: '{"value":1}',
        });
      }
      if (message.type === "settle" && message.outcome.ok) {
        reply(doneMessage(message.exec, JSON.parse(message.outcome.value ?? "null")));
      }
    });
    const adapter = createQuickJsProtocolAdapter({ id: "fake.relay", version: "1", launch: fake.launch });
    const outcome = await createCodeMode({ adapter, invokeTool: broker, allowTestAdapter: true }).execute(
      withDouble,
      { value: 1 },
      options(),
    );
    expect(outcome).toMatchObject({ status: "succeeded", output: { status: "succeeded", output: { value: 1 } } });
    expect(state.calls).toBe(1);
    const settles = fake.state.sent.filter((message: QuickJsHostMessage) => message.type === "settle");
    expect(settles).toHaveLength(1);
    expect(settles[0]).toMatchObject({ id: 1, outcome: { ok: true } });
    await adapter.close();
  });

  it("fails the run closed when the VM side repeats a call id, and the broker is not called twice", async () => {
    const { state, broker } = counting();
    const fake = fakeLaunch((message, reply) => {
      if (message.type !== "run") return;
      const exec = message.request.exec;
      reply({ type: "call", exec, id: 1, target: "tool", name: "number.double", args: '{"value":1}' });
      reply({ type: "call", exec, id: 1, target: "tool", name: "number.double", args: '{"value":2}' });
    });
    const adapter = createQuickJsProtocolAdapter({ id: "fake.repeat", version: "1", launch: fake.launch });
    const mode = createCodeMode({ adapter, invokeTool: broker, allowTestAdapter: true });
    const outcome = await mode.execute(withDouble, { value: 1 }, options());
    expect(codeOf(outcome)).toBe("TOOL_FAILED");
    expect(state.calls).toBeLessThanOrEqual(1);
    await adapter.close();
  });

  it("never lets a VM side past maxToolCalls reach the broker more often than the program may call", async () => {
    const { state, broker } = counting();
    const fake = fakeLaunch((message, reply) => {
      if (message.type !== "run") return;
      const exec = message.request.exec;
      for (let id = 1; id <= 6; id++) {
        reply({ type: "call", exec, id, target: "tool", name: "number.double", args: JSON.stringify({ value: id }) });
      }
      setTimeout(() => reply(doneMessage(exec, { value: 0 })), 50);
    });
    const adapter = createQuickJsProtocolAdapter({ id: "fake.flood", version: "1", launch: fake.launch });
    const limited = program(`async (input, tools) => tools.call("number.double", input)`, {
      tools: [double],
      limits: { maxToolCalls: 2, maxToolConcurrency: 2 },
    });
    await createCodeMode({ adapter, invokeTool: broker, allowTestAdapter: true }).execute(
      limited,
      { value: 1 },
      options(),
    );
    expect(state.calls).toBeLessThanOrEqual(2);
    await adapter.close();
  });
});
