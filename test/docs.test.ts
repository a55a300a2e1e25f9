/**
 * The README and the pages under docs/ as a user reads them. Every ```js block runs as written and prints what its
 * `// comments` promise (or exactly the plain block after it); every `npx airlock run` line does what it says; every
 * other `airlock` command line names a command and flags its help lists; every config is one Airlock takes; every
 * ```ts and ```jsonc block is part of a file of examples/ (which test/cloudflare.test.ts runs); the sample failure is
 * what a failure prints. Every link of every page leads to a file and a heading that exist, and every file a page
 * names is in the package. docs/architecture.md and the design records (docs/design/) are for the repository's
 * readers: their links and file names are checked against the repository, and their blocks are not code to run.
 */
import { execFile, execFileSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative } from "node:path";
import { promisify } from "node:util";
import { parseMcpConfig } from "airlock-codemode/mcp";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { findCommand } from "../src/cli/commands.ts";
import { CLI, REPO_ROOT, runCli, tempDir } from "./helpers/cli.ts";
import { hasSystemTool } from "./helpers/system-tools.ts";

const run = promisify(execFile);

/** Every Markdown file under `dir`, relative to the repository. */
function markdownUnder(dir: string): string[] {
  return readdirSync(join(REPO_ROOT, dir), { withFileTypes: true, recursive: true })
    .filter((entry) => entry.isFile() && entry.name.endsWith(".md"))
    .map((entry) => relative(REPO_ROOT, join(entry.parentPath, entry.name)))
    .sort();
}
const read = (page: string) => readFileSync(join(REPO_ROOT, page), "utf8");
const forRepositoryReaders = (page: string) => page === "docs/architecture.md" || page.startsWith("docs/design/");

/** The pages a user reads, whose blocks run; and every page, whose links and file names are checked. */
const userPages = ["README.md", ...markdownUnder("docs").filter((page) => !forRepositoryReaders(page))];
const allPages = [...userPages, "CONTRIBUTING.md", ...markdownUnder("docs").filter(forRepositoryReaders)];

interface Block {
  page: string;
  language: string;
  text: string;
  /** The plain block right after this one, if any: what it prints. */
  next?: Block;
}
const blocks: Block[] = userPages.flatMap((page) => {
  const found: Block[] = [...read(page).matchAll(/^```(\w*)\n([\s\S]*?)^```$/gm)].map((m) => ({
    page,
    language: m[1] as string,
    text: m[2] as string,
  }));
  found.forEach((block, i) => {
    const next = found[i + 1];
    if (next?.language === "") block.next = next;
  });
  return found;
});
const ofLanguage = (language: string) => blocks.filter((block) => block.language === language);

/** The ```js blocks, each once (the README's example is also the first of docs/sandbox.md). */
const jsBlocks = ofLanguage("js").filter((block, i, all) => all.findIndex((other) => other.text === block.text) === i);
// Inside the package, so that `import ... from "airlock-codemode"` resolves to this package's build.
const dir = new URL("../test/.docs-tmp/", import.meta.url);
/** The process tier's samples need bubblewrap; elsewhere they are skipped with the helper's one line. */
const needsBwrap = (code: string) => code.includes("ProcessCodemodeSandbox");
const bwrap = jsBlocks.some((block) => needsBwrap(block.text)) && hasSystemTool("bwrap");

/** Blocks run a few at a time: each starts Node, and most a worker pool. */
const RUNNING_AT_ONCE = 3;
let running = 0;
const waiting: (() => void)[] = [];
async function inTurn<T>(task: () => Promise<T>): Promise<T> {
  if (running >= RUNNING_AT_ONCE) await new Promise<void>((resolve) => waiting.push(resolve));
  running++;
  try {
    return await task();
  } finally {
    running--;
    waiting.shift()?.();
  }
}

describe("every block is of a kind this file checks", () => {
  it("js, sh, json, ts, jsonc, or a plain block that is a run's output", () => {
    expect(blocks.length).toBeGreaterThan(20);
    for (const block of blocks) {
      expect(["js", "sh", "json", "ts", "jsonc", ""], `${block.page}: a ${block.language} block`).toContain(
        block.language,
      );
      if (block.language !== "") continue;
      const output = blocks.some(
        (other) => other.next === block && (other.language === "js" || other.language === "sh"),
      );
      expect(output || block.text.startsWith("airlock: run failed"), `${block.page}: ${block.text}`).toBe(true);
    }
  });
});

describe("js blocks", () => {
  beforeAll(() => mkdirSync(dir, { recursive: true }));

  it("are there to run", () => {
    expect(jsBlocks.length).toBeGreaterThanOrEqual(10);
  });

  it.concurrent.each(jsBlocks.map((block, i) => [`${block.page}, block ${i + 1}`, block, i + 1] as const))(
    "%s runs and prints what it promises",
    async (_, { text, next }, n) => {
      if (needsBwrap(text) && !bwrap) return;
      const file = new URL(`block-${n}.mjs`, dir);
      writeFileSync(file, text);
      const { stdout } = await inTurn(() => run(process.execPath, [file.pathname], { timeout: 60_000 }));
      // Each `console.log(x); // expected` line promises output that contains `expected`.
      const promised = [...text.matchAll(/console\.log\([^;]*\); \/\/ (.+)$/gm)].map((m) => m[1] as string);
      expect(promised.length > 0 || next !== undefined, "a block promises what it prints").toBe(true);
      for (const line of promised) expect(stdout).toContain(line.replace(/"/g, "'"));
      if (next !== undefined) expect(stdout).toBe(next.text);
    },
    180_000,
  );
});

describe("command lines", () => {
  /** A folder holding a copy of the examples, where the commands run (counter.json is written there). */
  let work: string;
  beforeAll(() => {
    work = mkdtempSync(join(tmpdir(), "airlock-docs-"));
    cpSync(join(REPO_ROOT, "examples"), join(work, "examples"), { recursive: true });
  });
  afterAll(() => rmSync(work, { recursive: true, force: true }));

  /** Each line of a ```sh block, with its `# comment` apart, and the plain block after its block. */
  const lines = ofLanguage("sh").flatMap((block) => {
    const all = block.text.split("\n").filter((line) => line.trim() !== "");
    return all.map((line, i) => {
      const [command, comment] = line.split(/\s+# /) as [string, string | undefined];
      const printed = i === all.length - 1 && comment === undefined ? block.next?.text : undefined;
      return { page: block.page, command: command.trim(), comment, printed };
    });
  });
  const runLines = lines.filter(({ command }) => /npx airlock run /.test(command));

  it("runs every `npx airlock run` line, in order, and each prints what it promises", async () => {
    expect(runLines.length).toBeGreaterThanOrEqual(4);
    for (const { page, command, comment, printed } of runLines) {
      expect(comment ?? printed, `${page}: ${command} promises nothing`).toBeDefined();
      const shell = command.replaceAll("npx airlock", `'${process.execPath}' '${CLI}'`);
      const stdout = execFileSync("sh", ["-c", shell], { cwd: work, encoding: "utf8", timeout: 60_000 });
      if (printed !== undefined) expect(stdout, command).toBe(printed);
      else expect(stdout, command).toContain(comment);
    }
  }, 180_000);

  it("every other `airlock` line names a command, and only flags its help lists", () => {
    const others = lines.filter(({ command }) => /(^|\s)airlock \w/.test(command) && !/npx airlock run /.test(command));
    expect(others.length).toBeGreaterThanOrEqual(8);
    for (const { page, command } of others) {
      const [, name, rest] = /(?:^|\s)airlock (\w+)(.*)$/.exec(command) as unknown as [string, string, string];
      const known = findCommand(name);
      expect(known, `${page}: ${command}`).toBeDefined();
      for (const [flag] of rest.matchAll(/--[a-z][\w-]*/g)) expect(known?.usage, `${page}: ${command}`).toContain(flag);
    }
  });

  it("shows a failure as a failed run prints it", async () => {
    const samples = blocks.filter((block) => block.language === "" && block.text.startsWith("airlock: run failed"));
    expect(samples.length).toBe(1);
    const { dir: cwd, cleanup } = tempDir({
      "hello.js": 'text("hello");\nconst o = {};\nconst y = o.missing.deeper;\n',
    });
    try {
      const result = await runCli(["run", "hello.js"], { cwd });
      expect(result.stderr).toBe(samples[0]?.text);
    } finally {
      cleanup();
    }
  });
});

describe("configs", () => {
  it("are JSON, and every one is an MCP config Airlock takes", () => {
    const configs = ofLanguage("json").map((block) => JSON.parse(block.text) as Record<string, unknown>);
    expect(configs.length).toBeGreaterThanOrEqual(3);
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

describe("ts and jsonc blocks", () => {
  it("are each part of a file of examples/", () => {
    const examples = readdirSync(join(REPO_ROOT, "examples"), { withFileTypes: true, recursive: true })
      .filter((entry) => entry.isFile())
      .map((entry) => readFileSync(join(entry.parentPath, entry.name), "utf8"));
    const shown = [...ofLanguage("ts"), ...ofLanguage("jsonc")];
    expect(shown.length).toBeGreaterThanOrEqual(2);
    for (const block of shown) {
      expect(
        examples.some((file) => file.includes(block.text)),
        `${block.page}: ${block.text}`,
      ).toBe(true);
    }
  });
});

/** GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens. */
const anchor = (heading: string) =>
  heading
    .toLowerCase()
    .replace(/[^\p{L}\p{N} _-]/gu, "")
    .replace(/ /g, "-");

describe("links and names", () => {
  it("every link leads to a file, and to a heading of it", () => {
    let links = 0;
    for (const page of allPages) {
      for (const m of read(page).matchAll(/\]\(([^)\s]+)\)/g)) {
        const target = m[1] as string;
        if (/^[a-z]+:/.test(target)) continue;
        links++;
        const [path, hash] = target.split("#") as [string, string | undefined];
        const file = path === "" ? join(REPO_ROOT, page) : join(REPO_ROOT, dirname(page), path);
        expect(existsSync(file), `${page}: ${target}`).toBe(true);
        if (hash === undefined) continue;
        const headings = [...readFileSync(file, "utf8").matchAll(/^#+ (.+)$/gm)].map((h) => anchor(h[1] as string));
        expect(headings, `${page}: ${target}`).toContain(hash);
      }
    }
    expect(links).toBeGreaterThan(50);
  });

  it("user pages name only files in the package, and benchmarks that are in the repository", () => {
    const packed = JSON.parse(
      execFileSync("npm", ["pack", "--dry-run", "--json", "--ignore-scripts"], { cwd: REPO_ROOT, encoding: "utf8" }),
    ) as { files: { path: string }[] }[];
    const files = new Set(packed[0]?.files.map((file) => file.path));
    let named = 0;
    for (const page of allPages) {
      for (const m of read(page).matchAll(/(?<![\w/.-])((?:src|docs|dist|examples|test|bench)\/[\w./-]*\w\.\w+)/g)) {
        const path = m[1] as string;
        named++;
        if (forRepositoryReaders(page) || page === "CONTRIBUTING.md" || path.startsWith("bench/")) {
          expect(existsSync(join(REPO_ROOT, path)), `${page}: ${path}`).toBe(true);
        } else expect(files.has(path), `${page}: ${path} is not in the package`).toBe(true);
      }
    }
    expect(named).toBeGreaterThan(10);
  });

  it("name no document outside the repository, no tracker's issue, and no lab notes", () => {
    for (const page of allPages) {
      const text = read(page);
      expect(text, page).not.toMatch(/SECURITY\.md|DESIGN\.md|\bissues? \d|#\d+\b/);
      if (!forRepositoryReaders(page)) expect(text, page).not.toMatch(/on this machine|before the rework|code before/i);
    }
  });
});
