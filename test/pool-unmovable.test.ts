/**
 * A neighbour whose journal grew past what the host keeps can no longer be rebuilt elsewhere: when its VM side is
 * killed for another execution, it fails with the kill's reason and with why it could not move, in every pooled
 * launcher. (Call arguments are journaled as a digest past KEPT_ARGS_CHARS; answers are kept whole, since a rebuilt
 * run is sent them again.)
 */
import type { CodemodeTool } from "airlock-codemode";
import { describe, expect, it } from "vitest";
import { pooledLaunchers } from "./helpers/sandboxes.ts";
import { until } from "./helpers/wait.ts";

describe.each(pooledLaunchers)("$name pool: a neighbour too large to move", ({ make }) => {
  it("fails with an error naming MAX_JOURNAL_CHARS when its VM side is killed for another execution", async () => {
    let gateCalls = 0;
    let release: () => void = () => {};
    const opened = new Promise<void>((resolve) => {
      release = resolve;
    });
    const tools: CodemodeTool[] = [
      // 3 Mi characters an answer: three of them pass the journal's 8 Mi.
      { name: "big", execute: async () => "x".repeat(3 << 20) },
      {
        name: "gate",
        execute: async () => {
          gateCalls++;
          await opened;
          return "opened";
        },
      },
    ];
    const sandbox = make({ tools, poolSize: 1, maxPoolSize: 2, timeoutMs: 60_000, memoryLimitBytes: 96 << 20 });
    try {
      await sandbox.warm();
      const parked = sandbox.execute(
        "let n = 0; for (let i = 0; i < 3; i++) n += (await tools.big()).length; await tools.gate(); return n",
      );
      await until(() => gateCalls === 1, "the parked execution's call");
      // Bulk copies, which nothing pre-empts: its VM side is killed, and the parked execution with it.
      const culprit = await sandbox.execute(
        "const t = new Uint8Array(32 << 20), u = new Uint8Array(32 << 20); for (;;) t.set(u);",
        { timeoutMs: 300 },
      );
      expect(culprit).toMatchObject({ ok: false, error: { kind: "timeout" } });
      await until(() => sandbox.poolStats.lost === 1, "the culprit's VM side to be killed");
      release();
      const result = await parked;
      expect(result).toMatchObject({ ok: false, error: { kind: "sandbox" } });
      expect(!result.ok && result.error.message).toMatch(
        /did not stop a run in time; this execution could not be rebuilt on another .*: its journal passed 8388608 characters .*MAX_JOURNAL_CHARS/,
      );
      // The gate was called once: nothing was rebuilt.
      expect(gateCalls).toBe(1);
      expect(sandbox.poolStats.moved).toBe(0);
      expect((await sandbox.execute("return 6 * 7")).ok).toBe(true);
    } finally {
      release();
      await sandbox.close();
    }
  }, 120_000);
});
