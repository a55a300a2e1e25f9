/**
 * The public API is what the pages document: every name each entry of package.json exports, its runtime values and
 * its types alike, appears on a page (README.md or docs/*.md, not the design records), and the root entry stays small
 * (README.md, "Which door"). The count per entry is printed so that a change to the surface shows in the test log.
 */
import { readdirSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const root = fileURLToPath(new URL("..", import.meta.url));
const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as {
  exports: Record<string, string | { types: string; import: string }>;
};
const entries = Object.entries(pkg.exports).flatMap(([entry, target]) =>
  typeof target === "string" ? [] : [{ entry, types: join(root, target.types), file: join(root, target.import) }],
);
/** The root entry's runtime names at most: what a user calls and the limits a user reads. */
const MAX_ROOT_RUNTIME_NAMES = 80;

/** Every exported name of each entry, with whether it is a value at run time, read from dist's declarations. */
function exportedNames(): Map<string, { name: string; value: boolean }[]> {
  const ts = createRequire(import.meta.url)("typescript") as typeof import("typescript");
  const program = ts.createProgram(
    entries.map((e) => e.types),
    {
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
      skipLibCheck: true,
      types: ["node"],
    },
  );
  const checker = program.getTypeChecker();
  const names = new Map<string, { name: string; value: boolean }[]>();
  for (const { entry, types } of entries) {
    const source = program.getSourceFile(types);
    const module = source === undefined ? undefined : checker.getSymbolAtLocation(source);
    if (module === undefined) throw new Error(`${types} does not declare a module`);
    names.set(
      entry,
      checker.getExportsOfModule(module).map((symbol) => {
        const target = symbol.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(symbol) : symbol;
        return { name: symbol.name, value: (target.flags & ts.SymbolFlags.Value) !== 0 };
      }),
    );
  }
  return names;
}

/** README.md and the pages under docs/, without the design records and the contributors' map of the code. */
function pages(): string {
  const docs = readdirSync(join(root, "docs"))
    .filter((name) => name.endsWith(".md") && name !== "architecture.md")
    .map((name) => readFileSync(join(root, "docs", name), "utf8"));
  return [readFileSync(join(root, "README.md"), "utf8"), ...docs].join("\n");
}

describe("the public API", () => {
  const names = exportedNames();

  it("has as many runtime names per entry as the declarations say, and a root of at most 80", async () => {
    const lines: string[] = [];
    for (const { entry, file } of entries) {
      const declared = names.get(entry) ?? [];
      const values = declared.filter((n) => n.value).map((n) => n.name);
      // The Cloudflare entry imports cloudflare:workers, which only Workers have (test/cloudflare.test.ts runs it).
      if (entry !== "./cloudflare") {
        const loaded = Object.keys(await import(file));
        expect(loaded.sort(), entry).toEqual(values.sort());
      }
      lines.push(
        `${entry.padEnd(26)} ${String(values.length).padStart(3)} runtime, ${declared.length - values.length} types`,
      );
    }
    console.log(`exported names per entry:\n${lines.join("\n")}`);
    const rootValues = (names.get(".") ?? []).filter((n) => n.value);
    expect(rootValues.length).toBeLessThanOrEqual(MAX_ROOT_RUNTIME_NAMES);
  }, 60_000);

  it("documents every exported name on a page", () => {
    const text = pages();
    const missing: string[] = [];
    for (const [entry, declared] of names) {
      for (const { name } of declared) {
        if (!new RegExp(`(?<![\\w$])${name.replace(/\$/g, "\\$")}(?![\\w$])`).test(text))
          missing.push(`${entry} ${name}`);
      }
    }
    expect(missing).toEqual([]);
  });
});
