/**
 * A seeded, time-bounded fuzz of the sandbox boundary: random values from the host (program inputs) and from the
 * program itself (tool inputs and return values built inside QuickJS: deep nesting, huge strings, odd and __proto__
 * keys, BigInts, cycles, functions). The limits must hold on every value the host accepts, every outcome must be a
 * defined one, and the host must survive.
 */
import { Budget, defineTool, invokeTool, type JsonValue, z } from "airlock-codemode";
import { createQuickJsSandboxAdapter } from "airlock-codemode/adapter-code-quickjs";
import { type CodeProgramLimits, createCodeMode, defineCodeProgram } from "airlock-codemode/code-mode";
import { afterAll, describe, expect, it } from "vitest";
import { copyJson, MAX_JSON_DEPTH, MAX_JSON_VALUES } from "../dist/json/index.js";

const LIMITS: CodeProgramLimits = {
  cpuMillis: 2_000,
  wallTimeMillis: 10_000,
  memoryBytes: 64 * 1024 * 1024,
  scratchBytes: 0,
  maxInputBytes: 256 * 1024,
  maxOutputBytes: 256 * 1024,
  maxToolInputBytes: 64 * 1024,
  maxToolCalls: 20,
  maxToolConcurrency: 2,
};

const received: unknown[] = [];
const sink = defineTool({
  id: "sink",
  version: "1",
  description: "Takes any value and gives it back.",
  input: z.object({ value: z.unknown() }),
  output: z.object({ value: z.unknown() }),
  effects: "read",
  capabilities: [],
  costMicros: 0,
  execute: ({ value }) => {
    received.push(value);
    return { value };
  },
});

const adapter = createQuickJsSandboxAdapter({ poolSize: 2 });
let brokered = 0;
const mode = createCodeMode({
  adapter,
  invokeTool: (tool, input, context) => {
    brokered++;
    return invokeTool(tool, input, {
      runId: context.runId,
      callId: context.callId,
      scope: context.scope,
      signal: context.signal,
      permissions: { allow: ["tool:sink", "effect:read"] },
      budget: new Budget(0, 100),
    });
  },
});
afterAll(() => adapter.close());

let sequence = 0;
const run = () => ({
  runId: "fuzz",
  executionId: `fuzz-${++sequence}`,
  scope: { principalId: "fuzzer" },
  signal: new AbortController().signal,
});

function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Depth, value count and __proto__ keys of a value the host accepted, checked independently of Airlock. */
function measure(value: unknown, depth = 0): { depth: number; values: number; protoKeys: number } {
  if (value === null || typeof value !== "object") return { depth, values: 1, protoKeys: 0 };
  const proto = Object.getPrototypeOf(value);
  expect(proto === Object.prototype || proto === Array.prototype || proto === null).toBe(true);
  let result = { depth: depth + 1, values: 1, protoKeys: Object.hasOwn(value, "__proto__") ? 1 : 0 };
  for (const item of Object.values(value)) {
    const inner = measure(item, depth + 1);
    result = {
      depth: Math.max(result.depth, inner.depth),
      values: result.values + inner.values,
      protoKeys: result.protoKeys + inner.protoKeys,
    };
  }
  return result;
}

function assertBounded(value: unknown, maxBytes: number): void {
  const { depth, values, protoKeys } = measure(value);
  expect(depth).toBeLessThanOrEqual(MAX_JSON_DEPTH);
  expect(values).toBeLessThanOrEqual(MAX_JSON_VALUES);
  expect(protoKeys).toBe(0);
  expect(Buffer.byteLength(JSON.stringify(value))).toBeLessThanOrEqual(maxBytes);
}

const echoProgram = defineCodeProgram({
  id: "fuzz.echo",
  version: "1",
  intent: "Passes its input through a tool and returns it.",
  language: "javascript",
  source: `async (input, tools) => {
    const r = await tools.call("sink", { value: input });
    return r.status === "succeeded" ? { value: r.output.value } : { code: r.error.code };
  }`,
  input: z.unknown(),
  output: z.unknown(),
  inputSchemaId: "any.v1",
  outputSchemaId: "any.v1",
  tools: [sink],
  limits: LIMITS,
});

/** Builds random values inside the VM from a seed and throws them at the boundary. */
const hostileProgram = defineCodeProgram({
  id: "fuzz.hostile",
  version: "1",
  intent: "Builds random values and passes them to a tool and back.",
  language: "javascript",
  source: `async (input, tools) => {
    let a = input.seed >>> 0;
    const random = () => { a = (a + 0x6d2b79f5) >>> 0; let t = a; t = Math.imul(t ^ (t >>> 15), t | 1);
      t ^= t + Math.imul(t ^ (t >>> 7), t | 61); return ((t ^ (t >>> 14)) >>> 0) / 4294967296; };
    const int = (n) => Math.floor(random() * n);
    const pick = (xs) => xs[int(xs.length)];
    const KEYS = ["", "constructor", "prototype", "__proto__", "toString", "\\u0000", "\\ud800", "😀", "0", "k".repeat(200)];
    const scalar = () => {
      switch (int(16)) {
        case 0: return 1n;
        case 1: return undefined;
        case 2: return () => 1;
        case 3: return Symbol("s");
        case 4: return NaN;
        case 5: return new Date(0);
        case 6: return int(50) === 0 ? "x".repeat(1 + int(1000000)) : "x".repeat(int(100));
        case 7: return "\\ud800\\udfff\\u0000";
        case 8: return -0;
        case 9: return 1e308;
        case 10: return null;
        default: return random();
      }
    };
    let nodes = 0;
    const build = (depth, max) => {
      if (depth >= max || random() < 0.2 || ++nodes > 2000) return scalar();
      const r = random();
      if (r < 0.35) return Array.from({ length: int(5) }, () => build(depth + 1, max));
      if (r < 0.38) { const o = { n: 1 }; o.self = o; return o; }
      if (r < 0.41) return JSON.parse('{"__proto__": {"polluted": true}, "a": 1}');
      if (r < 0.43) return new Array(int(3) === 0 ? 100001 : int(1000)).fill(0);
      const o = {};
      for (let i = int(5); i > 0; i--) {
        Object.defineProperty(o, pick(KEYS), { value: build(depth + 1, max), enumerable: true, configurable: true, writable: true });
      }
      return o;
    };
    const seen = [];
    for (let i = 0; i < 3; i++) {
      try {
        nodes = 0;
        const r = await tools.call("sink", { value: build(0, 1 + int(40)) });
        seen.push(r.status === "succeeded" ? "ok" : r.error.code);
      } catch (e) {
        seen.push("threw");
      }
    }
    nodes = 0;
    return random() < 0.5 ? build(0, 1 + int(40)) : seen;
  }`,
  input: z.object({ seed: z.number() }),
  output: z.unknown(),
  inputSchemaId: "seed.v1",
  outputSchemaId: "any.v1",
  tools: [sink],
  limits: LIMITS,
});

function hostValue(random: () => number): { value: unknown; fault?: string } {
  const int = (n: number) => Math.floor(random() * n);
  const keys = ["", "constructor", "prototype", "toString", "\u0000", "\ud800", "😀", "0", "k".repeat(100)];
  const scalar = (): unknown => [null, true, 0, -0, 1e308, 0.5, "", "\ud800", "é😀", "s".repeat(int(200))][int(10)];
  const build = (depth: number, max: number): unknown => {
    if (depth >= max || random() < 0.3) return scalar();
    if (random() < 0.5) return Array.from({ length: int(5) }, () => build(depth + 1, max));
    const o: Record<string, unknown> = {};
    for (let i = int(5); i > 0; i--) o[keys[int(keys.length)] as string] = build(depth + 1, max);
    return o;
  };
  const value = build(0, 1 + int(20));
  switch (int(6)) {
    case 0:
      return { value: { value, bad: 1n }, fault: "INVALID_INPUT" };
    case 1:
      return { value: { value, bad: JSON.parse('{"__proto__": 1}') }, fault: "INVALID_INPUT" };
    case 2: {
      let deep: unknown = value;
      for (let i = 0; i < MAX_JSON_DEPTH + 1; i++) deep = [deep];
      return { value: deep, fault: "INVALID_INPUT" };
    }
    case 3:
      return { value: { value, pad: "p".repeat(LIMITS.maxInputBytes) }, fault: "INVALID_INPUT" };
    default:
      return { value };
  }
}

describe("fuzz of the sandbox boundary", () => {
  it("host-made inputs: refused ones never reach the sandbox, accepted ones make an exact JSON round trip", async () => {
    // A fixed set of seeds (not as many as fit in some time), so that every run checks the same cases.
    let checked = 0;
    for (let seed = 1; seed <= 80; seed++) {
      const { value, fault } = hostValue(prng(seed));
      const before = brokered;
      const outcome = await mode.execute(echoProgram, value, run());
      if (fault !== undefined) {
        expect(outcome.status, `seed ${seed}`).toBe("failed");
        if (outcome.status !== "succeeded") expect(outcome.error.code, `seed ${seed}`).toBe(fault);
        expect(brokered).toBe(before);
      } else {
        const json = JSON.parse(JSON.stringify(value)) as JsonValue;
        const bytes = Buffer.byteLength(JSON.stringify({ value: json }));
        const expected = bytes <= LIMITS.maxToolInputBytes ? { value: json } : { code: "INVALID_INPUT" };
        expect(outcome, `seed ${seed}`).toMatchObject({ status: "succeeded", output: expected });
      }
      checked++;
    }
    expect(checked).toBe(80);
  });

  it("program-made values: every value the host accepts is within limits, every outcome is defined", async () => {
    const codes = new Set<string>();
    let checked = 0;
    for (let seed = 1; seed <= 40; seed++) {
      received.length = 0;
      const outcome = await mode.execute(hostileProgram, { seed }, run());
      for (const value of received) assertBounded({ value }, LIMITS.maxToolInputBytes);
      const code = outcome.status === "succeeded" ? "OK" : outcome.error.code;
      codes.add(code);
      expect(["OK", "INVALID_OUTPUT", "LIMIT_EXCEEDED", "TOOL_FAILED"], `seed ${seed}`).toContain(code);
      if (outcome.status === "succeeded") {
        assertBounded(outcome.output, LIMITS.maxOutputBytes);
        expect(copyJson(outcome.output, { maxBytes: LIMITS.maxOutputBytes }).value).toEqual(outcome.output);
      } else {
        expect(outcome.error.message).not.toMatch(/polluted|xxxxxxxx/);
      }
      expect(({} as Record<string, unknown>).polluted).toBeUndefined();
      checked++;
    }
    expect(checked).toBe(40);
    expect(codes.has("OK")).toBe(true);
    expect(codes.has("INVALID_OUTPUT") || codes.has("LIMIT_EXCEEDED")).toBe(true);
    // The host survived: a plain execution still works.
    expect(await mode.execute(echoProgram, { a: [1, "b"] }, run())).toMatchObject({
      status: "succeeded",
      output: { value: { a: [1, "b"] } },
    });
  }, 30_000);
});
