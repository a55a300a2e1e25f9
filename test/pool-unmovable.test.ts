/**
 * A neighbour whose journal grew past what the host keeps can no longer be rebuilt elsewhere, and it is never lost
 * because another execution was killed, in every pooled launcher: once its journal passes half of its limit it has a
 * VM side to itself (a culprit that arrives later runs, and is killed, elsewhere), and a VM side that holds such a run
 * is not killed for a culprit that was there before (the culprit is waited for). (Call arguments are journaled as a
 * digest past KEPT_ARGS_CHARS; answers are kept whole, since a rebuilt run is sent them again.)
 */
import type { CodemodeTool } from "airlock-codemode";
import { describe, expect, it } from "vitest";
import { pooledLaunchers } from "./helpers/sandboxes.ts";
import { until } from "./helpers/wait.ts";

/** 3 Mi characters an answer: three of them pass the journal's 8 Mi, two its half. */
const ANSWER_CHARS = 3 << 20;
const NEIGHBOUR =
  "let n = 0; for (let i = 0; i < 3; i++) n += (await tools.big()).length; await tools.gate(); return n";

/** A tool whose calls wait until `open()`, counting them. */
function gate(name: string) {
  let calls = 0;
  let release: () => void = () => {};
  const opened = new Promise<void>((resolve) => {
    release = resolve;
  });
  const tool: CodemodeTool = {
    name,
    execute: async () => {
      calls++;
      await opened;
      return "opened";
    },
  };
  return {
    tool,
    open: () => release(),
    get calls() {
      return calls;
    },
  };
}

const big: CodemodeTool = { name: "big", execute: async () => "x".repeat(ANSWER_CHARS) };

describe.each(pooledLaunchers)("$name pool: a neighbour too large to move", ({ make }) => {
  it("keeps its VM side to itself: a culprit that arrives later is placed and killed elsewhere, the neighbour succeeds", async () => {
    const parked = gate("gate");
    const sandbox = make({
      tools: [big, parked.tool],
      poolSize: 1,
      maxPoolSize: 2,
      timeoutMs: 60_000,
      memoryLimitBytes: 96 << 20,
    });
    try {
      await sandbox.warm();
      const neighbour = sandbox.execute(NEIGHBOUR);
      await until(() => parked.calls === 1, "the neighbour's call");
      // Bulk copies, which nothing pre-empts: its VM side is killed. (Its deadline leaves time for a second VM side
      // to boot: the neighbour's takes no other run.) It polls the interrupt every 500 copies, seconds apart, so it
      // stops by itself when its deadline falls within the grace of a poll: it is sent again until it is killed.
      for (let tries = 0; sandbox.poolStats.lost === 0; tries++) {
        expect(tries, "the culprit stopped by itself each time").toBeLessThan(4);
        const culprit = await sandbox.execute(
          "const t = new Uint8Array(32 << 20), u = new Uint8Array(32 << 20); for (;;) t.set(u);",
          { timeoutMs: 5_000 },
        );
        expect(culprit).toMatchObject({ ok: false, error: { kind: "timeout" } });
        await until(() => sandbox.poolStats.lost === 1, "the culprit's VM side to be killed", 10_000).catch(() => {});
      }
      expect(sandbox.poolStats.lost).toBe(1);
      parked.open();
      expect(await neighbour).toMatchObject({ ok: true, value: 3 * ANSWER_CHARS });
      // The gate was called once: nothing was rebuilt.
      expect(parked.calls).toBe(1);
      expect(sandbox.poolStats.moved).toBe(0);
      expect((await sandbox.execute("return 6 * 7")).ok).toBe(true);
    } finally {
      parked.open();
      await sandbox.close();
    }
  }, 120_000);

  it("is not lost when a culprit that shared its VM side before does not stop: the culprit is waited for", async () => {
    const parked = gate("gate");
    const culpritGate = gate("hold");
    // One VM side: the culprit and the neighbour share it.
    const sandbox = make({
      tools: [big, parked.tool, culpritGate.tool],
      poolSize: 1,
      maxPoolSize: 1,
      timeoutMs: 60_000,
      memoryLimitBytes: 96 << 20,
    });
    try {
      await sandbox.warm();
      // Its deadline passes while it copies: it is stopped then, and does not stop within the grace.
      const culprit = sandbox.execute(
        "await tools.hold(); const t = new Uint8Array(32 << 20), u = new Uint8Array(32 << 20); for (;;) t.set(u);",
        { timeoutMs: 5_000 },
      );
      await until(() => culpritGate.calls === 1, "the culprit's call");
      const neighbour = sandbox.execute(NEIGHBOUR);
      await until(() => parked.calls === 1, "the neighbour's call");
      culpritGate.open();
      expect(await culprit).toMatchObject({ ok: false, error: { kind: "timeout" } });
      parked.open();
      expect(await neighbour).toMatchObject({ ok: true, value: 3 * ANSWER_CHARS });
      expect(parked.calls).toBe(1);
      expect(sandbox.poolStats).toMatchObject({ lost: 0, moved: 0 });
      expect((await sandbox.execute("return 6 * 7")).ok).toBe(true);
    } finally {
      parked.open();
      culpritGate.open();
      await sandbox.close();
    }
  }, 120_000);
});
