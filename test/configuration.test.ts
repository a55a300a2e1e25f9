/** Run configurations: what a run's script environment offers, keyed by a digest so VM sides can cache by it. */
import { describe, expect, it } from "vitest";
import { runConfiguration } from "../dist/engine/protocol.js";

const content = {
  tools: [{ name: "github__search", id: "github__search", description: "Searches." }],
  globals: [{ name: "fetchJson", spread: false }],
  deterministic: false,
  program: false,
};

describe("run configurations", () => {
  it("carry their content as JSON and a short key that equal content shares", () => {
    const a = runConfiguration(content);
    const b = runConfiguration(structuredClone(content));
    expect(a.key).toBe(b.key);
    expect(a.key).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(JSON.parse(a.json)).toEqual(content);
  });

  it("get another key when anything a script could see changes", () => {
    const keys = new Set(
      [
        content,
        { ...content, tools: [{ ...content.tools[0], description: "Searches code." }] },
        { ...content, tools: [{ ...content.tools[0], id: "search" }] },
        { ...content, globals: [{ name: "fetchJson", spread: true }] },
        { ...content, globals: [] },
        { ...content, deterministic: true },
        { ...content, program: true },
      ].map((c) => runConfiguration(c as typeof content).key),
    );
    expect(keys.size).toBe(7);
  });
});
