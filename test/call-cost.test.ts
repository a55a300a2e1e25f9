/**
 * A call charged what its tool said it cost: a durable code phase reserves its program's most and reports what the
 * program's calls cost (`reportCallCost`, not public: this file imports the source tree, whose broker knows the
 * contexts it made). The budget and the outcome's recorded cost follow the report; a report that is repeated, late or
 * past the tool's cost is refused, and the call then costs its whole cost.
 */
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { Budget } from "../src/tools/budget.ts";
import { defineTool, type ToolContext, type ToolEffect } from "../src/tools/define.ts";
import { costOfOutcome, invokeTool, reportCallCost } from "../src/tools/invoke.ts";

const scope = { principalId: "user-1" };
const value = z.object({ value: z.number() });

function toolOf(
  effects: ToolEffect,
  execute: (context: ToolContext) => { value: number } | Promise<{ value: number }>,
  timeoutMillis = 5_000,
) {
  return defineTool({
    id: "metered.tool",
    version: "1",
    description: "A tool whose cost is known once it ran.",
    input: value,
    output: value,
    effects,
    capabilities: [],
    costMicros: 5,
    timeoutMillis,
    execute: (_input: { value: number }, context: ToolContext) => execute(context),
  });
}

async function call(tool: ReturnType<typeof toolOf>, budget: Budget) {
  return invokeTool(
    tool,
    { value: 1 },
    {
      runId: "run-1",
      callId: "call-1",
      scope,
      permissions: { allow: ["tool:metered.tool", `effect:${tool.effects}`] },
      budget,
    },
  );
}

const ledger = (budget: Budget) => ({
  spent: budget.spentMicros,
  unknown: budget.unknownMicros,
  reserved: budget.reservedMicros,
  calls: budget.calls,
});

describe("a call's reported cost", () => {
  it("charges what the tool reported and gives the rest of its reservation back", async () => {
    const budget = new Budget(100, 10);
    const tool = toolOf("read", (context) => {
      reportCallCost(context, { spentMicros: 2, unknownMicros: 0 });
      return { value: 2 };
    });
    const outcome = await call(tool, budget);
    expect(outcome).toEqual({ status: "succeeded", output: { value: 2 } });
    expect(costOfOutcome(outcome)).toEqual({ spentMicros: 2, unknownMicros: 0 });
    expect(ledger(budget)).toEqual({ spent: 2, unknown: 0, reserved: 0, calls: 1 });
  });

  it("keeps a write that threw unknown, charged and held as reported", async () => {
    const budget = new Budget(100, 10);
    const tool = toolOf("write", (context) => {
      reportCallCost(context, { spentMicros: 1, unknownMicros: 2 });
      throw new Error("after a part of the work");
    });
    const outcome = await call(tool, budget);
    expect(outcome).toMatchObject({ status: "outcome_unknown", error: { code: "OUTCOME_UNKNOWN" } });
    expect(costOfOutcome(outcome)).toEqual({ spentMicros: 1, unknownMicros: 2 });
    expect(ledger(budget)).toEqual({ spent: 1, unknown: 2, reserved: 0, calls: 1 });
  });

  it("refuses a report past the tool's cost and a second one", async () => {
    const refusals: unknown[] = [];
    const attempt = (context: ToolContext, spentMicros: number, unknownMicros: number) => {
      try {
        reportCallCost(context, { spentMicros, unknownMicros });
      } catch (error) {
        refusals.push(error);
      }
    };
    const budget = new Budget(100, 10);
    const past = toolOf("read", (context) => {
      attempt(context, 4, 2);
      attempt(context, -1, 0);
      attempt(context, 0.5, 0);
      return { value: 1 };
    });
    await call(past, budget);
    // Nothing reported stood: the call cost its whole 5.
    expect(ledger(budget)).toEqual({ spent: 5, unknown: 0, reserved: 0, calls: 1 });
    const twice = toolOf("read", (context) => {
      attempt(context, 1, 0);
      attempt(context, 0, 0);
      return { value: 1 };
    });
    await call(twice, budget);
    expect(ledger(budget)).toEqual({ spent: 6, unknown: 0, reserved: 0, calls: 2 });
    // A handler called outside the broker has no call to charge: its report changes nothing.
    attempt(Object.freeze({ runId: "r", callId: "c", scope, signal: new AbortController().signal }), 9, 9);
    expect(refusals).toHaveLength(4);
    for (const refusal of refusals) expect(refusal).toMatchObject({ code: "INTEGRITY_VIOLATION" });
  });

  it("refuses a report that comes after the call was given up, which then cost its whole cost", async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    let late: unknown;
    let reported!: () => void;
    const done = new Promise<void>((resolve) => {
      reported = resolve;
    });
    const budget = new Budget(100, 10);
    // A read tool that ignores its signal: it is given up after its timeout and the abort grace.
    const slow = toolOf(
      "read",
      async (context) => {
        await gate;
        try {
          reportCallCost(context, { spentMicros: 1, unknownMicros: 0 });
        } catch (error) {
          late = error;
        }
        reported();
        return { value: 1 };
      },
      50,
    );
    const outcome = await call(slow, budget);
    expect(outcome).toMatchObject({ status: "failed", error: { code: "TIMEOUT" } });
    release();
    await done;
    expect(late).toMatchObject({ code: "INTEGRITY_VIOLATION" });
    expect(ledger(budget)).toEqual({ spent: 5, unknown: 0, reserved: 0, calls: 1 });
  });

  it("settles a reservation to part of its cost, and refuses more than it reserved", () => {
    const budget = new Budget(10, 2);
    const reservation = budget.reserve(5);
    expect(() => reservation?.settle(4, 2)).toThrowError(expect.objectContaining({ code: "INVALID_CONFIG" }));
    reservation?.settle(3, 1);
    reservation?.commit();
    expect(ledger(budget)).toEqual({ spent: 3, unknown: 1, reserved: 0, calls: 1 });
    expect(budget.remainingMicros).toBe(6);
  });
});
