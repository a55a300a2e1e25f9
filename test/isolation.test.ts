/**
 * A hostile execution harms only itself, also when many run at once (docs/security.md, Executions beside each other),
 * in every pooled launcher: nothing waits behind a computing script, a kill takes only the culprit (its neighbours are
 * rebuilt elsewhere from their journals, none of their calls made twice), unawaited calls and output count against the
 * memory limit, the host's guest memory is bounded, and the calls of one execution are bounded. Assertions are about
 * order and counts, never about time: neighbours must finish while the culprit still computes.
 */

import {
  Budget,
  type CodemodeSandboxBase,
  type CodemodeTool,
  DEFAULT_MAX_TOOL_CALLS,
  defineTool,
  invokeTool,
  type PoolStats,
  z,
} from "airlock-codemode";
import {
  createQuickJsProtocolAdapter,
  createQuickJsSandboxAdapter,
  PROTOCOL_MAX_CONNECTIONS,
} from "airlock-codemode/adapter-code-quickjs";
import {
  CODE_PROGRAM_LIMITS,
  type CodeExecutionOutcome,
  type CodeModeInvokeTool,
  createCodeMode,
  defineCodeProgram,
} from "airlock-codemode/code-mode";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EXTRA_IDLE_MS } from "../dist/host/pool.js";
import { echoDefinition, echoTool } from "./helpers/code-mode.ts";
import { treeRssBytes } from "./helpers/rss.ts";
import { launchers, pooledLaunchers } from "./helpers/sandboxes.ts";
import { launchVmSideChild } from "./helpers/vm-side.ts";
import { until } from "./helpers/wait.ts";

/** A tool whose calls wait until the test releases them; it counts every call it gets. */
function gate() {
  let calls = 0;
  let open = false;
  const waiting: (() => void)[] = [];
  const tool: CodemodeTool = {
    name: "gate",
    execute: async (args) => {
      calls++;
      if (!open) await new Promise<void>((resolve) => waiting.push(resolve));
      return args ?? "opened";
    },
  };
  return {
    tool,
    get calls() {
      return calls;
    },
    release() {
      open = true;
      for (const resolve of waiting.splice(0)) resolve();
    },
    reset() {
      open = false;
      calls = 0;
    },
  };
}

const counted = { add: 0, sink: 0 };
const add: CodemodeTool = {
  name: "add",
  execute: async (args) => {
    counted.add++;
    const { a, b } = args as { a: number; b: number };
    return a + b;
  },
};
const sink: CodemodeTool = {
  name: "sink",
  execute: async (args) => {
    counted.sink++;
    await new Promise((resolve) => setTimeout(resolve, 20));
    return typeof args === "string" ? args.length : 0;
  },
};

type Pooled = CodemodeSandboxBase & { warm(): Promise<void>; readonly poolStats: PoolStats };

describe.each(pooledLaunchers)("$name pool with a hostile execution among ordinary ones", ({ make }) => {
  let sandbox: Pooled;
  beforeAll(async () => {
    sandbox = make({ tools: [add, sink], timeoutMs: 60_000, poolSize: 1, maxPoolSize: 4 }) as Pooled;
    await sandbox.warm();
  });
  afterAll(async () => {
    await sandbox.close();
  });

  it.each([1, 2])("runs 8 executions that call tools while %i script(s) spin, without waiting for them", async (n) => {
    const stop = new AbortController();
    const spinning = Array.from({ length: n }, () => sandbox.execute("while (true) {}", { signal: stop.signal }));
    let spinnersEnded = false;
    void Promise.all(spinning).then(() => {
      spinnersEnded = true;
    });
    const results = await Promise.all(
      Array.from({ length: 8 }, (_, i) => sandbox.execute(`return await tools.add({ a: ${i}, b: 1 });`)),
    );
    // Every neighbour finished while the spinners still computed: none of them waited for a spinner to end.
    expect(spinnersEnded).toBe(false);
    expect(results.map((r) => r.ok && r.value)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    stop.abort();
    for (const result of await Promise.all(spinning))
      expect(result).toMatchObject({ ok: false, error: { kind: "aborted" } });
    // The pool grew for the spinners, up to its largest.
    expect(sandbox.poolStats.peak).toBeGreaterThan(1);
    expect(sandbox.poolStats.peak).toBeLessThanOrEqual(4);
  });

  it.each([
    // One bulk copy of the memory each (memory.copy): no loop of the engine's to tick, and an interrupt poll only
    // every 500 of them, seconds apart.
    [
      "a loop of TypedArray.set over 32 MiB",
      "const t = new Uint8Array(32 << 20), u = new Uint8Array(32 << 20); for (;;) t.set(u);",
    ],
  ])(
    "kills only the culprit of %s, which nothing pre-empts: a neighbour parked on a tool survives, its calls made once",
    async (_, culprit) => {
      // A pool of its own, with one worker: the parked execution and the culprit land on the same one.
      const door = gate();
      const own = make({ tools: [add, door.tool], timeoutMs: 60_000, poolSize: 1, maxPoolSize: 2 }) as Pooled;
      try {
        await own.warm();
        const addsBefore = counted.add;
        // It prints what it read of the clock and of Math.random before it parks: rebuilt elsewhere, it must read
        // the same (its journal holds them), or it would not replay the same way.
        const parked = own.execute(
          `text(String(Date.now()) + " " + Math.random());
           const opened = await tools.gate();
           return [opened, await tools.add({ a: 20, b: 22 })];`,
        );
        await until(() => door.calls === 1, "the parked execution's call");
        const result = await own.execute(culprit, { timeoutMs: 300 });
        expect(result).toMatchObject({ ok: false, error: { kind: "timeout" } });
        await until(() => own.poolStats.lost === 1, "the culprit's VM side to be killed");
        door.release();
        const survived = await parked;
        expect(survived.ok && survived.value).toEqual(["opened", 42]);
        expect(survived.output).toHaveLength(1);
        // Rebuilt from its journal: the gate was not called again, and the rest ran once.
        expect(door.calls).toBe(1);
        expect(counted.add - addsBefore).toBe(1);
        expect(own.poolStats.moved).toBe(1);
        expect((await own.execute("return 6 * 7")).ok).toBe(true);
      } finally {
        await own.close();
      }
    },
  );

  it("starts a spare VM side once every one computes, before new work arrives, and is back to one after the spinner", async () => {
    const own = make({ tools: [add], timeoutMs: 60_000, poolSize: 1, maxPoolSize: 3 }) as Pooled;
    try {
      await own.warm();
      expect(own.poolStats.live).toBe(1);
      const stop = new AbortController();
      const spinner = own.execute("while (true) {}", { signal: stop.signal });
      let spinnerEnded = false;
      void spinner.then(() => {
        spinnerEnded = true;
      });
      // Nothing but the spinner runs: the spare comes because the only VM side computes, not because work waits.
      await until(() => own.poolStats.live === 2, "a spare VM side");
      const neighbour = await own.execute("return await tools.add({ a: 40, b: 2 });");
      expect(neighbour).toMatchObject({ ok: true, value: 42 });
      expect(spinnerEnded).toBe(false);
      // One spare is enough while one VM side computes.
      expect(own.poolStats.peak).toBe(2);
      stop.abort();
      expect(await spinner).toMatchObject({ ok: false, error: { kind: "aborted" } });
      // Back to one VM side: the extra one closes once idle (across a pipe, a child that computes cannot read its
      // stop and is killed, and the spare is then the one kept).
      await until(() => own.poolStats.live === 1, "the extra VM side to close once idle", EXTRA_IDLE_MS + 20_000);
      expect((await own.execute("return 6 * 7")).ok).toBe(true);
    } finally {
      await own.close();
    }
  });

  it("moves a neighbour whose call's answer waits behind another script's long turn", async () => {
    // A pool of its own, with one worker: the parked execution and the spinner land on the same one.
    const door = gate();
    const own = make({ tools: [door.tool], timeoutMs: 60_000, poolSize: 1, maxPoolSize: 2 }) as Pooled;
    try {
      await own.warm();
      const parked = own.execute(`const opened = await tools.gate(); return opened + "!";`);
      await until(() => door.calls === 1, "the parked execution's call");
      const stop = new AbortController();
      const spinner = own.execute("while (true) {}", { signal: stop.signal });
      let spinnerEnded = false;
      void spinner.then(() => {
        spinnerEnded = true;
      });
      // The answer arrives while the spinner holds the worker: the parked execution moves instead of waiting.
      await new Promise((resolve) => setTimeout(resolve, 100));
      door.release();
      expect(await parked).toMatchObject({ ok: true, value: "opened!" });
      expect(spinnerEnded).toBe(false);
      expect(door.calls).toBe(1);
      expect(own.poolStats.moved).toBe(1);
      stop.abort();
      expect(await spinner).toMatchObject({ ok: false, error: { kind: "aborted" } });
    } finally {
      await own.close();
    }
  });

  it("answers a neighbour that reached the VM side in the same batch as a spinner, just ahead of it", async () => {
    // One VM side with VMs made (the warm-up): both executions leave in one batch and start at once, the neighbour
    // first; its call must reach the host while the spinner's turn computes, not after it.
    const own = make({ tools: [add], timeoutMs: 60_000, poolSize: 1, maxPoolSize: 2 }) as Pooled;
    try {
      await own.warm();
      const stop = new AbortController();
      const neighbour = own.execute("return await tools.add({ a: 40, b: 2 });");
      const spinner = own.execute("while (true) {}", { signal: stop.signal });
      let spinnerEnded = false;
      void spinner.then(() => {
        spinnerEnded = true;
      });
      expect(await neighbour).toMatchObject({ ok: true, value: 42 });
      expect(spinnerEnded).toBe(false);
      stop.abort();
      expect(await spinner).toMatchObject({ ok: false, error: { kind: "aborted" } });
    } finally {
      await own.close();
    }
  });
});

// Where clocks run (not in a Durable Object, whose interrupt budget bounds it instead).
describe.each(launchers.filter((launcher) => launcher.name !== "durable-object"))(
  "$name sandbox: a loop of slow built-ins",
  ({ make }) => {
    it.each([
      ["Array.fill over ten million elements", "const a = new Array(1e7); for (;;) a.fill(1);"],
      ["lastIndexOf over 1 MiB", 'const s = "a".repeat(1 << 20); for (;;) s.lastIndexOf("b");'],
      ["sort of 300,000 numbers", "const a = Array.from({ length: 3e5 }, (_, i) => i); for (;;) a.sort();"],
    ])(
      "is pre-empted inside the built-in at its deadline (%s): nothing is killed, and the sandbox goes on",
      async (_, culprit) => {
        const own = make({ tools: [add], timeoutMs: 60_000 }) as CodemodeSandboxBase & {
          warm(): Promise<void>;
          poolStats?: PoolStats;
        };
        try {
          await own.warm();
          const started = Date.now();
          const result = await own.execute(culprit, { timeoutMs: 200 });
          expect(result).toMatchObject({ ok: false, error: { kind: "timeout" } });
          // A poll every 1,000 of QuickJS's ticks would come after hundreds of these calls, seconds to minutes
          // after the deadline; a loop's tick comes within a millisecond of it (5 s is a wide margin under load).
          expect(Date.now() - started).toBeLessThan(5_000);
          // The VM stopped itself: its worker or child was not killed (the inline sandbox has none).
          if (own.poolStats) expect(own.poolStats.lost).toBe(0);
          expect(await own.execute("return await tools.add({ a: 40, b: 2 });")).toMatchObject({ ok: true, value: 42 });
        } finally {
          await own.close();
        }
      },
      60_000,
    );
  },
);

describe.each(launchers)("$name sandbox: what one execution holds is bounded", ({ name, make }) => {
  let sandbox: ReturnType<typeof make>;
  beforeAll(async () => {
    sandbox = make({ tools: [add, sink], timeoutMs: 60_000, memoryLimitBytes: 64 * 1024 * 1024 });
    await sandbox.warm();
  });
  afterAll(async () => {
    await sandbox.close();
  });

  it("fails unawaited calls past the memory limit in the script, and the sandbox goes on", async () => {
    const sinks = counted.sink;
    const before = treeRssBytes();
    let peak = before;
    const sampler = setInterval(() => {
      peak = Math.max(peak, treeRssBytes());
    }, 10);
    // 20 calls of 16 Mi characters of JSON each, none awaited: together far past the 64 MiB limit.
    const result = await sandbox.execute(`
      const s = "\\\\".repeat(8e6);
      const calls = [];
      for (let i = 0; i < 20; i++) calls.push(tools.sink(s).then(() => "ok", (e) => e.message));
      return await Promise.all(calls);
    `);
    clearInterval(sampler);
    expect(result.ok).toBe(true);
    // Measured: the host and its child processes grew by a few copies of the calls that got through (16 Mi
    // characters each, as JSON, as frames and as the tool's string), not by all twenty (unbounded, a worker's host
    // grew by 990 MiB and died). Seen here: inline 105 MiB, worker 259, durable object 521, bubblewrap 495, gVisor 562.
    expect(peak - before, `${name}: peak ${peak}, before ${before}`).toBeLessThan(768 * 1024 * 1024);
    const answers = (result.ok ? result.value : []) as string[];
    const refused = answers.filter((a) => /memory limit of 67108864 bytes/.test(a));
    expect(answers.filter((a) => a === "ok").length + refused.length).toBe(20);
    expect(refused.length).toBeGreaterThanOrEqual(16);
    // Only calls within the limit reached the tool.
    expect(counted.sink - sinks).toBe(20 - refused.length);
    expect((await sandbox.execute("return 6 * 7")).ok).toBe(true);
  }, 120_000);

  it("ends a run whose output would pass its memory limit, even if the script catches the error", async () => {
    const small = make({ memoryLimitBytes: 8 * 1024 * 1024 });
    try {
      const result = await small.execute(`
        const line = "x".repeat(1 << 20);
        for (let i = 0; i < 12; i++) { try { text(line); } catch {} }
        return "kept going";
      `);
      expect(result).toMatchObject({ ok: false, error: { kind: "script", name: "RangeError" } });
      expect(!result.ok && result.error.message).toMatch(/memory limit of 8388608 bytes/);
      // Eight lines of 1 Mi characters fill the 8 MiB exactly; the ninth is refused.
      expect(result.output).toHaveLength(8);
    } finally {
      await small.close();
    }
  }, 60_000);

  it("stops calls at maxToolCalls with an error the script can catch, and keeps that many records", async () => {
    const limited = make({ tools: [add], maxToolCalls: 1_000 });
    try {
      const adds = counted.add;
      const result = await limited.execute(`
        let refused = 0, first;
        for (let i = 0; i < 200000; i++) {
          tools.add({ a: i, b: 0 }).catch((e) => { refused++; first ??= e.message; });
        }
        await tools.add({ a: 0, b: 0 }).catch(() => refused++);
        return [refused, first];
      `);
      expect(result.ok && result.value).toEqual([
        199_001,
        "add(): this execution has made its limit of 1000 calls (maxToolCalls)",
      ]);
      expect(result.calls).toHaveLength(1_000);
      expect(counted.add - adds).toBe(1_000);
    } finally {
      await limited.close();
    }
  }, 120_000);

  it(`has a default call limit of ${DEFAULT_MAX_TOOL_CALLS}`, async () => {
    const result = await sandbox.execute(`
      let refused = 0;
      for (let i = 0; i < ${DEFAULT_MAX_TOOL_CALLS + 5}; i++) tools.add({ a: i, b: 0 }).catch(() => refused++);
      await tools.add({ a: 0, b: 0 }).catch(() => refused++);
      await null;
      return refused;
    `);
    expect(result.ok && result.value).toBe(6);
    expect(result.calls.length).toBe(DEFAULT_MAX_TOOL_CALLS);
  });

  it("refuses options for the limits that are out of range, naming them", () => {
    expect(() => make({ maxToolCalls: 0 })).toThrow(/maxToolCalls must be an integer from 1 to/);
    expect(() => make({ maxTotalMemoryBytes: 1 })).toThrow(
      name === "durable-object"
        ? /maxTotalMemoryBytes does not apply to RemoteCodemodeSandbox/
        : /maxTotalMemoryBytes must be an integer of at least 1048576/,
    );
  });
});

// A remote sandbox's VMs hold the object's memory, not this host's (it refuses maxTotalMemoryBytes, tested above).
describe.each(launchers.filter((launcher) => launcher.name !== "durable-object"))(
  "$name sandbox: the host's guest-memory budget",
  ({ make }) => {
    it("runs at most as many executions at once as their memory limits fit in maxTotalMemoryBytes", async () => {
      const limit = 72 * 1024 * 1024;
      let holding = 0;
      let most = 0;
      const hold: CodemodeTool = {
        name: "hold",
        execute: async () => {
          holding++;
          most = Math.max(most, holding);
          await new Promise((resolve) => setTimeout(resolve, 30));
          holding--;
          return true;
        },
      };
      const sandbox = make({
        tools: [hold],
        memoryLimitBytes: limit,
        maxTotalMemoryBytes: 4 * limit,
        timeoutMs: 120_000,
      });
      try {
        await sandbox.warm();
        // The memory of this process and of every process under it (child processes, gVisor's sandbox).
        const before = treeRssBytes();
        let peak = before;
        const sampler = setInterval(() => {
          peak = Math.max(peak, treeRssBytes());
        }, 10);
        const results = await Promise.all(
          Array.from({ length: 16 }, () =>
            sandbox.execute(
              "const a = new Uint8Array(60 * 1024 * 1024); a.fill(1); await tools.hold(); return a.length;",
            ),
          ),
        );
        clearInterval(sampler);
        expect(results.map((r) => r.ok && r.value)).toEqual(Array(16).fill(60 * 1024 * 1024));
        expect(most).toBeGreaterThan(0);
        expect(most).toBeLessThanOrEqual(4);
        // Measured: at most four VMs' worth at once (16 unbounded would be 960 MiB more), with room for the VMs'
        // own overhead, the host's, and each VM side the pool added beside a computing one (a thread or a process of
        // its own, not guest memory).
        const stats = (sandbox as { poolStats?: { peak: number } }).poolStats;
        const addedSides = stats ? stats.peak - 1 : 0;
        expect(peak - before, `peak ${peak}, before ${before}, ${JSON.stringify(stats)}`).toBeLessThan(
          4 * limit + 160 * 1024 * 1024 + addedSides * 80 * 1024 * 1024,
        );
        // One execution whose limit could never fit fails at once, saying why.
        const huge = make({ memoryLimitBytes: 2 * limit, maxTotalMemoryBytes: limit });
        const refused = await huge.execute("return 1");
        expect(refused).toMatchObject({ ok: false, error: { kind: "sandbox" } });
        expect(!refused.ok && refused.error.message).toMatch(/more than the host's guest-memory budget/);
        await huge.close();
      } finally {
        await sandbox.close();
      }
    }, 120_000);
  },
);

/** Code mode's adapters that run programs on pooled VM sides: the worker adapter and the protocol adapter. */
const echo = echoTool(0);
/** A tool that answers after SLOW_TOOL_MS, counting its calls: a program that calls it is parked on it meanwhile. */
const SLOW_TOOL_MS = 300;
const slow = { calls: 0 };
const slowTool = defineTool({
  ...echoDefinition(0),
  id: "slow",
  execute: async ({ value }: { value?: unknown }) => {
    slow.calls++;
    await new Promise((resolve) => setTimeout(resolve, SLOW_TOOL_MS));
    return { value };
  },
});
const broker: CodeModeInvokeTool = (tool, input, context) =>
  invokeTool(tool, input, {
    ...context,
    permissions: { allow: [`tool:${tool.id}`, `effect:${tool.effects}`] },
    budget: new Budget(0, 1_000),
  });
const programOf = (source: string, cpuMillis: number, wallTimeMillis = 30_000) =>
  defineCodeProgram({
    id: "isolation",
    version: "1",
    intent: "A test.",
    language: "javascript",
    source,
    input: z.unknown(),
    output: z.unknown(),
    inputSchemaId: "any.v1",
    outputSchemaId: "any.v1",
    tools: [echo, slowTool],
    limits: { ...CODE_PROGRAM_LIMITS, cpuMillis, wallTimeMillis, maxToolConcurrency: 2 },
  });
let executions = 0;
const context = (signal?: AbortSignal) => ({
  runId: "isolation",
  executionId: `isolation-${++executions}`,
  scope: { principalId: "p" },
  signal: signal ?? AbortSignal.timeout(60_000),
});
const codeOf = (outcome: CodeExecutionOutcome<unknown>) => (outcome.status === "succeeded" ? "OK" : outcome.error.code);
const spinnerProgram = programOf("async () => { while (true) {} }", 20_000, 60_000);

type MakeAdapter = (options?: { maxPoolSize?: number }) => ReturnType<typeof createQuickJsSandboxAdapter>;

describe.each([
  {
    name: "QuickJS worker adapter",
    make: (options: { maxPoolSize?: number } = {}) => createQuickJsSandboxAdapter({ poolSize: 1, ...options }),
  },
  {
    name: "QuickJS protocol adapter over a child process",
    make: (options: { maxPoolSize?: number } = {}) =>
      createQuickJsProtocolAdapter({ id: "child", version: "1", launch: () => launchVmSideChild(), ...options }),
  },
])("code mode on the $name", ({ make }: { make: MakeAdapter }) => {
  const adapter = make();
  const mode = createCodeMode({ adapter, invokeTool: broker, allowTestAdapter: true });
  afterAll(() => adapter.close());
  const neighbour = programOf(
    `async (input, tools) => (await tools.call("echo", { value: input })).output.value`,
    1_000,
  );

  it.each([1, 2])(
    "runs programs that call tools while %i CPU-bound program(s) compute, without queueing them",
    async (n) => {
      const stop = new AbortController();
      const spinners = Array.from({ length: n }, () => mode.execute(spinnerProgram, null, context(stop.signal)));
      let spinnersEnded = false;
      void Promise.all(spinners).then(() => {
        spinnersEnded = true;
      });
      const outcomes = await Promise.all([1, 2, 3, 4].map((i) => mode.execute(neighbour, i, context())));
      expect(spinnersEnded).toBe(false);
      expect(outcomes.map((o) => o.status === "succeeded" && o.output)).toEqual([1, 2, 3, 4]);
      stop.abort();
      for (const outcome of await Promise.all(spinners)) expect(codeOf(outcome)).toBe("CANCELLED");
    },
  );

  it("answers a program that reached the VM side in the same batch as a CPU-bound one, just ahead of it", async () => {
    const stop = new AbortController();
    const first = mode.execute(neighbour, 7, context());
    const spinner = mode.execute(spinnerProgram, null, context(stop.signal));
    let spinnerEnded = false;
    void spinner.then(() => {
      spinnerEnded = true;
    });
    const outcome = await first;
    expect(spinnerEnded).toBe(false);
    expect(outcome.status === "succeeded" && outcome.output).toBe(7);
    stop.abort();
    expect(codeOf(await spinner)).toBe("CANCELLED");
  });

  for (const [what, culprit] of [
    ["a loop of Array.fill", "async () => { const a = new Array(1e7); for (;;) a.fill(1); }"],
    ["a loop of lastIndexOf over 1 MiB", 'async () => { const s = "a".repeat(1 << 20); for (;;) s.lastIndexOf("b"); }'],
    [
      "a loop of TypedArray.set over 8 MiB",
      "async () => { const t = new Uint8Array(8 << 20), u = new Uint8Array(8 << 20); for (;;) t.set(u); }",
    ],
  ] as const) {
    it(`ends ${what}, which polls the interrupt rarely, with LIMIT_EXCEEDED long before its wall time; a neighbour parked on a slow tool on the same VM side succeeds, its tool called once`, async () => {
      // An adapter of its own, with one VM side: the parked program and the culprit land on the same one.
      const own = make();
      const ownMode = createCodeMode({ adapter: own, invokeTool: broker, allowTestAdapter: true });
      try {
        const callsBefore = slow.calls;
        const parked = ownMode.execute(
          programOf(
            `async (input, tools) => { const a = await tools.call("slow", { value: 20 }); return a.output.value + 22; }`,
            1_000,
          ),
          null,
          context(),
        );
        await until(() => slow.calls === callsBefore + 1, "the parked program's call");
        const wallTimeMs = 10_000;
        const started = Date.now();
        const ended = await ownMode.execute(programOf(culprit, 200, wallTimeMs), null, context());
        const tookMs = Date.now() - started;
        expect(codeOf(ended)).toBe("LIMIT_EXCEEDED");
        // The host saw one turn compute past the whole 200 ms and stopped it, killing its VM side if need be: not
        // at its wall time (a third of it is a wide margin for a loaded machine).
        expect(tookMs).toBeLessThan(wallTimeMs / 3);
        expect(await parked).toMatchObject({ status: "succeeded", output: 42 });
        expect(slow.calls - callsBefore).toBe(1);
        // The adapter goes on.
        expect(await ownMode.execute(neighbour, 5, context())).toMatchObject({ status: "succeeded", output: 5 });
      } finally {
        await own.close();
      }
    }, 30_000);
  }

  it("grows up to maxPoolSize: with as many CPU-bound programs as the protocol adapter's default largest pool, and one VM side more, programs that call tools still run", async () => {
    const spinning = PROTOCOL_MAX_CONNECTIONS;
    const own = make({ maxPoolSize: spinning + 1 });
    const ownMode = createCodeMode({ adapter: own, invokeTool: broker, allowTestAdapter: true });
    const stop = new AbortController();
    try {
      // VM sides boot one after another, each while the others' spinners take the cores: room for a slow machine.
      const longSpinner = programOf("async () => { while (true) {} }", 120_000, 120_000);
      const spinners = Array.from({ length: spinning }, () => ownMode.execute(longSpinner, null, context(stop.signal)));
      let spinnersEnded = false;
      void Promise.all(spinners).then(() => {
        spinnersEnded = true;
      });
      const outcomes = await Promise.all([1, 2, 3].map((i) => ownMode.execute(neighbour, i, context())));
      expect(spinnersEnded).toBe(false);
      expect(outcomes.map((o) => o.status === "succeeded" && o.output)).toEqual([1, 2, 3]);
      stop.abort();
      for (const outcome of await Promise.all(spinners)) expect(codeOf(outcome)).toBe("CANCELLED");
    } finally {
      stop.abort();
      await own.close();
    }
  }, 150_000);

  it("refuses a maxPoolSize that is not an integer from 1 to 1024, naming it (INVALID_CONFIG)", () => {
    for (const bad of [0, 1.5, 1025, "2"]) {
      expect(() => make({ maxPoolSize: bad as number })).toThrowError(
        expect.objectContaining({
          code: "INVALID_CONFIG",
          message: "maxPoolSize must be an integer from 1 to 1024",
        }),
      );
    }
  });
});

describe("code mode on the QuickJS worker adapter: its pool's size", () => {
  it("refuses a maxPoolSize below poolSize, and maxPoolSize alone lowers the default poolSize", async () => {
    expect(() => createQuickJsSandboxAdapter({ poolSize: 3, maxPoolSize: 2 })).toThrowError(
      expect.objectContaining({ code: "INVALID_CONFIG", message: "maxPoolSize (2) must be at least poolSize (3)" }),
    );
    // maxPoolSize alone lowers the default poolSize (2 on a machine with 2 cores or more) rather than conflicting.
    const one = createQuickJsSandboxAdapter({ maxPoolSize: 1 });
    try {
      const ownMode = createCodeMode({ adapter: one, invokeTool: broker, allowTestAdapter: true });
      const neighbour = programOf(
        `async (input, tools) => (await tools.call("echo", { value: input })).output.value`,
        1_000,
      );
      expect(await ownMode.execute(neighbour, 3, context())).toMatchObject({ status: "succeeded", output: 3 });
    } finally {
      await one.close();
    }
  });
});
