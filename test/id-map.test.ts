import { describe, expect, it } from "vitest";
import { IdMap } from "../src/platform/id-map.ts";

/** A small deterministic generator, so that a failure repeats. */
function random(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state / 2 ** 32;
  };
}

describe("IdMap", () => {
  it("agrees with a Map over a long run of sets, gets and deletes, through growing and shrinking", () => {
    for (const seed of [1, 2, 3]) {
      const next = random(seed);
      const table = new IdMap<string>();
      const model = new Map<number, string>();
      let nextId = 0;
      for (let step = 0; step < 12_000; step++) {
        // Phases: a burst that grows the table past 1,000 entries, then a drain that shrinks it, then churn.
        const phase = Math.floor(step / 3_000) % 4;
        const r = next();
        if ((phase === 0 && r < 0.8) || (phase !== 1 && r < 0.5)) {
          // Now and then an id already there: its value is replaced.
          const id = r < 0.05 ? Math.floor(next() * nextId) : nextId++;
          table.set(id, `v${id}-${step}`);
          model.set(id, `v${id}-${step}`);
        } else {
          // Recent ids mostly (those are there), now and then any id or one never set.
          const back = r < 0.9 ? 1 + Math.floor(next() * 2 * (model.size + 1)) : nextId + 1;
          const id = Math.max(0, nextId - back) + (r >= 0.97 ? 2 * nextId + 5 : 0);
          expect(table.delete(id)).toBe(model.delete(id));
        }
        const probe = Math.floor(next() * (nextId + 3));
        expect(table.get(probe)).toBe(model.get(probe));
        expect(table.has(probe)).toBe(model.has(probe));
        expect(table.size).toBe(model.size);
      }
      expect([...table]).toEqual([...model].sort((a, b) => a[0] - b[0]));
      expect([...table].map(([id]) => id)).toEqual([...model.keys()].sort((a, b) => a - b));
    }
  });

  it("finds every entry after removals in small tables, where probes wrap around the end", () => {
    const next = random(7);
    let wrong = 0;
    for (let trial = 0; trial < 20_000; trial++) {
      const table = new IdMap<number>();
      const model = new Map<number, number>();
      for (let k = 0; k < 4; k++) {
        const id = Math.floor(next() * 1000);
        table.set(id, k);
        model.set(id, k);
      }
      for (const id of [...model.keys()]) {
        if (next() < 0.5) continue;
        table.delete(id);
        model.delete(id);
        for (const [other, value] of model) if (table.get(other) !== value) wrong++;
      }
    }
    expect(wrong).toBe(0);
  });

  it("holds ids that share low bits, and large ones", () => {
    const table = new IdMap<number>();
    const ids = [0, 8, 16, 1024, 2 ** 31, 2 ** 32, 2 ** 32 + 8, Number.MAX_SAFE_INTEGER];
    for (const id of ids) table.set(id, id + 1);
    for (const id of ids) expect(table.get(id)).toBe(id + 1);
    expect(table.delete(2 ** 32)).toBe(true);
    expect(table.get(2 ** 32)).toBeUndefined();
    expect(table.get(2 ** 32 + 8)).toBe(2 ** 32 + 9);
    expect([...table].map(([id]) => id)).toEqual(ids.filter((id) => id !== 2 ** 32));
  });

  it("skips an entry deleted while iterating and does not visit one added meanwhile", () => {
    const table = new IdMap<string>();
    for (let id = 1; id <= 5; id++) table.set(id, `v${id}`);
    const seen: number[] = [];
    for (const [id] of table) {
      seen.push(id);
      if (id === 2) table.delete(4);
      if (id === 3) table.set(9, "v9");
    }
    expect(seen).toEqual([1, 2, 3, 5]);
    expect([...table.values()]).toEqual(["v1", "v2", "v3", "v5", "v9"]);
  });

  it("refuses an id that is not a non-negative safe integer", () => {
    const table = new IdMap<number>();
    for (const bad of [-1, 1.5, Number.NaN, 2 ** 53]) {
      expect(() => table.set(bad, 1)).toThrow(/IdMap: an id must be a non-negative integer, got/);
    }
  });
});
