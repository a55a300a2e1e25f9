/**
 * The README as a user reads it: every ```js block runs as written and prints what its comments say, every
 * `npx airlock run` line does what it says, every config parses, the sample failure is what a failure prints, and
 * every file it names is in the package (the benchmarks, which run in a clone, excepted).
 */
import { execFile, execFileSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { parseMcpConfig } from "airlock-codemode/mcp";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CLI, REPO_ROOT, runCli, tempDir } from "./helpers/cli.ts";
import { hasSystemTool } from "./helpers/system-tools.ts";

const run = promisify(execFile);
const root = new URL("../", import.meta.url);
const readme = readFileSync(new URL("README.md", root), "utf8");
/** The README's fenced blocks in order, each with its language ("" for a plain block). */
const fenced = [...readme.matchAll(/^```(\w*)\n([\s\S]*?)^```$/gm)].map((m) => ({
  language: m[1] as string,
  text: m[2] as string,
}));
const blocks = (language: string) => fenced.filter((block) => block.language === language).map((block) => block.text);
const jsBlocks = blocks("js");
// Inside the package, so that `import ... from "airlock-codemode"` resolves to this package's build.
const dir = new URL("test/.readme-tmp/", root);
/** The process tier's samples need bubblewrap; elsewhere they are skipped with the helper's one line. */
const needsBwrap = (code: string) => code.includes("ProcessCodemodeSandbox");
const bwrap = jsBlocks.some(needsBwrap) && hasSystemTool("bwrap");

describe("README examples", () => {
  it("has examples to run", () => {
    expect(jsBlocks.length).toBeGreaterThanOrEqual(3);
  });

  it.each(jsBlocks.map((code, i) => [i + 1, code] as const))(
    "block %i runs and prints what it promises",
    async (i, code) => {
      if (needsBwrap(code) && !bwrap) return;
      mkdirSync(dir, { recursive: true });
      const file = new URL(`block-${i}.mjs`, dir);
      writeFileSync(file, code);
      const { stdout } = await run(process.execPath, [file.pathname], { timeout: 20_000 });
      // Each `console.log(x); // expected` line promises output that contains `expected`.
      const promised = [...code.matchAll(/console\.log\([^;]*\); \/\/ (.+)$/gm)].map((m) => m[1] as string);
      expect(promised.length).toBeGreaterThan(0);
      for (const text of promised) expect(stdout).toContain(text.replace(/"/g, "'"));
    },
    30_000,
  );
});

describe("README command lines", () => {
  /** A folder holding a copy of the examples, where the commands run (counter.json is written there). */
  let work: string;
  beforeAll(() => {
    work = mkdtempSync(join(tmpdir(), "airlock-readme-"));
    cpSync(join(REPO_ROOT, "examples"), join(work, "examples"), { recursive: true });
  });
  afterAll(() => rmSync(work, { recursive: true, force: true }));

  /**
   * Each `npx airlock run` line of a ```sh block, in order, with what it promises: its `# comment`, or the plain
   * block that follows its block.
   */
  const lines = fenced.flatMap((block, index) => {
    if (block.language !== "sh") return [];
    const next = fenced[index + 1];
    const commands = block.text.split("\n").filter((line) => /npx airlock run /.test(line));
    return commands.map((line, i) => {
      const [command, comment] = line.split(/\s+# /) as [string, string | undefined];
      const printed =
        i === commands.length - 1 && next?.language === "" && comment === undefined ? next.text : undefined;
      return { command: command.trim(), comment, printed };
    });
  });

  it("has command lines to run", () => {
    expect(lines.length).toBeGreaterThanOrEqual(4);
    for (const { comment, printed } of lines) expect(comment ?? printed).toBeDefined();
  });

  it("runs every `npx airlock run` line and prints what it promises", async () => {
    for (const { command, comment, printed } of lines) {
      const shell = command.replaceAll("npx airlock", `'${process.execPath}' '${CLI}'`);
      const stdout = execFileSync("sh", ["-c", shell], { cwd: work, encoding: "utf8", timeout: 30_000 });
      if (printed !== undefined) expect(stdout, command).toBe(printed);
      else expect(stdout, command).toContain(comment);
    }
  }, 120_000);

  it("shows a failure as a failed run prints it", async () => {
    const sample = blocks("").find((block) => block.startsWith("airlock: run failed")) as string;
    const { dir: cwd, cleanup } = tempDir({
      "hello.js": 'text("hello");\nconst o = {};\nconst y = o.missing.deeper;\n',
    });
    try {
      const result = await runCli(["run", "hello.js"], { cwd });
      expect(result.stderr).toBe(sample);
    } finally {
      cleanup();
    }
  });
});

describe("README configs", () => {
  it("are JSON, and every MCP config among them is one Airlock takes", () => {
    const configs = blocks("json").map((text) => JSON.parse(text) as Record<string, unknown>);
    expect(configs.length).toBeGreaterThanOrEqual(2);
    for (const config of configs) {
      const parsed = parseMcpConfig(config, { env: { GITHUB_TOKEN: "ghp_test" } });
      expect(parsed.servers.length).toBeGreaterThan(0);
      expect(parsed.warnings).toEqual([]);
    }
  });

  it("examples/mcp.json fills in its TMPDIR from the environment, or its default when unset or empty", () => {
    const config = JSON.parse(readFileSync(join(REPO_ROOT, "examples", "mcp.json"), "utf8"));
    const memoryEnv = (env: Record<string, string>) => {
      const memory = parseMcpConfig(config, { env }).servers.find((server) => server.name === "memory");
      return memory?.transport === "stdio" ? memory.env.MEMORY_FILE_PATH : undefined;
    };
    expect(memoryEnv({})).toBe("/tmp/airlock-example-memory.jsonl");
    expect(memoryEnv({ TMPDIR: "" })).toBe("/tmp/airlock-example-memory.jsonl");
    expect(memoryEnv({ TMPDIR: "/var/tmp" })).toBe("/var/tmp/airlock-example-memory.jsonl");
  });
});

describe("README file references", () => {
  it("names only files in the package, and benchmarks that are in the repository", () => {
    const packed = JSON.parse(
      execFileSync("npm", ["pack", "--dry-run", "--json", "--ignore-scripts"], { cwd: REPO_ROOT, encoding: "utf8" }),
    ) as { files: { path: string }[] }[];
    const files = new Set(packed[0]?.files.map((file) => file.path));
    const named = [...readme.matchAll(/(?<![\w/.-])((?:src|docs|dist|examples|test|bench)\/[\w./-]*\w\.\w+)/g)].map(
      (m) => m[1] as string,
    );
    expect(named.length).toBeGreaterThan(5);
    for (const path of new Set(named)) {
      if (path.startsWith("bench/")) expect(existsSync(join(REPO_ROOT, path)), path).toBe(true);
      else expect(files.has(path), `${path} is not in the package`).toBe(true);
    }
    // Documents that only the repository's developers have.
    expect(readme).not.toMatch(/SECURITY\.md|DESIGN\.md/);
  });
});
