/**
 * Mayura's tools suite (packages/tools/test/tools.test.ts, and the tool cases of packages/core), ported: a defined
 * tool is frozen metadata whose handler only the broker reaches; the broker checks exact permissions, validates,
 * bounds and freezes what it passes on, and a tool with effects that throws leaves its outcome unknown.
 */
import {
  Budget,
  defineTool,
  type InvokeToolOptions,
  invokeTool,
  type Outcome,
  type ToolContext,
  type ToolEffect,
  z,
} from "airlock-codemode";
import { describe, expect, it } from "vitest";

const SCOPE = { principalId: "person-1", projectId: "project-1" };
const input = z.object({ value: z.number() });
const output = z.object({ result: z.number() });

/** The definition of Mayura's fixture tool, with `overrides`; a tool carries no handler, so tools are made from it. */
function definition(overrides: Partial<Parameters<typeof defineTool<typeof input, typeof output>>[0]> = {}) {
  return {
    id: "number.double",
    version: "1.0.0",
    description: "Double a number.",
    input,
    output,
    effects: "none" as ToolEffect,
    capabilities: [] as string[],
    costMicros: 0,
    execute: ({ value }: { value: number }) => ({ result: value * 2 }),
    ...overrides,
  };
}

function context(overrides: Partial<InvokeToolOptions> = {}): InvokeToolOptions {
  return {
    runId: "run-1",
    callId: "call-1",
    scope: SCOPE,
    signal: new AbortController().signal,
    permissions: { allow: ["tool:number.double"] },
    budget: new Budget(100, 20),
    ...overrides,
  };
}

const codeOf = (outcome: Outcome<unknown>) => (outcome.status === "succeeded" ? "OK" : outcome.error.code);

describe("a defined tool", () => {
  it("is frozen metadata: its handler cannot be reached on it, only through invokeTool", async () => {
    let runs = 0;
    const tool = defineTool(
      definition({
        execute: ({ value }) => {
          runs++;
          return { result: value * 2 };
        },
      }),
    );
    expect(Object.isFrozen(tool)).toBe(true);
    expect("execute" in tool).toBe(false);
    expect(Object.values(tool).some((value) => typeof value === "function")).toBe(false);
    // A copy is not a tool, and spreading it does not carry the handler either.
    expect(codeOf(await invokeTool({ ...tool }, { value: 1 }, context()))).toBe("INVALID_CONFIG");
    expect(() => defineTool({ ...tool } as never)).toThrowError(expect.objectContaining({ code: "INVALID_CONFIG" }));
    expect(runs).toBe(0);
    expect(await invokeTool(tool, { value: 5 }, context())).toMatchObject({
      status: "succeeded",
      output: { result: 10 },
    });
    expect(runs).toBe(1);
  });

  it("refuses malformed definitions with INVALID_CONFIG, and ids that do not start with a letter", () => {
    for (const overrides of [
      { id: "" },
      { id: "1-double" },
      { timeoutMillis: 0 },
      { costMicros: -1 },
      { capabilities: ["same", "same"] },
      { effects: "delete" as ToolEffect },
    ]) {
      expect(() => defineTool(definition(overrides)), JSON.stringify(overrides)).toThrowError(
        expect.objectContaining({ code: "INVALID_CONFIG" }),
      );
    }
    for (const effects of ["none", "read", "write", "host"] as const) {
      expect(defineTool(definition({ effects })).effects).toBe(effects);
    }
  });

  it("keeps what it was defined with: later changes to the definition change nothing", async () => {
    const capabilities = ["extra:read"];
    const source = definition({ capabilities });
    const tool = defineTool(source);
    capabilities.push("extra:write");
    source.execute = () => ({ result: 999 });
    const value = { value: 2 };
    const scope = { ...SCOPE };
    const grants = ["tool:number.double", "extra:read"];
    const pending = invokeTool(tool, value, context({ scope, permissions: { allow: grants } }));
    value.value = 100;
    scope.projectId = "project-2";
    grants.length = 0;
    expect(await pending).toMatchObject({ status: "succeeded", output: { result: 4 } });
    expect(tool.capabilities).toEqual(["extra:read"]);
  });
});

describe("invokeTool", () => {
  it("needs the exact tool grant even for a pure tool, which needs nothing more", async () => {
    let runs = 0;
    const pure = defineTool(
      definition({
        execute: () => {
          runs++;
          return { result: 0 };
        },
      }),
    );
    expect(await invokeTool(pure, { value: 1 }, context({ permissions: { allow: [] } }))).toMatchObject({
      status: "blocked",
      error: { code: "PERMISSION_DENIED" },
    });
    expect(runs).toBe(0);
    expect(codeOf(await invokeTool(pure, { value: 1 }, context()))).toBe("OK");
    expect(codeOf(await invokeTool(pure, { value: 1 }, context({ permissions: { allow: ["tool:*"] } })))).toBe(
      "PERMISSION_DENIED",
    );
  });

  it("needs the tool, its effect and every capability for a tool with effects", async () => {
    let runs = 0;
    const writer = defineTool(
      definition({
        effects: "write",
        capabilities: ["project:write"],
        execute: () => {
          runs++;
          return { result: 2 };
        },
      }),
    );
    for (const allow of [
      ["tool:number.double"],
      ["tool:number.double", "effect:write"],
      ["tool:number.double", "project:write"],
    ]) {
      expect(await invokeTool(writer, { value: 1 }, context({ permissions: { allow } }))).toMatchObject({
        status: "blocked",
      });
    }
    expect(runs).toBe(0);
    const all = ["tool:number.double", "effect:write", "project:write"];
    expect(codeOf(await invokeTool(writer, { value: 1 }, context({ permissions: { allow: all } })))).toBe("OK");
    expect(runs).toBe(1);
  });

  it("refuses invalid input before the tool runs, without its text in the outcome", async () => {
    let runs = 0;
    const tool = defineTool(
      definition({
        execute: () => {
          runs++;
          return { result: 0 };
        },
      }),
    );
    for (const value of [
      { value: "private-input" },
      JSON.parse('{"value":1,"__proto__":{"admin":true}}'),
      { value: 1, pad: 1n },
    ]) {
      const outcome = await invokeTool(tool, value, context());
      expect(outcome).toMatchObject({ status: "failed", error: { code: "INVALID_INPUT" } });
      expect(JSON.stringify(outcome)).not.toContain("private-input");
    }
    expect(await invokeTool(tool, { value: 1, pad: "p".repeat(200) }, context({ maxInputBytes: 100 }))).toMatchObject({
      status: "failed",
      error: { code: "INVALID_INPUT" },
    });
    expect(runs).toBe(0);
    expect(({} as Record<string, unknown>).admin).toBeUndefined();
  });

  it("refuses output past maxOutputBytes, or not matching the schema, as INVALID_OUTPUT", async () => {
    const tool = defineTool(definition());
    expect(await invokeTool(tool, { value: 1 }, context({ maxOutputBytes: 3 }))).toMatchObject({
      status: "failed",
      error: { code: "INVALID_OUTPUT" },
    });
    const wrong = defineTool(definition({ execute: () => ({ result: "private-invalid-output" }) as never }));
    const outcome = await invokeTool(wrong, { value: 1 }, context());
    expect(outcome).toMatchObject({ status: "failed", error: { code: "INVALID_OUTPUT" } });
    expect(JSON.stringify(outcome)).not.toContain("private-invalid-output");
  });

  it("passes guards and the tool a frozen input, and frozen contexts and scope", async () => {
    const seen: { where: string; input: boolean; context: boolean; scope: boolean }[] = [];
    const record = (where: string, value: unknown, toolContext: ToolContext) =>
      seen.push({
        where,
        input: Object.isFrozen(value),
        context: Object.isFrozen(toolContext),
        scope: Object.isFrozen(toolContext.scope),
      });
    const tool = defineTool({
      ...definition(),
      input: z.object({ value: z.number(), nested: z.object({ list: z.array(z.number()) }) }),
      guards: [
        {
          id: "freeze-check",
          check: (value, guardContext) => {
            record("guard", value, guardContext);
            record("guard nested", value.nested.list, guardContext);
            return true;
          },
        },
      ],
      execute: (value, toolContext) => {
        record("tool", value, toolContext);
        record("tool nested", value.nested, toolContext);
        return { result: value.value };
      },
    });
    const outcome = await invokeTool(tool, { value: 2, nested: { list: [1] } }, context());
    expect(outcome).toMatchObject({ status: "succeeded", output: { result: 2 } });
    expect(seen).toHaveLength(4);
    for (const entry of seen) expect(entry, entry.where).toMatchObject({ input: true, context: true, scope: true });
  });

  it("reports a tool with effects that throws as outcome_unknown, a pure or read one as TOOL_FAILED", async () => {
    const throwing = (effects: ToolEffect) =>
      defineTool(
        definition({
          effects,
          costMicros: 5,
          execute: () => {
            throw new Error("failed after remote commit: secret");
          },
        }),
      );
    for (const effects of ["write", "host"] as const) {
      const budget = new Budget(100, 20);
      const outcome = await invokeTool(
        throwing(effects),
        { value: 1 },
        context({ budget, permissions: { allow: ["tool:number.double", `effect:${effects}`] } }),
      );
      expect(outcome, effects).toMatchObject({ status: "outcome_unknown", error: { code: "OUTCOME_UNKNOWN" } });
      // Its cost stays held: nobody knows whether it was spent.
      expect(budget.unknownMicros, effects).toBe(5);
      expect(JSON.stringify(outcome)).not.toContain("secret");
    }
    for (const effects of ["none", "read"] as const) {
      const allow = effects === "none" ? ["tool:number.double"] : ["tool:number.double", "effect:read"];
      const outcome = await invokeTool(throwing(effects), { value: 1 }, context({ permissions: { allow } }));
      expect(outcome, effects).toMatchObject({ status: "failed", error: { code: "TOOL_FAILED" } });
      expect(JSON.stringify(outcome)).not.toContain("secret");
    }
  });

  it("refuses an already cancelled call before the tool runs, without the abort's reason", async () => {
    const controller = new AbortController();
    controller.abort("private-reason");
    let runs = 0;
    const tool = defineTool(
      definition({
        execute: () => {
          runs++;
          return { result: 1 };
        },
      }),
    );
    const outcome = await invokeTool(tool, { value: 1 }, context({ signal: controller.signal }));
    expect(outcome).toMatchObject({ status: "cancelled", error: { code: "CANCELLED" } });
    expect(runs).toBe(0);
    expect(JSON.stringify(outcome)).not.toContain("private-reason");
  });

  it("shares a budget across concurrent calls: one of two that each take all of it is refused", async () => {
    const budget = new Budget(5, 20);
    const tool = defineTool(definition({ costMicros: 5 }));
    const outcomes = await Promise.all([
      invokeTool(tool, { value: 1 }, context({ budget })),
      invokeTool(tool, { value: 2 }, context({ budget })),
    ]);
    expect(outcomes.map((outcome) => outcome.status).sort()).toEqual(["blocked", "succeeded"]);
    expect(budget.spentMicros).toBe(5);
    expect(budget.calls).toBe(1);
  });
});
