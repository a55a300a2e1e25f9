/**
 * Code, tests and benches cite what a reader of the repository has (a docs page and its section, a file), never a
 * tracker's issue number or a document outside the repository, and test names do not carry the item numbers of such a
 * document. test/docs.test.ts checks the same of the README and docs/.
 */
import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { describe, expect, it } from "vitest";
import { REPO_ROOT } from "./helpers/cli.ts";

const SOURCE = /\.(?:ts|mts|mjs|js|cjs)$/;

/** Every source file under `dir` (fixtures and generated files included), relative to the repository. */
function sourcesUnder(dir: string): string[] {
  return readdirSync(join(REPO_ROOT, dir), { withFileTypes: true, recursive: true })
    .filter((entry) => entry.isFile() && SOURCE.test(entry.name))
    .map((entry) => relative(REPO_ROOT, join(entry.parentPath, entry.name)))
    .filter((file) => !file.split("/").includes("node_modules") && !file.startsWith("bench/results/"))
    .sort();
}

const files = ["src", "test", "bench", "scripts"].flatMap(sourcesUnder);
const read = (file: string) => readFileSync(join(REPO_ROOT, file), "utf8");

describe("citations in src/, test/, bench/ and scripts/", () => {
  it("finds the files it checks", () => {
    expect(files).toContain("src/index.ts");
    expect(files).toContain("test/helpers/code-mode.ts");
    expect(files.length).toBeGreaterThan(200);
  });

  it("name no document outside the repository and no tracker's issue", () => {
    const outside = /\b(?:SECURITY|DESIGN)\.md\b|\bissues? #?\d|\(issue \d/;
    const offending = files.filter((file) => outside.test(read(file)));
    expect(offending).toEqual([]);
  });

  it("give tests names without an outside document's item numbers", () => {
    const numbered = /(?:\bit|\bdescribe|\]\))(?:\.\w+(?:\([^()]*\))?)*\(\s*["'`]\d+: /;
    const offending = files.filter((file) => file.startsWith("test/") && numbered.test(read(file)));
    expect(offending).toEqual([]);
  });
});
