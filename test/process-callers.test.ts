/**
 * A process-tier child serves one caller at a time, under bubblewrap, gVisor and as a plain child: an execution of
 * another caller (`execute`'s `caller`, compared as Object.is does; executions without one are a caller of their
 * own) goes to another child, or waits for one, while the executions of one caller share a child as before.
 */
import type { CodemodeTool } from "airlock-codemode";
import { describe, expect, it } from "vitest";
import { pooledLaunchers } from "./helpers/sandboxes.ts";
import { until } from "./helpers/wait.ts";

type ProcessTier = ReturnType<(typeof pooledLaunchers)[number]["make"]> & { readonly processCount: number };

/** A tool whose calls wait until `open()`; `callers` lists each call's `context.caller`. */
function gate() {
  const callers: unknown[] = [];
  let release: () => void = () => {};
  const opened = new Promise<void>((resolve) => {
    release = resolve;
  });
  const tool: CodemodeTool = {
    name: "gate",
    execute: async (_args, { caller }) => {
      callers.push(caller);
      await opened;
      return "opened";
    },
  };
  return { tool, callers, open: () => release() };
}

describe.each(pooledLaunchers.filter((l) => l.name !== "worker"))("$name: callers apart", ({ make }) => {
  it("runs two callers' executions in two children, and one caller's in one", async () => {
    const parked = gate();
    const sandbox = make({ tools: [parked.tool], poolSize: 1, maxPoolSize: 4, timeoutMs: 60_000 }) as ProcessTier;
    const alice = { name: "alice" };
    try {
      await sandbox.warm();
      expect(sandbox.processCount).toBe(1);
      const code = "return await tools.gate()";
      const first = sandbox.execute(code, { caller: alice });
      await until(() => parked.callers.length === 1, "alice's first call");
      // Another caller's execution does not join alice's child: a second one starts for it.
      const bob = sandbox.execute(code, { caller: "bob" });
      await until(() => parked.callers.length === 2, "bob's call");
      expect(sandbox.processCount).toBe(2);
      // Alice's second execution joins her child, and one without a caller needs a third.
      const second = sandbox.execute(code, { caller: alice });
      await until(() => parked.callers.length === 3, "alice's second call");
      expect(sandbox.processCount).toBe(2);
      const anonymous = sandbox.execute(code);
      await until(() => parked.callers.length === 4, "the call without a caller");
      expect(sandbox.processCount).toBe(3);
      expect(parked.callers).toEqual([alice, "bob", alice, undefined]);
      parked.open();
      for (const result of await Promise.all([first, bob, second, anonymous])) {
        expect(result).toMatchObject({ ok: true, value: "opened" });
      }
    } finally {
      parked.open();
      await sandbox.close();
    }
  }, 120_000);

  it("makes another caller's execution wait for a child when the pool is at its largest", async () => {
    const parked = gate();
    const sandbox = make({ tools: [parked.tool], poolSize: 1, maxPoolSize: 1, timeoutMs: 60_000 }) as ProcessTier;
    try {
      await sandbox.warm();
      const order: string[] = [];
      const first = sandbox.execute("return await tools.gate()", { caller: "alice" }).then((r) => {
        order.push("alice done");
        return r;
      });
      await until(() => parked.callers.length === 1, "alice's call");
      const bob = sandbox.execute("return 'bob ran'", { caller: "bob" }).then((r) => {
        order.push("bob done");
        return r;
      });
      // Bob's execution, which would end within milliseconds beside alice's, waits for her child to be free.
      await Promise.race([bob, new Promise((resolve) => setTimeout(resolve, 1_000))]);
      expect(order).toEqual([]);
      parked.open();
      expect(await bob).toMatchObject({ ok: true, value: "bob ran" });
      expect(await first).toMatchObject({ ok: true, value: "opened" });
      expect(order).toEqual(["alice done", "bob done"]);
      expect(sandbox.processCount).toBe(1);
    } finally {
      parked.open();
      await sandbox.close();
    }
  }, 120_000);
});
