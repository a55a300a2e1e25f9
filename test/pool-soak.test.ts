/**
 * 5,000 mixed executions on the worker pool (success, throw, timeout, abort, out of memory, tools): afterwards the
 * pool has its workers (the ones it added beside spinning scripts closed once idle), the process its handles, and
 * RSS about its level after the first round.
 */
import { CodemodeSandbox } from "airlock-codemode";
import { describe, expect, it } from "vitest";
import { EXTRA_IDLE_MS } from "../dist/host/pool.js";

const kinds = [
  { code: "return 1", expect: "ok" },
  { code: "throw new Error('no')", expect: "script" },
  { code: "while (true) {}", expect: "timeout", timeoutMs: 30 },
  { code: "await tools.wait();", expect: "aborted", abort: true },
  { code: "const a = []; while (true) a.push('z'.repeat(256) + a.length);", expect: "script" },
  { code: "return (await tools.echo({ n: [1, 2, 3] })).n.length", expect: "ok" },
  { code: "text('x'.repeat(100)); store('k', 1); return load('k')", expect: "ok" },
] as const;

const activeHandles = () =>
  process
    .getActiveResourcesInfo()
    .filter((r) => r !== "TTYWrap")
    .sort();

describe("the worker pool under a mixed soak", () => {
  it("keeps its workers, handles and memory through 5,000 executions", { timeout: 240_000 }, async () => {
    const sandbox = new CodemodeSandbox({
      poolSize: 2,
      timeoutMs: 10_000,
      memoryLimitBytes: 4 * 1024 * 1024,
      tools: [
        { name: "echo", execute: (args) => args },
        {
          name: "wait",
          execute: (_args, { signal }) => new Promise((resolve) => signal.addEventListener("abort", () => resolve(0))),
        },
      ],
    });
    await sandbox.warm();
    const counts = new Map<string, number>();
    let rssAfterFirstRound = 0;
    let handlesBefore: string[] = [];
    const total = 5_000;
    const concurrency = 25;
    for (let done = 0; done < total; done += concurrency) {
      const batch = Array.from({ length: concurrency }, async (_, i) => {
        const kind = kinds[(done + i) % kinds.length] as (typeof kinds)[number];
        const controller = new AbortController();
        if ("abort" in kind) setTimeout(() => controller.abort(), 2);
        const timeoutMs = "timeoutMs" in kind ? kind.timeoutMs : undefined;
        const result = await sandbox.execute(kind.code, { signal: controller.signal, timeoutMs });
        const got = result.ok ? "ok" : result.error.kind;
        expect(got).toBe(kind.expect);
        counts.set(got, (counts.get(got) ?? 0) + 1);
      });
      await Promise.all(batch);
      if (done === 0) {
        await new Promise((resolve) => setTimeout(resolve, 300));
        handlesBefore = activeHandles();
      }
      if (done === 500) rssAfterFirstRound = process.memoryUsage().rss;
    }
    expect([...counts.values()].reduce((a, b) => a + b, 0)).toBe(total);
    // Workers the pool added while scripts spun (so that nothing queued behind them) close once idle.
    const until = Date.now() + 2 * EXTRA_IDLE_MS;
    while (sandbox.threadCount > 2 && Date.now() < until) await new Promise((resolve) => setTimeout(resolve, 50));
    expect(sandbox.threadCount).toBe(2);
    // Timers of finished executions are cleared, and idle workers do not keep the process alive.
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(activeHandles()).toEqual(handlesBefore);
    expect(process.memoryUsage().rss).toBeLessThan(rssAfterFirstRound * 1.5);
    await sandbox.close();
    expect(sandbox.threadCount).toBe(0);
  });
});
