/**
 * The packed package as a user gets it: `npm pack`'s tarball unpacked into a project's node_modules with its one
 * dependency (quickjs-wasi) and none of its optional packages (zod, amaro, the MCP SDK, jose, eventsource-parser,
 * js-tiktoken, ai, @opentelemetry/api, the drivers), as `npm install --omit=optional` leaves it. The packages come
 * from this repository's node_modules, so the test needs no registry.
 */
import { execFile, execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { REPO_ROOT } from "./helpers/cli.ts";

const pkg = JSON.parse(readFileSync(join(REPO_ROOT, "package.json"), "utf8")) as { exports: Record<string, unknown> };
/** Entries a Node user may load; `/cloudflare` is for Workers only. */
const NODE_ENTRIES = Object.keys(pkg.exports)
  .filter((entry) => entry !== "./package.json" && entry !== "./cloudflare")
  .map((entry) => `airlock-codemode${entry.slice(1)}`);
/** Entries whose door needs optional packages at import: the MCP SDK with jose and eventsource-parser, the AI SDK. */
const NEEDS_PACKAGE: Record<string, RegExp> = {
  "airlock-codemode/mcp": /^Cannot find package '(@modelcontextprotocol\/sdk|jose|eventsource-parser)'/,
  "airlock-codemode/ai": /^Cannot find package 'ai'/,
};

let folder: string;
let tarball: string;

/** A project with the unpacked package and the given packages of this repository linked in its node_modules. */
function project(name: string, packages: string[], files: Record<string, string>): string {
  const dir = join(folder, name);
  const modules = join(dir, "node_modules");
  mkdirSync(join(modules, "airlock-codemode"), { recursive: true });
  execFileSync("tar", ["-xzf", tarball, "-C", join(modules, "airlock-codemode"), "--strip-components=1"]);
  for (const linked of ["quickjs-wasi", ...packages]) {
    mkdirSync(join(modules, linked, ".."), { recursive: true });
    symlinkSync(join(REPO_ROOT, "node_modules", linked), join(modules, linked), "dir");
  }
  for (const [file, text] of Object.entries(files)) writeFileSync(join(dir, file), text);
  return dir;
}

function run(file: string, args: string[], cwd: string): Promise<{ code: number; out: string }> {
  return new Promise((resolve) => {
    execFile(file, args, { cwd, timeout: TSC_TIMEOUT_MS }, (error, stdout, stderr) =>
      resolve({ code: error ? ((error as { code?: number }).code ?? 1) : 0, out: `${stdout}${stderr}` }),
    );
  });
}

/** tsc over a project's declarations (zod's are large) takes 10-60 s on a loaded 2-core machine. */
const TSC_TIMEOUT_MS = 180_000;
const tsc = (cwd: string) =>
  run(process.execPath, [join(REPO_ROOT, "node_modules", "typescript", "bin", "tsc"), "-p", "."], cwd);

const TSCONFIG = JSON.stringify({
  compilerOptions: {
    module: "nodenext",
    moduleResolution: "nodenext",
    target: "es2022",
    strict: true,
    skipLibCheck: false,
    noEmit: true,
    // A Node project has Node's types; without them quickjs-wasi's `Symbol.dispose` needs lib esnext.disposable.
    types: ["node"],
  },
  files: ["main.ts"],
});

beforeAll(() => {
  folder = mkdtempSync(join(tmpdir(), "airlock-packed-"));
  const packed = JSON.parse(
    execFileSync("npm", ["pack", "--json", "--ignore-scripts", "--pack-destination", folder], {
      cwd: REPO_ROOT,
    }).toString(),
  ) as { filename: string; files: { path: string }[] }[];
  const first = packed[0];
  if (first === undefined) throw new Error("npm pack packed nothing");
  expect(first.files.filter((f) => f.path.endsWith(".map"))).toEqual([]);
  tarball = join(folder, first.filename);
}, 120_000);

afterAll(() => rmSync(folder, { recursive: true, force: true }));

describe("the packed package", () => {
  it(
    "type-checks with skipLibCheck false and none of its optional packages",
    async () => {
      const main = [
        ...NODE_ENTRIES.map((entry, i) => `import * as entry${i} from ${JSON.stringify(entry)};`),
        'import { CodemodeSandbox, type Tool, z } from "airlock-codemode";',
        "const sandbox: CodemodeSandbox = new CodemodeSandbox({ tools: [] });",
        "export const used = [sandbox, z, null as unknown as Tool, " +
          NODE_ENTRIES.map((_, i) => `entry${i}`).join(", ") +
          "];",
      ].join("\n");
      const dir = project("types", ["@types/node", "undici-types"], { "tsconfig.json": TSCONFIG, "main.ts": main });
      const checked = await tsc(dir);
      expect(checked.out).toBe("");
      expect(checked.code).toBe(0);
    },
    TSC_TIMEOUT_MS,
  );

  it(
    "gives zod's own types to the root's z where zod is installed",
    async () => {
      const main = [
        'import { z } from "airlock-codemode";',
        "const S = z.object({ a: z.string() });",
        "type T = z.infer<typeof S>;",
        'export const good: T = { a: "x" };',
        "// @ts-expect-error a is a string",
        "export const bad: T = { a: 1 };",
      ].join("\n");
      const dir = project("zod-types", ["@types/node", "undici-types", "zod"], {
        "tsconfig.json": TSCONFIG,
        "main.ts": main,
      });
      const checked = await tsc(dir);
      expect(checked.out).toBe("");
      expect(checked.code).toBe(0);
    },
    TSC_TIMEOUT_MS,
  );

  it("loads from CommonJS, and a door without its package names the package to install", async () => {
    const main = [
      "const results = {};",
      `for (const entry of ${JSON.stringify(NODE_ENTRIES)}) {`,
      "  try { require(entry); results[entry] = 'loaded'; }",
      "  catch (error) { results[entry] = String(error.message).split('\\n')[0]; }",
      "}",
      "const airlock = require('airlock-codemode');",
      "try { airlock.z.object({}); results.z = 'loaded'; } catch (error) { results.z = error.message; }",
      "try { require('airlock-codemode/source').stripTypeScript('let a: number = 1'); results.ts = 'stripped'; }",
      "catch (error) { results.ts = error.message; }",
      "const sandbox = new airlock.InlineCodemodeSandbox({ tools: [{ name: 'add', execute: ({ a, b }) => a + b }] });",
      "sandbox.execute('return await tools.add({ a: 2, b: 3 })').then(async (result) => {",
      "  results.value = result.ok ? result.value : result.error.message;",
      "  await sandbox.close();",
      "  console.log(JSON.stringify(results));",
      "});",
    ].join("\n");
    const dir = project("commonjs", [], {
      "package.json": JSON.stringify({ name: "consumer", private: true, type: "commonjs" }),
      "main.js": main,
    });
    const ran = await run(process.execPath, ["main.js"], dir);
    expect(ran.code, ran.out).toBe(0);
    const results = JSON.parse(ran.out.trim().split("\n").at(-1) ?? "") as Record<string, unknown>;
    for (const entry of NODE_ENTRIES) {
      const needs = NEEDS_PACKAGE[entry];
      if (needs === undefined) expect(results[entry], entry).toBe("loaded");
      else expect(results[entry], entry).toMatch(needs);
    }
    expect(results.z).toBe("z needs the package zod, which is optional: npm install zod@4");
    expect(results.ts).toBe("TypeScript input needs the package amaro, which is optional: npm install amaro@1");
    expect(results.value).toBe(5);
  });

  it("airlock serve without the MCP SDK says which package to install", async () => {
    const dir = project("serve", [], { "servers.json": JSON.stringify({ mcpServers: {} }) });
    const cli = join(dir, "node_modules", "airlock-codemode", "dist", "cli", "main.js");
    const served = await run(process.execPath, [cli, "serve", "--config", "servers.json"], dir);
    expect(served.out).toContain(
      "airlock serve: the MCP gateway needs the packages @modelcontextprotocol/sdk, jose, eventsource-parser, amaro, which are optional: npm install @modelcontextprotocol/sdk@1 jose@6 eventsource-parser@3 amaro@1",
    );
    expect(served.code).toBe(1);
  });
});
