/**
 * Nothing of the bridge is reachable, by any route (docs/sandbox.md, What a script sees and How a run is kept apart):
 * the stack-trace hooks through which a script obtained the prelude's own functions are closed before any script runs;
 * every call a VM side sends is checked on the host against what the run offers; and store writes are safe to apply
 * with the `Object.assign(saved, result.storeWrites.set)` of docs/sandbox.md (Store), whatever keys the script chose.
 */
import type { CodemodeHostCall } from "airlock-codemode";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { VmEvent } from "../dist/engine/protocol.js";
import { runConfiguration } from "../dist/engine/protocol.js";
import { Execution } from "../dist/host/execution.js";
import type { Launcher, LaunchRequest } from "../dist/host/launcher.js";
import { launchers } from "./helpers/sandboxes.ts";

describe.each(launchers)("$name sandbox: the prelude's functions stay out of reach", ({ make }) => {
  let sandbox: ReturnType<typeof make>;
  beforeAll(async () => {
    sandbox = make({ tools: [{ name: "echo", execute: (args) => args }], timeoutMs: 10_000 });
    await sandbox.warm();
  });
  afterAll(() => sandbox.close());

  it("keeps Error.prepareStackTrace and Error.stackTraceLimit fixed, so stacks never hand out call sites", async () => {
    const result = await sandbox.execute(`
      const leaked = [];
      const attempts = [
        () => { "use strict"; Error.prepareStackTrace = (error, sites) => { for (const site of sites) leaked.push(site.getFunction?.()); return "hooked"; }; },
        () => Object.defineProperty(Error, "prepareStackTrace", { value: () => "hooked" }),
        () => { "use strict"; Error.stackTraceLimit = 1000; },
        () => Object.defineProperty(Error, "stackTraceLimit", { get: () => 1000 }),
      ];
      let refused = 0;
      for (const attempt of attempts) { try { attempt(); } catch { refused++; } }
      // Errors raised while the prelude's own functions are on the stack: in a toJSON that text(), a tool call and
      // store() serialize, and in a getter console.log reads.
      const hostile = { toJSON() { return new Error("inside").stack; } };
      text(hostile);
      await tools.echo(hostile);
      store("k", hostile);
      console.log({ get x() { return new Error("getter").stack; } });
      let thrown;
      try { null.x; } catch (error) { thrown = error.stack; }
      return [refused, leaked.length, typeof Error.prepareStackTrace, Error.stackTraceLimit, typeof thrown,
        thrown.includes("hooked"), typeof new Error("x").stack];
    `);
    expect(result).toMatchObject({ ok: true, value: [4, 0, "undefined", 10, "string", false, "string"] });
    // The stacks the script made for itself name the prelude's frames, as text only: no value of the prelude's.
    expect(result.output.map((item) => item.type === "text" && typeof item.text)).toEqual(["string", "string"]);
  });

  it("lets no script reach the host function or call a tool by a name it was not given", async () => {
    const result = await sandbox.execute(`
      const seen = [];
      for (const value of [globalThis.__airlock_host, globalThis.call, globalThis.start, globalThis.settle]) {
        seen.push(typeof value);
      }
      seen.push("call" in tools, Object.keys(tools));
      return seen;
    `);
    expect(result).toMatchObject({ ok: true, value: [...Array(4).fill("undefined"), false, ["echo"]] });
  });

  it("keeps store writes safe to apply with Object.assign, whatever their keys", async () => {
    const result = await sandbox.execute(`
      let refused;
      try { store("__proto__", { isAdmin: true }); } catch (error) { refused = error.name; }
      store("constructor", { prototype: { isAdmin: true } });
      store("prototype", { isAdmin: true });
      store("hasOwnProperty", 1);
      return refused;
    `);
    expect(result).toMatchObject({ ok: true, value: "TypeError" });
    if (!result.ok) return;
    // The way docs/sandbox.md (Store) applies the writes.
    const saved: Record<string, unknown> = { kept: 1 };
    for (const key of result.storeWrites.delete) delete saved[key];
    Object.assign(saved, result.storeWrites.set);
    expect(Object.getPrototypeOf(saved)).toBe(Object.prototype);
    expect((saved as { isAdmin?: unknown }).isAdmin).toBeUndefined();
    expect(({} as { isAdmin?: unknown }).isAdmin).toBeUndefined();
    expect(Object.keys(saved)).toEqual(["kept", "constructor", "prototype", "hasOwnProperty"]);
  });
});

/**
 * A VM side that sends what a compromised one could: the host side must not trust it. The launcher hands the run's
 * events to the execution exactly as a real one does (after launch() returned).
 */
function forgingLauncher(events: (exec: number) => VmEvent[]): Launcher {
  return {
    launch(_request: LaunchRequest, onEvent: (event: VmEvent) => void) {
      queueMicrotask(() => {
        for (const event of events(1)) onEvent(event);
      });
      return { settle: () => {}, stop: () => {}, capture: () => {} };
    },
    close: async () => {},
  };
}

function request(deterministic: boolean): LaunchRequest {
  return {
    code: "",
    configuration: runConfiguration({
      tools: [{ name: "read", id: "read", description: "" }],
      globals: [],
      deterministic,
      program: false,
    }),
    store: {},
    memoryLimitBytes: 16 * 1024 * 1024,
    deadline: null,
    cpuLimitMs: null,
    interruptBudget: null,
    maxCalls: 16,
    deterministic: deterministic ? { startedAt: 0, seed: 1 } : null,
    answers: null,
    restore: null,
    program: null,
  };
}

const forgedCall = (exec: number): VmEvent => ({
  type: "call",
  exec,
  id: 1,
  target: "tool",
  name: "admin_delete_everything",
  args: "{}",
});

describe("the host side of a run", () => {
  it("fails a start() run closed when the VM side calls a tool the run never declared", async () => {
    const seen: CodemodeHostCall[] = [];
    const execution = new Execution(
      forgingLauncher((exec) => [forgedCall(exec)]),
      {
        request: request(true),
        handler: {
          kind: "deterministic",
          declared: { tools: new Set(["read"]), globals: new Set() },
          onCall: (call) => seen.push(call),
        },
        signal: undefined,
        timeoutMs: Number.POSITIVE_INFINITY,
        onEnd: () => {},
      },
    );
    const result = await execution.result;
    expect(result).toMatchObject({
      ok: false,
      error: { kind: "sandbox", message: "the VM called a tool that the run does not offer" },
      calls: [],
    });
    // Airlock's own message: no text the VM side chose reaches it.
    expect(JSON.stringify(result)).not.toContain("admin_delete_everything");
    await new Promise((resolve) => setTimeout(resolve, 10));
    expect(seen).toEqual([]);
  });

  it("fails an execute() run closed when the VM side calls a tool the sandbox does not offer", async () => {
    const ran: string[] = [];
    const execution = new Execution(
      forgingLauncher((exec) => [forgedCall(exec)]),
      {
        request: request(false),
        handler: {
          kind: "tools",
          resolve: (target, name) =>
            target === "tool" && name === "read" ? { name, execute: () => void ran.push(name) } : undefined,
        },
        signal: undefined,
        timeoutMs: Number.POSITIVE_INFINITY,
        onEnd: () => {},
      },
    );
    expect(await execution.result).toMatchObject({ ok: false, error: { kind: "sandbox" }, calls: [] });
    expect(ran).toEqual([]);
  });

  it("fails a run whose VM side sends a store write for __proto__", async () => {
    const done: VmEvent = {
      type: "done",
      exec: 1,
      result: {
        ok: true,
        reason: "returned",
        value: undefined,
        writes: JSON.stringify(JSON.parse('{"set": {"__proto__": "{\\"isAdmin\\":true}"}, "delete": []}')),
        cpuMs: 0,
        during: null,
      },
    };
    const execution = new Execution(
      forgingLauncher(() => [done]),
      {
        request: request(false),
        handler: { kind: "tools", resolve: () => undefined },
        signal: undefined,
        timeoutMs: Number.POSITIVE_INFINITY,
        onEnd: () => {},
      },
    );
    expect(await execution.result).toMatchObject({
      ok: false,
      error: { kind: "sandbox", message: "the VM sent a store write for __proto__, which scripts cannot make" },
    });
  });
});
