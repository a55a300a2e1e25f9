/**
 * Bounded JSON: copy, validate, canonical form and digest, with its limits (32 levels, 100,000 values, byte caps)
 * and refusals (__proto__ keys, non-plain values, cycles, getters); then a seeded fuzz of the boundary.
 */

import { describe, expect, it } from "vitest";
import {
  canonicalJson,
  copyJson,
  JsonBoundsError,
  jsonDigest,
  MAX_JSON_DEPTH,
  MAX_JSON_VALUES,
  parseJson,
} from "../dist/json/index.js";

const BIG = { maxBytes: 64 * 1024 * 1024 };

function nest(levels: number, leaf: unknown = 1, array = false): unknown {
  let value = leaf;
  for (let i = 0; i < levels; i++) value = array ? [value] : { v: value };
  return value;
}

function refusal(run: () => unknown): { code: string; rule: string } | undefined {
  try {
    run();
    return undefined;
  } catch (error) {
    if (!(error instanceof JsonBoundsError)) throw error;
    return { code: error.code, rule: error.rule };
  }
}

describe("bounded JSON", () => {
  it("copies plain JSON exactly, sharing nothing, and measures its UTF-8 bytes", () => {
    const value = { b: [1, -0, 2.5, "é😀", null, true], a: { "": "", constructor: "c", "\u0000": "\ud800" } };
    const copied = copyJson(value, BIG);
    expect(copied.value).toEqual(JSON.parse(JSON.stringify(value)));
    expect(copied.value).not.toBe(value);
    expect((copied.value as { b: unknown[] }).b).not.toBe(value.b);
    expect(copied.bytes).toBe(Buffer.byteLength(JSON.stringify(value)));
    expect(Object.is((copied.value as { b: number[] }).b[1], 0)).toBe(true);
    expect(Object.getPrototypeOf(copied.value)).toBe(Object.prototype);
    const frozen = copyJson(value, BIG, { freeze: true }).value as { a: object };
    expect(Object.isFrozen(frozen) && Object.isFrozen(frozen.a)).toBe(true);
    // undefined object properties are dropped, as JSON.stringify drops them.
    expect(copyJson({ a: undefined, b: 1 }, BIG).value).toEqual({ b: 1 });
    expect(copyJson(Object.assign(Object.create(null), { x: 1 }), BIG).value).toEqual({ x: 1 });
  });

  it("writes a canonical form (sorted keys) and a digest independent of key order", () => {
    expect(canonicalJson({ b: 1, a: [{ d: 1, c: 2 }], "": 0 })).toBe('{"":0,"a":[{"c":2,"d":1}],"b":1}');
    expect(jsonDigest({ x: 1, y: { b: 2, a: 1 } })).toBe(jsonDigest({ y: { a: 1, b: 2 }, x: 1 }));
    expect(jsonDigest({ x: 1 })).not.toBe(jsonDigest({ x: 2 }));
    expect(jsonDigest("a")).toMatch(/^sha256:[0-9a-f]{64}$/);
    // Known vector: sha256 of the text `{"a":1}`.
    expect(jsonDigest({ a: 1 })).toBe("sha256:015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862");
  });

  it(`allows ${MAX_JSON_DEPTH} levels of nesting and refuses ${MAX_JSON_DEPTH + 1}`, () => {
    expect(copyJson(nest(MAX_JSON_DEPTH), BIG).value).toEqual(nest(MAX_JSON_DEPTH));
    expect(refusal(() => copyJson(nest(MAX_JSON_DEPTH + 1), BIG))).toEqual({ code: "LIMIT_EXCEEDED", rule: "depth" });
    expect(refusal(() => copyJson(nest(MAX_JSON_DEPTH + 1, 1, true), BIG))?.rule).toBe("depth");
    expect(refusal(() => copyJson(nest(100_000), BIG))?.rule).toBe("depth");
    expect(refusal(() => parseJson(JSON.stringify(nest(MAX_JSON_DEPTH + 1)), BIG))?.rule).toBe("depth");
    // Deep text is refused before any parser recurses into it.
    expect(refusal(() => parseJson("[".repeat(1_000_000), BIG))?.rule).toBe("depth");
    const brackets = "[{".repeat(40);
    expect(parseJson(JSON.stringify([brackets]), BIG).value).toEqual([brackets]);
  });

  it(`allows ${MAX_JSON_VALUES} values and refuses one more`, () => {
    const atLimit = new Array(MAX_JSON_VALUES - 1).fill(0);
    expect(copyJson(atLimit, BIG).bytes).toBe(JSON.stringify(atLimit).length);
    expect(refusal(() => copyJson([...atLimit, 0], BIG))).toEqual({ code: "LIMIT_EXCEEDED", rule: "values" });
    expect(refusal(() => copyJson({ a: atLimit, b: 1 }, BIG))?.rule).toBe("values");
    const sparse: unknown[] = [];
    sparse.length = 2 ** 31;
    expect(refusal(() => copyJson(sparse, BIG))?.rule).toBe("values");
  });

  it("refuses values over the byte cap, counting UTF-8 bytes, without encoding huge strings", () => {
    expect(copyJson("aaaa", { maxBytes: 6 }).bytes).toBe(6);
    expect(refusal(() => copyJson("aaaaa", { maxBytes: 6 }))).toEqual({ code: "LIMIT_EXCEEDED", rule: "bytes" });
    expect(refusal(() => copyJson("éé", { maxBytes: 5 }))?.rule).toBe("bytes");
    expect(copyJson("éé", { maxBytes: 6 }).bytes).toBe(6);
    expect(refusal(() => copyJson({ ["k".repeat(10)]: 1 }, { maxBytes: 12 }))?.rule).toBe("bytes");
    expect(refusal(() => copyJson("x".repeat(50_000_000), { maxBytes: 1_000 }))?.rule).toBe("bytes");
    expect(refusal(() => parseJson(`"${"y".repeat(2_000)}"`, { maxBytes: 1_000 }))?.rule).toBe("bytes");
  });

  it("refuses what is not JSON with INVALID_JSON, never invoking getters or toJSON", () => {
    let touched = false;
    const getter = {
      get secret() {
        touched = true;
        return 1;
      },
    };
    class Point {
      x = 1;
    }
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    const proto = JSON.parse('{"__proto__": {"admin": true}}');
    const holey = [1, 2, 3];
    delete holey[1];
    const definedProto = Object.defineProperty({}, "__proto__", { value: 1, enumerable: true });
    const cases: [unknown, string][] = [
      [undefined, "type"],
      [() => 1, "type"],
      [Symbol("s"), "type"],
      [1n, "type"],
      [Number.NaN, "number"],
      [Number.POSITIVE_INFINITY, "number"],
      [new Date(0), "type"],
      [new Map(), "type"],
      [new Point(), "type"],
      [new Uint8Array(2), "type"],
      [[undefined], "type"],
      [holey, "hole"],
      [cyclic, "cycle"],
      [getter, "accessor"],
      [proto, "proto_key"],
      [definedProto, "proto_key"],
      [{ toJSON: () => 1 }, "type"],
      [
        new Proxy(
          {},
          {
            ownKeys() {
              throw new Error("trap");
            },
          },
        ),
        "unreadable",
      ],
    ];
    for (const [value, rule] of cases) {
      expect(
        refusal(() => copyJson(value, BIG)),
        String(rule),
      ).toEqual({ code: "INVALID_JSON", rule });
    }
    expect(touched).toBe(false);
    expect(({} as Record<string, unknown>).admin).toBeUndefined();
    expect(refusal(() => parseJson("{bad", BIG))).toEqual({ code: "INVALID_JSON", rule: "syntax" });
    expect(refusal(() => parseJson('{"__proto__": 1}', BIG))?.rule).toBe("proto_key");
    // A shared (not cyclic) object is fine.
    const shared = { n: 1 };
    expect(copyJson({ a: shared, b: shared }, BIG).value).toEqual({ a: { n: 1 }, b: { n: 1 } });
  });

  it("writes messages that name the rule and never the value", () => {
    const secret = "hunter2-secret";
    for (const run of [
      () => copyJson({ [secret]: 1n }, BIG),
      () => copyJson({ a: secret.repeat(100) }, { maxBytes: 50 }),
      () => parseJson(`{"${secret}": }`, BIG),
      () => copyJson(JSON.parse(`{"__proto__": "${secret}"}`), BIG),
    ]) {
      try {
        run();
        expect.unreachable();
      } catch (error) {
        expect((error as Error).message).not.toContain("hunter2");
      }
    }
  });
});

// ---- fuzz ----

/** mulberry32: a small seeded PRNG, so that every failure can be replayed from its seed. */
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

const ODD_KEYS = [
  "",
  "constructor",
  "prototype",
  "toString",
  "hasOwnProperty",
  "__defineGetter__",
  "\u0000",
  "\ud800",
  "😀",
  "0",
  "-1",
  "1e3",
  "__proto",
  "__proto__x",
  "a\nb",
  '"quoted"',
  "k".repeat(300),
];
const ODD_STRINGS = ["", "\u0000\u001f", "\ud800", "\udc00x", "😀", "é", "\\", '"', "</script>", "\u2028\u2029"];

interface Generated {
  value: unknown;
  /** The refusal the value must get, or undefined for valid JSON. */
  expected?: "INVALID_JSON" | "LIMIT_EXCEEDED";
}

function generate(random: () => number, maxBytes: number): Generated {
  const int = (n: number) => Math.floor(random() * n);
  const pick = <T>(items: readonly T[]): T => items[int(items.length)] as T;
  const scalar = (): unknown => {
    switch (int(8)) {
      case 0:
        return null;
      case 1:
        return random() < 0.5;
      case 2:
        return pick([0, -0, 1, -1, 2 ** 53 - 1, 1e308, 5e-324, 0.1, -123.456]);
      case 3:
        return random() * 1e6 - 5e5;
      case 4:
        return pick(ODD_STRINGS);
      case 5:
        return pick(ODD_STRINGS).repeat(int(50));
      default:
        return String.fromCharCode(...Array.from({ length: int(20) }, () => int(0x10000)));
    }
  };
  const build = (depth: number, maxDepth: number): unknown => {
    if (depth >= maxDepth || random() < 0.3) return scalar();
    if (random() < 0.5) return Array.from({ length: int(6) }, () => build(depth + 1, maxDepth));
    const object: Record<string, unknown> = {};
    for (let i = int(6); i > 0; i--)
      object[random() < 0.5 ? pick(ODD_KEYS) : `k${int(100)}`] = build(depth + 1, maxDepth);
    return object;
  };
  const base = build(0, 1 + int(10));
  const kind = int(4);
  if (kind === 0) return { value: base };
  // One fault at a random place: a container of the base, or the root.
  const containers: { container: Record<string, unknown> | unknown[]; depth: number }[] = [];
  const walk = (value: unknown, depth: number) => {
    if (value !== null && typeof value === "object") {
      containers.push({ container: value as Record<string, unknown>, depth });
      for (const item of Object.values(value)) walk(item, depth + 1);
    }
  };
  walk(base, 1);
  const place = (fault: unknown): unknown => {
    if (containers.length === 0) return fault;
    const { container } = pick(containers);
    if (Array.isArray(container)) container.push(fault);
    else container[`fault${int(1000)}`] = fault;
    return base;
  };
  if (kind === 1) {
    const cyclic: Record<string, unknown> = { n: 1 };
    cyclic.again = cyclic;
    const faults: (() => unknown)[] = [
      () => 1n,
      () => () => 1,
      () => Symbol("s"),
      () => Number.NaN,
      () => Number.NEGATIVE_INFINITY,
      () => new Date(),
      () => new Set([1]),
      () => [undefined],
      () => cyclic,
      () => JSON.parse('{"__proto__": {"polluted": 1}}'),
      () =>
        Object.defineProperty({}, "x", {
          enumerable: true,
          get() {
            throw new Error("getter ran");
          },
        }),
    ];
    return { value: place(pick(faults)()), expected: "INVALID_JSON" };
  }
  if (kind === 2) {
    // Too deep: enough levels below the deepest container to pass the limit wherever it lands.
    return { value: place(nest(MAX_JSON_DEPTH + 1, 0, random() < 0.5)), expected: "LIMIT_EXCEEDED" };
  }
  if (random() < 0.5) return { value: place("z".repeat(maxBytes + int(1000))), expected: "LIMIT_EXCEEDED" };
  return { value: place(new Array(MAX_JSON_VALUES + 1).fill(1)), expected: "LIMIT_EXCEEDED" };
}

describe("fuzz of the JSON boundary", () => {
  it("holds its limits on random nested values, huge strings and odd keys (seeded, time-bounded)", () => {
    const maxBytes = 256 * 1024;
    const deadline = Date.now() + 2_000;
    let checked = 0;
    for (let seed = 1; seed <= 3_000 && Date.now() < deadline; seed++) {
      const random = prng(seed);
      const { value, expected } = generate(random, maxBytes);
      let result: ReturnType<typeof copyJson> | undefined;
      let error: unknown;
      try {
        result = copyJson(value, { maxBytes });
      } catch (caught) {
        error = caught;
      }
      if (expected !== undefined) {
        expect(error, `seed ${seed}`).toBeInstanceOf(JsonBoundsError);
        expect((error as JsonBoundsError).code, `seed ${seed}`).toBe(expected);
        expect((error as Error).message).not.toContain("getter ran");
      } else if (error !== undefined) {
        // A valid base may still be too large for the cap; nothing else may refuse it.
        expect((error as JsonBoundsError).rule, `seed ${seed}`).toBe("bytes");
        expect(Buffer.byteLength(JSON.stringify(value))).toBeGreaterThan(maxBytes);
      } else if (result !== undefined) {
        const text = JSON.stringify(value);
        expect(result.bytes, `seed ${seed}`).toBe(Buffer.byteLength(text));
        expect(result.bytes).toBeLessThanOrEqual(maxBytes);
        expect(result.value, `seed ${seed}`).toEqual(JSON.parse(text));
        // The canonical text parses back to the same value, is its own canonical form, and digests stably.
        const reparsed = parseJson(result.canonical, { maxBytes });
        expect(reparsed.canonical).toBe(result.canonical);
        expect(parseJson(text, { maxBytes }).canonical).toBe(result.canonical);
        expect(jsonDigest(JSON.parse(text))).toBe(jsonDigest(value));
      }
      expect(({} as Record<string, unknown>).polluted).toBeUndefined();
      checked++;
    }
    expect(checked).toBeGreaterThan(200);
  });
});
