/**
 * Mayura's cases about how a run ended, which code mode can only tell apart when the engine reports it as a
 * structured reason rather than as an error's text (src/host/run-program.ts):
 * - a program that throws its own `InternalError("out of memory")` has thrown; it did not meet the memory limit;
 * - a program that catches a refused allocation sees it and may go on, and never gets more than its limit;
 * - a program whose promise can never settle fails at once as TOOL_FAILED, with no programError written by Airlock
 *   (the program threw nothing).
 * Every adapter that runs Airlock's VM side runs them (see fixtures.ts).
 */
import type { ClosableSandboxAdapter } from "airlock-codemode/adapter-code-quickjs";
import { type CodeModeInvokeTool, createCodeMode } from "airlock-codemode/code-mode";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ADAPTERS, cleanUp, execute, LIMITS } from "./fixtures.ts";

afterAll(cleanUp);

const refusing: CodeModeInvokeTool = () => ({
  status: "failed",
  error: { code: "TOOL_FAILED", message: "this broker runs nothing" },
});

describe.each(ADAPTERS)("$name", (compat) => {
  let adapter: ClosableSandboxAdapter;
  const mode = () => createCodeMode({ adapter, invokeTool: refusing, allowTestAdapter: !compat.production });
  beforeAll(() => {
    adapter = compat.make();
  });
  afterAll(() => adapter.close());

  it("does not take a program's own InternalError('out of memory') for the memory limit", async () => {
    const outcome = await execute(mode(), `() => { throw new InternalError("out of memory"); }`);
    expect(outcome).toMatchObject({
      status: "failed",
      error: { code: "TOOL_FAILED" },
      programError: { name: "InternalError", message: "out of memory" },
    });
  });

  it("lets a program that catches a refused allocation go on, within its limit", async () => {
    const outcome = await execute(
      mode(),
      `() => {
        const values = [];
        try { for (;;) values.push("x".repeat(65536) + values.length); }
        catch (error) { return [values.length, String(error)]; }
      }`,
      { limits: { cpuMillis: 5_000 } },
    );
    expect(outcome).toMatchObject({
      status: "succeeded",
      output: [expect.any(Number), "InternalError: out of memory"],
    });
    // Each kept string holds 64 Ki characters: there can be no more of them than the heap holds.
    const kept = outcome.status === "succeeded" ? (outcome.output as [number])[0] : Number.POSITIVE_INFINITY;
    expect(kept).toBeLessThan(LIMITS.memoryBytes / 65_536);
  });

  it("fails a program whose promise can never settle as TOOL_FAILED, with no programError of Airlock's", async () => {
    // The wall clock is far away: the run ends because nothing can settle the promise, not at a deadline.
    const outcome = await execute(mode(), "() => new Promise(() => {})", { limits: { wallTimeMillis: 60_000 } });
    expect(outcome).toMatchObject({ status: "failed", error: { code: "TOOL_FAILED" } });
    expect(outcome).not.toHaveProperty("programError");
  });
});
