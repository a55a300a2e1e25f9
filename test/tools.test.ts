/**
 * Typed tools and the broker: defineTool, invokeTool (every code and status it can return), Budget, per-caller
 * registries and the onCall hook.
 */
import {
  AirlockError,
  Budget,
  createToolRegistry,
  defineTool,
  ERROR_CODES,
  type InvokeToolOptions,
  invokeTool,
  type Outcome,
  type ToolCallInfo,
  type ToolContext,
  z,
} from "airlock-codemode";
import { describe, expect, it } from "vitest";

const SCOPE = { principalId: "user-1", tenantId: "t-1" };

/** A tool carries no handler, so tools derived from this one are made from its definition. */
const priceDefinition = {
  id: "catalog.price",
  version: "1",
  description: "Price of one product in cents.",
  input: z.object({ sku: z.string().max(16) }),
  output: z.object({ cents: z.number().int() }),
  effects: "read" as const,
  capabilities: ["catalog:read"],
  costMicros: 100,
  execute: async ({ sku }: { sku: string }) => ({ cents: sku.length * 100 }),
};
const price = defineTool(priceDefinition);

const options = (extra: Partial<InvokeToolOptions> = {}): InvokeToolOptions => ({
  runId: "run-1",
  callId: "call-1",
  scope: SCOPE,
  permissions: { allow: ["tool:catalog.price", "effect:read", "catalog:read"] },
  budget: new Budget(1_000_000, 100),
  ...extra,
});

/** Every message an outcome carries, collected so a test can check none leaks tool data. */
const messages: string[] = [];
async function call(tool: Parameters<typeof invokeTool>[0], input: unknown, extra: Partial<InvokeToolOptions> = {}) {
  const outcome = (await invokeTool(tool, input, options(extra))) as Outcome<unknown>;
  if (outcome.status !== "succeeded") messages.push(outcome.error.message);
  return outcome;
}
const codeOf = (outcome: Outcome<unknown>) => (outcome.status === "succeeded" ? "OK" : outcome.error.code);

describe("defineTool", () => {
  it("returns a frozen tool with a digest over its definition", () => {
    expect(Object.isFrozen(price)).toBe(true);
    expect(Object.isFrozen(price.capabilities)).toBe(true);
    expect(price.digest).toMatch(/^sha256:[0-9a-f]{64}$/);
    const same = defineTool({ ...priceDefinition, execute: async () => ({ cents: 0 }) });
    expect(same.digest).toBe(price.digest);
    expect(defineTool({ ...priceDefinition, version: "2" }).digest).not.toBe(price.digest);
    expect(defineTool({ ...priceDefinition, input: z.object({ sku: z.string() }) }).digest).not.toBe(price.digest);
    expect(defineTool({ ...priceDefinition, costMicros: 101 }).digest).not.toBe(price.digest);
  });

  it("refuses a bad definition with INVALID_CONFIG", () => {
    const bad: Record<string, unknown>[] = [
      { id: "" },
      { id: "has space" },
      { version: 1 },
      { effects: "delete" },
      { costMicros: -1 },
      { costMicros: 0.5 },
      { capabilities: "x" },
      { capabilities: ["a", "a"] },
      { input: { parse: () => 1 } },
      { execute: "nope" },
      { guards: [{ id: "g" }] },
      { timeoutMillis: 0 },
    ];
    for (const patch of bad) {
      try {
        defineTool({ ...priceDefinition, ...patch } as unknown as Parameters<typeof defineTool>[0]);
        expect.unreachable(JSON.stringify(patch));
      } catch (error) {
        expect(error).toBeInstanceOf(AirlockError);
        expect((error as AirlockError).code).toBe("INVALID_CONFIG");
      }
    }
  });

  it("refuses a misspelt field, naming it, instead of leaving the tool unguarded", () => {
    // `permision` would otherwise leave the tool callable without the permission it was meant to require.
    const misspelt = { ...priceDefinition, permision: ["hr:read"] } as unknown as Parameters<typeof defineTool>[0];
    expect(() => defineTool(misspelt)).toThrow(/a tool definition has no field "permision" \(it takes id, /);
    expect(() =>
      defineTool({ ...priceDefinition, timeoutMs: 5 } as unknown as Parameters<typeof defineTool>[0]),
    ).toThrow(AirlockError);
    // A tool's own fields are accepted, so that a tool derives from another by spreading it.
    expect(defineTool({ ...priceDefinition, id: "catalog.price2" }).id).toBe("catalog.price2");
  });
});

describe("invokeTool", () => {
  it("runs the tool with the trusted scope and returns its validated output", async () => {
    expect(await call(price, { sku: "abc" })).toEqual({ status: "succeeded", output: { cents: 300 } });
  });

  it("refuses tools and options Airlock did not make or cannot read (INVALID_CONFIG)", async () => {
    expect(codeOf(await call({ ...price } as typeof price, { sku: "a" }))).toBe("INVALID_CONFIG");
    expect(codeOf(await call(price, { sku: "a" }, { scope: { tenantId: "x" } as unknown as typeof SCOPE }))).toBe(
      "INVALID_CONFIG",
    );
    expect(codeOf(await call(price, { sku: "a" }, { budget: { reserve: () => ({}) } as unknown as Budget }))).toBe(
      "INVALID_CONFIG",
    );
    expect(
      codeOf(await call(price, { sku: "a" }, { permissions: { allow: "tool:catalog.price" as unknown as [] } })),
    ).toBe("INVALID_CONFIG");
    expect(codeOf(await call(price, { sku: "a" }, { runId: "" }))).toBe("INVALID_CONFIG");
    const misspelt = await call(price, { sku: "a" }, { maxOutputByte: 10 } as Partial<InvokeToolOptions>);
    expect(misspelt).toMatchObject({
      status: "failed",
      error: { code: "INVALID_CONFIG", message: expect.stringMatching(/^invokeTool has no option "maxOutputByte"/) },
    });
  });

  it("checks permissions as exact strings: tool, effect and every capability; no wildcards", async () => {
    const cases: [string[], string][] = [
      [["tool:catalog.price", "effect:read", "catalog:read"], "OK"],
      [["effect:read", "catalog:read"], "PERMISSION_DENIED"],
      [["tool:catalog.price", "catalog:read"], "PERMISSION_DENIED"],
      [["tool:catalog.price", "effect:read"], "PERMISSION_DENIED"],
      [["tool:*", "effect:*", "*"], "PERMISSION_DENIED"],
      [["tool:catalog.*", "effect:read", "catalog:*"], "PERMISSION_DENIED"],
      [["TOOL:catalog.price", "effect:read", "catalog:read"], "PERMISSION_DENIED"],
    ];
    for (const [allow, code] of cases) {
      const outcome = await call(price, { sku: "a" }, { permissions: { allow } });
      expect(codeOf(outcome), allow.join(",")).toBe(code);
      if (code !== "OK") expect(outcome.status).toBe("blocked");
    }
  });

  it("refuses input that is not JSON within maxInputBytes or does not match the schema (INVALID_INPUT)", async () => {
    let runs = 0;
    const counted = defineTool({
      ...priceDefinition,
      execute: async ({ sku }) => {
        runs++;
        return { cents: sku.length };
      },
    });
    expect(codeOf(await call(counted, { sku: 1 }))).toBe("INVALID_INPUT");
    expect(codeOf(await call(counted, { sku: "x".repeat(17) }))).toBe("INVALID_INPUT");
    expect(codeOf(await call(counted, { sku: 1n }))).toBe("INVALID_INPUT");
    expect(codeOf(await call(counted, JSON.parse('{"sku":"a","__proto__":{"admin":true}}')))).toBe("INVALID_INPUT");
    expect(codeOf(await call(counted, { sku: "a", when: new Date() }))).toBe("INVALID_INPUT");
    expect(codeOf(await call(counted, undefined))).toBe("INVALID_INPUT");
    const big = await call(counted, { sku: "a", pad: "p".repeat(200) }, { maxInputBytes: 100 });
    expect(big).toMatchObject({ status: "failed", error: { code: "INVALID_INPUT" } });
    if (big.status !== "succeeded") expect(big.error.message).toContain("maxInputBytes 100");
    expect(runs).toBe(0);
    expect(({} as Record<string, unknown>).admin).toBeUndefined();
  });

  it("runs guards: GUARD_BLOCKED when one refuses, GUARD_UNAVAILABLE when one fails", async () => {
    const guarded = (check: (input: { sku: string }) => unknown) =>
      defineTool({
        ...priceDefinition,
        guards: [{ id: "no-secret-skus", check: check as (input: { sku: string }) => boolean }],
      });
    expect(
      codeOf(
        await call(
          guarded(({ sku }) => !sku.startsWith("secret")),
          { sku: "ok" },
        ),
      ),
    ).toBe("OK");
    const blocked = await call(
      guarded(({ sku }) => !sku.startsWith("secret")),
      { sku: "secret-1" },
    );
    expect(blocked).toMatchObject({ status: "blocked", error: { code: "GUARD_BLOCKED" } });
    expect(
      codeOf(
        await call(
          guarded(() => ({ allow: false })),
          { sku: "a" },
        ),
      ),
    ).toBe("GUARD_BLOCKED");
    const failing = await call(
      guarded(() => {
        throw new Error("guard backend down: token=abc");
      }),
      { sku: "a" },
    );
    expect(failing).toMatchObject({ status: "blocked", error: { code: "GUARD_UNAVAILABLE" } });
    expect(
      codeOf(
        await call(
          guarded(async () => "maybe"),
          { sku: "a" },
        ),
      ),
    ).toBe("GUARD_UNAVAILABLE");
  });

  it("reserves cost and calls on the budget (BUDGET_EXCEEDED) and settles them", async () => {
    const budget = new Budget(250, 10);
    expect(codeOf(await call(price, { sku: "a" }, { budget }))).toBe("OK");
    expect(codeOf(await call(price, { sku: "a" }, { budget }))).toBe("OK");
    const over = await call(price, { sku: "a" }, { budget });
    expect(over).toMatchObject({ status: "blocked", error: { code: "BUDGET_EXCEEDED" } });
    expect(budget.spentMicros).toBe(200);
    expect(budget.calls).toBe(2);
    const calls = new Budget(1_000, 1);
    expect(codeOf(await call(price, { sku: "a" }, { budget: calls }))).toBe("OK");
    expect(codeOf(await call(price, { sku: "a" }, { budget: calls }))).toBe("BUDGET_EXCEEDED");
    // Zero means zero.
    expect(codeOf(await call(price, { sku: "a" }, { budget: new Budget(1_000, 0) }))).toBe("BUDGET_EXCEEDED");
    expect(codeOf(await call(price, { sku: "a" }, { budget: new Budget(0, 10) }))).toBe("BUDGET_EXCEEDED");
    expect(() => new Budget(-1, 1)).toThrow(AirlockError);
    expect(() => new Budget(1, Number.NaN)).toThrow(AirlockError);
    // A refused call (never run) gives its reservation back.
    const released = new Budget(1_000, 5);
    await call(price, { sku: 5 }, { budget: released });
    expect(released.calls).toBe(0);
    expect(released.reservedMicros).toBe(0);
  });

  it("reports a throwing tool as TOOL_FAILED without its message, and bad output as INVALID_OUTPUT", async () => {
    const throwing = defineTool({
      ...priceDefinition,
      execute: () => {
        throw new Error("connection string postgres://admin:hunter2@db");
      },
    });
    expect(await call(throwing, { sku: "a" })).toEqual({
      status: "failed",
      error: { code: "TOOL_FAILED", message: "the tool failed" },
    });
    const wrongShape = defineTool({
      ...priceDefinition,
      execute: () => ({ cents: "many" }) as unknown as { cents: number },
    });
    expect(codeOf(await call(wrongShape, { sku: "a" }))).toBe("INVALID_OUTPUT");
    const getter = defineTool({
      ...priceDefinition,
      execute: () =>
        ({
          get cents(): number {
            throw new Error("token=abc");
          },
        }) as { cents: number },
    });
    expect(codeOf(await call(getter, { sku: "a" }))).toBe("INVALID_OUTPUT");
    const deep = defineTool({
      ...priceDefinition,
      output: z.unknown(),
      execute: () => {
        let value: unknown = 1;
        for (let i = 0; i < 40; i++) value = { value };
        return value;
      },
    });
    expect(codeOf(await call(deep, { sku: "a" }))).toBe("INVALID_OUTPUT");
    const big = defineTool({ ...priceDefinition, output: z.unknown(), execute: () => "b".repeat(1_000) });
    const tooBig = await call(big, { sku: "a" }, { maxOutputBytes: 500 });
    expect(tooBig).toMatchObject({ status: "failed", error: { code: "INVALID_OUTPUT" } });
    if (tooBig.status !== "succeeded") expect(tooBig.error.message).toContain("maxOutputBytes 500");
  });

  it("stops a read tool at its timeout (TIMEOUT) and on the signal (CANCELLED)", async () => {
    const hangingDefinition = {
      ...priceDefinition,
      timeoutMillis: 50,
      execute: (_input: { sku: string }, { signal }: ToolContext) =>
        new Promise<{ cents: number }>((_resolve, reject) =>
          signal.addEventListener("abort", () => reject(signal.reason)),
        ),
    };
    const hanging = defineTool(hangingDefinition);
    const budget = new Budget(1_000, 10);
    expect(await call(hanging, { sku: "a" }, { budget })).toMatchObject({
      status: "failed",
      error: { code: "TIMEOUT" },
    });
    expect(budget.spentMicros).toBe(100);
    const slow = defineTool({ ...hangingDefinition, timeoutMillis: 10_000 });
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 30);
    expect(await call(slow, { sku: "a" }, { signal: controller.signal })).toMatchObject({
      status: "cancelled",
      error: { code: "CANCELLED" },
    });
    const before = new AbortController();
    before.abort();
    expect(codeOf(await call(price, { sku: "a" }, { signal: before.signal }))).toBe("CANCELLED");
  });

  it("reports a write tool stopped before it answered as OUTCOME_UNKNOWN, and keeps its cost as unknown", async () => {
    const write = defineTool({
      ...priceDefinition,
      id: "orders.place",
      effects: "write",
      capabilities: [],
      timeoutMillis: 50,
      execute: () => new Promise<{ cents: number }>(() => {}),
    });
    const budget = new Budget(1_000, 10);
    const outcome = await call(
      write,
      { sku: "a" },
      { budget, permissions: { allow: ["tool:orders.place", "effect:write"] } },
    );
    expect(outcome).toMatchObject({ status: "outcome_unknown", error: { code: "OUTCOME_UNKNOWN" } });
    expect(budget.unknownMicros).toBe(100);
    expect(budget.spentMicros).toBe(0);
    expect(budget.remainingMicros).toBe(900);
    // A write tool that still answers successfully after its signal aborted has a known outcome.
    const late = defineTool({
      ...write,
      execute: (_input, { signal }) =>
        new Promise<{ cents: number }>((resolve) => signal.addEventListener("abort", () => resolve({ cents: 1 }))),
    });
    expect(
      codeOf(await call(late, { sku: "a" }, { permissions: { allow: ["tool:orders.place", "effect:write"] } })),
    ).toBe("OK");
  });

  it("lets the onCall hook see every call and refuse it", async () => {
    const seen: ToolCallInfo[] = [];
    let count = 0;
    const onCall = (info: ToolCallInfo) => {
      seen.push(info);
      count++;
      if (count === 2) return { allow: false, code: "LIMIT_EXCEEDED" as const };
      if (count === 3) return false;
      if (count === 4) throw new Error("audit log unavailable");
      return undefined;
    };
    expect(codeOf(await call(price, { sku: "a" }, { onCall }))).toBe("OK");
    expect(await call(price, { sku: "a" }, { onCall })).toMatchObject({
      status: "failed",
      error: { code: "LIMIT_EXCEEDED" },
    });
    expect(codeOf(await call(price, { sku: "a" }, { onCall }))).toBe("PERMISSION_DENIED");
    expect(codeOf(await call(price, { sku: "a" }, { onCall }))).toBe("GUARD_UNAVAILABLE");
    expect(codeOf(await call(price, { sku: "a" }, { onCall, permissions: { allow: [] } }))).toBe("PERMISSION_DENIED");
    expect(seen).toHaveLength(5);
    expect(seen[0]).toMatchObject({ runId: "run-1", callId: "call-1", toolId: "catalog.price", scope: SCOPE });
    expect(Object.isFrozen(seen[0]?.input)).toBe(true);
  });

  it("writes every message itself: no tool data, no input", () => {
    expect(messages.length).toBeGreaterThan(10);
    for (const message of messages) {
      expect(message).not.toMatch(/hunter2|token=|secret-1|audit log|backend down|many/);
    }
  });
});

describe("per-caller registries", () => {
  const reportDefinition = { ...priceDefinition, id: "reports.read", capabilities: [], roles: ["analyst", "admin"] };
  const report = defineTool(reportDefinition);
  const payroll = defineTool({
    ...priceDefinition,
    id: "payroll.read",
    capabilities: [],
    roles: ["admin"],
    permissions: ["pii:read"],
  });
  const seen: ToolCallInfo[] = [];
  const registry = createToolRegistry([price, report, payroll], {
    onCall: (info) => {
      seen.push(info);
    },
  });

  it("builds per request the set a caller may use, from roles, permissions and required permissions", () => {
    const analyst = registry.for({
      roles: ["analyst"],
      permissions: ["tool:reports.read", "effect:read", "tool:payroll.read", "pii:read"],
    });
    expect(analyst.tools.map((t) => t.id)).toEqual(["reports.read"]);
    const admin = registry.for({
      roles: ["admin"],
      permissions: ["tool:reports.read", "tool:payroll.read", "effect:read", "pii:read", "tool:catalog.price"],
    });
    // catalog.price needs its capability catalog:read, which the admin lacks.
    expect(admin.tools.map((t) => t.id)).toEqual(["reports.read", "payroll.read"]);
    const anyone = registry.for({ roles: [], permissions: ["tool:catalog.price", "effect:read", "catalog:read"] });
    expect(anyone.tools.map((t) => t.id)).toEqual(["catalog.price"]);
    expect(anyone.has(price)).toBe(true);
    expect(anyone.has(defineTool(priceDefinition))).toBe(false);
    expect(() => createToolRegistry([price, price])).toThrow(AirlockError);
    expect(() => createToolRegistry([{ ...price }])).toThrow(AirlockError);
    expect(() => registry.for({ roles: "admin" } as unknown as { roles: string[]; permissions: string[] })).toThrow(
      AirlockError,
    );
  });

  it("invokes only tools of the caller's set: NOT_FOUND for unknown ids, PERMISSION_DENIED outside the set", async () => {
    const analyst = registry.for({ roles: ["analyst"], permissions: ["tool:reports.read", "effect:read"] });
    const base = { runId: "r", callId: "c", scope: SCOPE, budget: new Budget(10_000, 10) };
    expect(codeOf(await analyst.invoke("reports.read", { sku: "abc" }, base))).toBe("OK");
    expect(await analyst.invoke("admin.secret", {}, base)).toMatchObject({
      status: "failed",
      error: { code: "NOT_FOUND" },
    });
    expect(codeOf(await analyst.invoke(payroll, { sku: "a" }, base))).toBe("PERMISSION_DENIED");
    expect(codeOf(await analyst.invoke(defineTool(reportDefinition), { sku: "a" }, base))).toBe("NOT_FOUND");
    expect(seen.map((s) => s.toolId)).toEqual(["reports.read"]);
  });
});

describe("codes", () => {
  it("lists every public code that docs/governed-programs.md (Errors) names", () => {
    expect([...ERROR_CODES].sort()).toEqual(
      [
        "PERMISSION_DENIED",
        "BUDGET_EXCEEDED",
        "GUARD_BLOCKED",
        "GUARD_UNAVAILABLE",
        "CANCELLED",
        "OUTCOME_UNKNOWN",
        "INVALID_CONFIG",
        "INVALID_INPUT",
        "INVALID_OUTPUT",
        "INVALID_JSON",
        "LIMIT_EXCEEDED",
        "TIMEOUT",
        "TOOL_FAILED",
        "UNSUPPORTED_PROFILE",
        "NOT_FOUND",
        "CONFLICT",
        "STORAGE_UNAVAILABLE",
        "INTEGRITY_VIOLATION",
      ].sort(),
    );
  });
});
