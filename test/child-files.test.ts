import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { removeStaleStaging } from "../src/process/isolation/child-files.ts";

const dir = mkdtempSync(join(tmpdir(), "airlock-staging-test-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("staging directories of the process tier", () => {
  it("removes those of this user's processes that are gone, and nothing else", () => {
    // A process that has ended: its pid is free.
    const gone = spawnSync(process.execPath, ["-e", ""]).pid as number;
    const make = (name: string) => {
      const path = join(dir, name);
      mkdirSync(path);
      writeFileSync(join(path, "package.json"), "{}");
      return path;
    };
    const stale = make(`airlock-files-${gone}-AbC123`);
    const mine = make(`airlock-files-${process.pid}-XyZ789`);
    const alive = make(`airlock-files-1-Qq1111`);
    const other = make(`something-${gone}-Aa0000`);
    const target = make("elsewhere");
    const link = join(dir, `airlock-files-${gone}-Link00`);
    symlinkSync(target, link);
    writeFileSync(join(dir, `airlock-files-${gone}-File00`), "");

    expect(removeStaleStaging(dir)).toEqual([stale]);
    expect(existsSync(stale)).toBe(false);
    for (const kept of [mine, alive, other, target, link, join(dir, `airlock-files-${gone}-File00`)]) {
      expect(existsSync(kept), kept).toBe(true);
    }
    expect(existsSync(join(target, "package.json"))).toBe(true);
  });

  it("returns nothing for a directory that cannot be read", () => {
    expect(removeStaleStaging(join(dir, "missing"))).toEqual([]);
  });
});
