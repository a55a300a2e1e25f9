/** The runner's cache of values derived for repeated keys (configured images, script bytecode). */
import { describe, expect, it } from "vitest";
import { RepeatCache } from "../dist/engine/repeat-cache.js";

describe("RepeatCache", () => {
  it("asks for a value on a key's second use only, and forgets first uses past its count", () => {
    const cache = new RepeatCache<string>({ entries: 4, counted: 2 });
    expect(cache.repeats("a")).toBe(false);
    expect(cache.repeats("a")).toBe(true);
    expect(cache.repeats("b")).toBe(false);
    expect(cache.repeats("c")).toBe(false);
    // Two keys counted already: counting a third started over, so "b" counts as new again.
    expect(cache.repeats("d")).toBe(false);
    expect(cache.repeats("b")).toBe(false);
  });

  it("keeps the most recently used values within its entry and size limits", () => {
    const cache = new RepeatCache<string>({ entries: 2, counted: 8, maxSize: 10, sizeOf: (v) => v.length });
    cache.set("a", "1234");
    cache.set("b", "1234");
    expect(cache.get("a")).toBe("1234");
    cache.set("c", "12");
    // Three entries: the least recently used one ("b") went.
    expect([cache.get("a"), cache.get("b"), cache.get("c")]).toEqual(["1234", undefined, "12"]);
    cache.set("d", "123456789");
    // Past the size limit: the oldest went until the rest fits.
    expect([cache.get("a"), cache.get("c"), cache.get("d")]).toEqual([undefined, undefined, "123456789"]);
    cache.set("e", "12345678901");
    expect(cache.get("e")).toBeUndefined();
    expect(cache.get("d")).toBe("123456789");
  });
});
