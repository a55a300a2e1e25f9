/**
 * A soak of hostile executions among ordinary ones in every pooled launcher (worker pool, process tier under
 * bubblewrap and gVisor, plain child processes), at 16 and then 64 in flight, twice: spinners, loops of slow built-ins
 * the engine pre-empts, a loop of bulk copies that polls the interrupt rarely (stopped at its next poll, or its VM
 * side killed after the grace and its neighbours rebuilt elsewhere, as the deadline falls; the kill itself is tested
 * by isolation.test.ts and pool-unmovable.test.ts, with copies seconds apart), memory bombs, floods of unawaited calls
 * with large arguments, calls past maxToolCalls, aborts of executions parked on a tool, memory-heavy executions that
 * wait on a slow tool, under a guest-memory budget that fits 16 runs. Every execution ends as its kind says;
 * afterwards the pool is back to its size, the process holds the handles and child processes it held before, and RSS
 * is back near its level.
 */
import type { CodemodeTool } from "airlock-codemode";
import { describe, expect, it } from "vitest";
import { EXTRA_IDLE_MS } from "../dist/host/pool.js";
import { pooledLaunchers } from "./helpers/sandboxes.ts";

const MEMORY_LIMIT = 32 * 1024 * 1024;
const CALL_LIMIT = 500;

interface Kind {
  name: string;
  code: string;
  /** What the result is: "ok" with a value, or an error kind. */
  expect: { ok: true; value: unknown } | { ok: false; kind: string };
  timeoutMs?: number;
  /** Aborted once its call reached the tool. */
  abort?: boolean;
}

const kinds: Kind[] = [
  { name: "return", code: "return 1", expect: { ok: true, value: 1 } },
  { name: "tool", code: "return await tools.add({ a: 40, b: 2 })", expect: { ok: true, value: 42 } },
  { name: "throw", code: "throw new Error('no')", expect: { ok: false, kind: "script" } },
  { name: "spinner", code: "while (true) {}", timeoutMs: 200, expect: { ok: false, kind: "timeout" } },
  {
    name: "fill loop",
    code: "const a = new Array(1e6); for (;;) a.fill(1);",
    timeoutMs: 200,
    expect: { ok: false, kind: "timeout" },
  },
  {
    name: "tools in a loop",
    code: "let t = 0; for (let i = 0; i < 20; i++) t += await tools.add({ a: i, b: 0 }); return t",
    expect: { ok: true, value: 190 },
  },
  {
    name: "memory bomb",
    code: "const a = []; while (true) a.push('z'.repeat(256) + a.length);",
    expect: { ok: false, kind: "script" },
  },
  {
    name: "parked, aborted",
    code: "await tools.wait(); return 1",
    abort: true,
    expect: { ok: false, kind: "aborted" },
  },
  {
    // 2 Mi characters of JSON each, none awaited: together past the 32 MiB limit, so most are refused in the script.
    name: "large-argument flood",
    code: `const s = "\\\\".repeat(1e6); const calls = [];
      for (let i = 0; i < 20; i++) calls.push(tools.sink(s).then(() => 0, () => 1));
      const refused = (await Promise.all(calls)).reduce((a, b) => a + b, 0);
      return refused > 0`,
    expect: { ok: true, value: true },
  },
  {
    name: "call flood",
    code: `let refused = 0;
      for (let i = 0; i < ${CALL_LIMIT + 100}; i++) tools.add({ a: i, b: 0 }).catch(() => refused++);
      await tools.add({ a: 0, b: 0 }).catch(() => refused++);
      return refused`,
    expect: { ok: true, value: 101 },
  },
  { name: "return", code: "return [1, 2, 3].map((x) => x * 2).length", expect: { ok: true, value: 3 } },
  {
    // Memory-heavy beside the others: it fills most of its limit page by page (a long turn the host sees), then
    // waits on a slow tool. Moves must not repeat its fill for nothing, nor hold its memory twice past the budget.
    name: "fill, then a slow tool",
    code: `const a = new Uint8Array(24 << 20); for (let i = 0; i < a.length; i += 4096) a[i] = 1;
      await tools.slow(); return a.length`,
    expect: { ok: true, value: 24 << 20 },
  },
  {
    // Bulk copies, which no loop tick reaches and which poll the interrupt rarely.
    name: "bulk-copy loop",
    code: "const t = new Uint8Array(8 << 20), u = new Uint8Array(8 << 20); for (;;) t.set(u);",
    timeoutMs: 200,
    expect: { ok: false, kind: "timeout" },
  },
];

const activeHandles = () =>
  process
    .getActiveResourcesInfo()
    .filter((r) => r !== "TTYWrap")
    .sort();

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe.each(pooledLaunchers)("$name pool under a soak of hostile and ordinary executions", ({ name, make }) => {
  it("ends every execution as its kind says, at 16 and 64 in flight, and goes back to its size, handles and memory", {
    timeout: 300_000,
  }, async () => {
    let waiting = 0;
    const tools: CodemodeTool[] = [
      { name: "add", execute: async (args) => (args as { a: number; b: number }).a + (args as { b: number }).b },
      { name: "sink", execute: async (args) => (typeof args === "string" ? args.length : 0) },
      { name: "slow", execute: () => new Promise((resolve) => setTimeout(() => resolve(true), 300)) },
      {
        name: "wait",
        execute: (_args, { signal }) => {
          waiting++;
          return new Promise((resolve) => signal.addEventListener("abort", () => resolve(0)));
        },
      },
    ];
    const sandbox = make({
      tools,
      poolSize: 2,
      maxPoolSize: 8,
      timeoutMs: 60_000,
      memoryLimitBytes: MEMORY_LIMIT,
      maxTotalMemoryBytes: 16 * MEMORY_LIMIT,
      maxToolCalls: CALL_LIMIT,
    });
    try {
      await sandbox.warm();
      await sleep(300);
      const handlesBefore = activeHandles();
      const rssBefore = process.memoryUsage().rss;
      const failures: string[] = [];
      let index = 0;
      const one = async () => {
        const n = index++;
        const kind = kinds[n % kinds.length] as Kind;
        const controller = new AbortController();
        if (kind.abort) {
          const seen = waiting;
          void (async () => {
            while (waiting === seen && !controller.signal.aborted) await sleep(2);
            controller.abort();
          })();
        }
        const result = await sandbox.execute(kind.code, { signal: controller.signal, timeoutMs: kind.timeoutMs });
        controller.abort();
        const got = result.ok ? { ok: true, value: result.value } : { ok: false, kind: result.error.kind };
        if (JSON.stringify(got) !== JSON.stringify(kind.expect)) {
          const detail = result.ok ? "" : ` (${result.error.message.slice(0, 200)})`;
          failures.push(`#${n} ${kind.name}: ${JSON.stringify(got)}${detail}`);
        }
      };
      let rssAfterFirstCycle = 0;
      for (let cycle = 0; cycle < 2; cycle++) {
        for (const inFlight of [16, 64]) {
          await Promise.all(Array.from({ length: inFlight }, one));
        }
        if (cycle === 0) rssAfterFirstCycle = process.memoryUsage().rss;
      }
      expect(failures).toEqual([]);
      // The VM sides added beside computing scripts close once idle.
      const idleBy = Date.now() + EXTRA_IDLE_MS + 20_000;
      while (sandbox.poolStats.live > 2 && Date.now() < idleBy) await sleep(50);
      expect(sandbox.poolStats.live).toBe(2);
      expect(sandbox.poolStats.peak).toBeLessThanOrEqual(8);
      // Timers of finished executions are cleared, killed children reaped (a gVisor container's removal takes a
      // while), and nothing new keeps the process alive.
      const reaped = Date.now() + 20_000;
      while (activeHandles().join() !== handlesBefore.join() && Date.now() < reaped) await sleep(50);
      expect(activeHandles()).toEqual(handlesBefore);
      const rss = process.memoryUsage().rss;
      expect(rss, `${name}: RSS before ${rssBefore}, after the first cycle ${rssAfterFirstCycle}`).toBeLessThan(
        Math.max(rssBefore, rssAfterFirstCycle) * 1.5,
      );
      expect((await sandbox.execute("return 6 * 7")).ok).toBe(true);
    } finally {
      await sandbox.close();
    }
    expect(sandbox.poolStats.live).toBe(0);
  });
});
