/**
 * What importing each entry loads besides Airlock itself, each in a fresh process: a script sandbox user does not
 * load zod, amaro, the MCP SDK, the tokenizer, a database driver or OpenTelemetry (zod and the API are loaded on
 * first use). Files loaded as ES modules are seen by a module hook, CommonJS ones (and zod's ES module when `z` loads
 * it with `require`) in `require.cache`. How long an import takes is the bench's business (bench/cold.mjs).
 */
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { REPO_ROOT } from "./helpers/cli.ts";

const pkg = JSON.parse(readFileSync(join(REPO_ROOT, "package.json"), "utf8")) as { exports: Record<string, unknown> };

/** The third-party packages each entry loads when imported, exactly. */
const LOADS: Record<string, readonly string[]> = {
  ".": ["quickjs-wasi"],
  "./source": [],
  "./declarations": [],
  "./worker": ["quickjs-wasi"],
  "./code-mode": [],
  "./adapter-code-quickjs": ["quickjs-wasi"],
  "./adapter-code-docker": ["quickjs-wasi"],
  "./portable": ["quickjs-wasi"],
  "./workflows": [],
  "./workflows/sqlite": [],
  "./workflows/postgres": [],
  "./code-mode-workflows": [],
};
/** The doors whose own packages load with them: what each must load, and what it must not. */
const DOORS: Record<string, { loads: readonly string[]; not: readonly string[] }> = {
  "./mcp": { loads: ["@modelcontextprotocol/sdk"], not: ["js-tiktoken", "amaro", "pg", "better-sqlite3"] },
  "./ai": {
    loads: ["ai"],
    not: ["@modelcontextprotocol/sdk", "js-tiktoken", "amaro", "jose", "pg", "better-sqlite3"],
  },
};
/** Entries not loaded here: `/cloudflare` imports `cloudflare:workers`, which only Workers have. */
const NOT_ON_NODE = ["./cloudflare", "./package.json"];

/** The packages under node_modules that a fresh process loaded while it ran `code` (an ES module). */
function packagesLoaded(code: string): Promise<string[]> {
  const folder = mkdtempSync(join(tmpdir(), "airlock-imports-"));
  const file = join(folder, "loaded.txt");
  const listRequired = [
    'const { createRequire } = await import("node:module");',
    "for (const f of Object.keys(createRequire(import.meta.url).cache)) console.log(f);",
  ].join("\n");
  return new Promise<string[]>((resolve, reject) => {
    execFile(
      process.execPath,
      [
        "--import",
        join(REPO_ROOT, "test", "fixtures", "trace-imports.mjs"),
        "--input-type=module",
        "-e",
        `${code}\n${listRequired}`,
      ],
      { cwd: REPO_ROOT, env: { ...process.env, TRACE_IMPORTS_FILE: file }, timeout: 60_000 },
      (error, stdout, stderr) => {
        try {
          if (error) throw new Error(`${error.message}\n${stderr}`);
          const files = [...readFileSync(file, "utf8").split("\n"), ...stdout.split("\n")];
          const names = new Set<string>();
          for (const loaded of files) {
            const match = /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(loaded);
            if (match?.[1] !== undefined) names.add(match[1]);
          }
          resolve([...names].sort());
        } catch (failure) {
          reject(failure);
        } finally {
          rmSync(folder, { recursive: true, force: true });
        }
      },
    );
  });
}

const specifier = (entry: string) => `airlock-codemode${entry.slice(1)}`;
const importOf = (entry: string) => `await import(${JSON.stringify(specifier(entry))});`;

describe("what importing an entry loads", () => {
  it("lists every entry of package.json", () => {
    expect(Object.keys(pkg.exports).sort()).toEqual(
      [...Object.keys(LOADS), ...Object.keys(DOORS), ...NOT_ON_NODE].sort(),
    );
  });

  for (const [entry, expected] of Object.entries(LOADS)) {
    it(`${entry} loads ${expected.length === 0 ? "no other package" : expected.join(", ")}`, async () => {
      expect(await packagesLoaded(importOf(entry))).toEqual(expected);
    });
  }

  for (const [entry, { loads, not }] of Object.entries(DOORS)) {
    it(`${entry} loads its own packages and none of another door's`, async () => {
      const loaded = await packagesLoaded(importOf(entry));
      expect(loaded).toEqual(expect.arrayContaining([...loads]));
      for (const name of not) expect(loaded).not.toContain(name);
    });
  }

  it("loads zod on the first use of the root's z, the same instance as the application's", async () => {
    const code = [
      'const { z } = await import("airlock-codemode");',
      'const zod = await import("zod");',
      "const schema = z.object({ a: z.string() });",
      'if (z.object !== zod.z.object || !(schema instanceof zod.z.ZodObject)) throw new Error("another zod");',
      'if (schema.parse({ a: "x" }).a !== "x" || !("string" in z)) throw new Error("not zod");',
    ].join("\n");
    expect(await packagesLoaded(code)).toEqual(["quickjs-wasi", "zod"]);
  });

  it("loads @opentelemetry/api once something registered with it, and traces then", async () => {
    const code = [
      'const airlock = await import("airlock-codemode");',
      "const before = airlock.tracingAvailable();",
      'const { trace } = await import("@opentelemetry/api");',
      'const { BasicTracerProvider } = await import("@opentelemetry/sdk-trace-base");',
      "trace.setGlobalTracerProvider(new BasicTracerProvider());",
      'if (before || !airlock.tracingAvailable()) throw new Error("tracingAvailable: " + before);',
    ].join("\n");
    expect(await packagesLoaded(code)).toEqual(
      expect.arrayContaining(["@opentelemetry/api", "@opentelemetry/sdk-trace-base"]),
    );
  });
});
