/**
 * Resource templates route a client's URI to the server that listed the template. Both are chosen by others, so the
 * match is bounded: a template of many `{+var}` and a long URI took a backtracking expression exponential time (30
 * variables over 40 characters: 50 s); here it is followed as a set of states, and a template too large is not matched.
 */
import { describe, expect, it } from "vitest";
import { templatePattern } from "../dist/upstream/resources.js";

const matches = (template: string, uri: string) => {
  const pattern = templatePattern(template);
  if (pattern === undefined) return undefined;
  return uri.startsWith(pattern.prefix) && pattern.test(uri);
};

describe("resource template patterns", () => {
  it("match what an RFC 6570 template expands to", () => {
    expect(matches("file:///{path}", "file:///notes.md")).toBe(true);
    expect(matches("file:///{path}", "file:///a/notes.md")).toBe(false);
    expect(matches("file:///{+path}", "file:///a/notes.md")).toBe(true);
    expect(matches("repo://{owner}/{name}/issues", "repo://me/airlock/issues")).toBe(true);
    expect(matches("repo://{owner}/{name}/issues", "repo://me/airlock/pulls")).toBe(false);
    expect(matches("a.b/{x}", "aXb/y")).toBe(false);
    expect(templatePattern("file:///{path}")?.prefix).toBe("file:///");
  });

  it("take time linear in the URI for a hostile template, and refuse one too large", () => {
    const hostile = `x://${"{+a}a".repeat(16)}b`;
    const uri = `x://${"a".repeat(8_192)}`;
    const started = performance.now();
    expect(matches(hostile, uri)).toBe(false);
    // A backtracking engine would not finish this in a lifetime; following states takes milliseconds.
    expect(performance.now() - started).toBeLessThan(5_000);
    expect(templatePattern(`x://${"{+a}a".repeat(17)}`)).toBeUndefined();
    expect(templatePattern(`x://${"a".repeat(600)}`)).toBeUndefined();
  });
});
