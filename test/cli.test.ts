/** The `airlock` CLI, run as a child process from its build (dist/cli/main.js). */
import { type ChildProcess, spawn } from "node:child_process";
import {
  chmodSync,
  closeSync,
  existsSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  realpathSync,
  statSync,
  symlinkSync,
  truncateSync,
  writeFileSync,
} from "node:fs";
import { type AddressInfo, createServer } from "node:net";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { assertCliBuilt, CLI, REPO_ROOT, runCli, tempDir } from "./helpers/cli.ts";

const pkg = JSON.parse(readFileSync(join(REPO_ROOT, "package.json"), "utf8")) as { version: string };

/** A 1x1 PNG: 70 bytes. */
const PNG_1x1 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

/** Tools for the tests. The interval is never cleared: the CLI has to exit on its own anyway. */
const TOOLS = `
let ticks = 0;
setInterval(() => ticks++, 10);
export default [
  { name: "echo", description: "Echo the argument", execute: (args) => args },
  { name: "fail", execute: () => { throw new Error("the tool failed on purpose"); } },
  { name: "ready", execute: () => { process.stderr.write("READY\\n"); return true; } },
  { name: "ticks", execute: () => ticks },
  {
    name: "wait_for_abort",
    execute: (_args, { signal }) =>
      new Promise((resolve) => signal.addEventListener("abort", () => { process.stderr.write("CANCELLED\\n"); resolve(); })),
  },
];
`;

let dir = "";
let cleanup = () => {};

beforeAll(() => {
  assertCliBuilt();
  ({ dir, cleanup } = tempDir({
    "tools.mjs": TOOLS,
    "loop.js": "while (true) {}",
    "throws.js": 'text("before the throw");\nthrow new TypeError("bad input");',
    "echo.js": "return await tools.echo({ said: 'hi' });",
    "big-string.js": 'const s = "x".repeat(32 * 1024 * 1024);\nreturn s.length;',
    "bomb.js": 'const parts = [];\nwhile (true) parts.push("x".repeat(1024) + parts.length);',
    "not-array.mjs": 'export default { name: "echo", execute: (args) => args };',
    "no-default.mjs": "export const tools = [];",
    "no-name.mjs": 'export default [{ name: "fine", execute() {} }, { execute() {} }];',
    "no-execute.mjs": 'export default [{ name: "lonely", description: "has nothing to run" }];',
    "duplicate.mjs": 'export default [{ name: "twin", execute() {} }, { name: "twin", execute() {} }];',
    "broken.mjs": 'throw new Error("boom while loading");',
    "same-id.mjs": 'export default [{ name: "a b", execute() {} }, { name: "a_b", execute() {} }];',
  }));
});

afterAll(() => cleanup());

describe("help and version", () => {
  it("prints the usage for --help, -h and help, and exits 0", async () => {
    const results = await Promise.all([runCli(["--help"]), runCli(["-h"]), runCli(["help"])]);
    for (const result of results) {
      expect(result.code).toBe(0);
      expect(result.stderr).toBe("");
      expect(result.stdout).toBe(results[0]?.stdout);
    }
    const usage = results[0]?.stdout ?? "";
    expect(usage.startsWith("Usage: airlock <command> [options]\n")).toBe(true);
    expect(usage).toMatch(/^ {2}run <file\|-> +Run a script/m);
    expect(usage).toMatch(/^ {2}help \[command\] +Show the help of a command$/m);
    expect(usage).toMatch(/^ {2}-v, --version +Print the version$/m);
  });

  it("prints the run command's usage for help run and run --help", async () => {
    const [viaHelp, viaFlag] = await Promise.all([runCli(["help", "run"]), runCli(["run", "--help"])]);
    expect(viaHelp.code).toBe(0);
    expect(viaFlag.code).toBe(0);
    expect(viaFlag.stdout).toBe(viaHelp.stdout);
    expect(viaHelp.stdout.startsWith("Usage: airlock run <file|-> [options]\n")).toBe(true);
    for (const flag of [
      "--tools <module>",
      "--timeout <ms>",
      "--memory <MiB>",
      "--isolation <mode>",
      "--store <file.json>",
      "--json",
    ]) {
      expect(viaHelp.stdout).toContain(`  ${flag} `);
    }
  });

  it("prints the package version for --version and -v", async () => {
    for (const flag of ["--version", "-v"]) {
      const result = await runCli([flag]);
      expect(result.code).toBe(0);
      expect(result.stdout).toBe(`${pkg.version}\n`);
    }
  });
});

describe("start-up", () => {
  // What a command does not need, it does not load: the MCP SDK is for `serve` only, and zod for tool schemas.
  const loadedModules = async (args: string[], input = "") => {
    const dir = tempDir({});
    try {
      const file = join(dir.dir, "modules.txt");
      const child = spawn(
        process.execPath,
        ["--import", join(REPO_ROOT, "test", "fixtures", "trace-imports.mjs"), CLI, ...args],
        { cwd: REPO_ROOT, env: { ...process.env, NODE_OPTIONS: "", TRACE_IMPORTS_FILE: file } },
      );
      child.stdin.end(input);
      const code = await new Promise((done) => child.on("exit", done));
      expect(code).toBe(0);
      return readFileSync(file, "utf8").trim().split("\n");
    } finally {
      dir.cleanup();
    }
  };

  it.each([[["--version"]], [["--help"]], [["help", "serve"]], [["run", "-"]]])(
    "airlock %j loads neither the MCP SDK nor zod",
    async (args) => {
      const modules = await loadedModules(args, "return 1");
      // The trace works: the CLI's own modules are in it.
      expect(modules.some((url) => url.endsWith("/dist/cli/main.js"))).toBe(true);
      expect(modules.filter((url) => /node_modules\/(@modelcontextprotocol|zod)\//.test(url))).toEqual([]);
    },
  );

  it("airlock run - loads the tokenizer only for a script that sets max_output_tokens", async () => {
    const plain = await loadedModules(["run", "-"], "return 1");
    const capped = await loadedModules(
      ["run", "-"],
      '// @options: {"max_output_tokens": 5}\nreturn "word ".repeat(100);',
    );
    const tokenizer = (modules: string[]) => modules.some((url) => url.includes("/node_modules/js-tiktoken/"));
    expect([tokenizer(plain), tokenizer(capped)]).toEqual([false, true]);
    expect(capped.filter((url) => /node_modules\/(@modelcontextprotocol|zod)\//.test(url))).toEqual([]);
  });
});

describe("usage errors exit 2 and name what is wrong", () => {
  const cases: { name: string; args: string[]; message: string | RegExp }[] = [
    { name: "unknown command", args: ["frob"], message: 'airlock: unknown command "frob"\n' },
    { name: "help for an unknown command", args: ["help", "frob"], message: 'unknown command "frob"' },
    { name: "unknown global flag", args: ["--frob"], message: "airlock: unknown flag --frob\n" },
    { name: "unknown run flag", args: ["run", "loop.js", "--frob"], message: "airlock run: unknown flag --frob\n" },
    { name: "missing value", args: ["run", "loop.js", "--timeout"], message: "airlock run: --timeout needs a value\n" },
    {
      name: "a flag where a value should be",
      args: ["run", "loop.js", "--tools", "--json"],
      message: "airlock run: --tools needs a value\n",
    },
    {
      name: "a value for a boolean flag",
      args: ["run", "loop.js", "--json=yes"],
      message: "airlock run: --json does not take a value\n",
    },
    { name: "non-numeric timeout", args: ["run", "loop.js", "--timeout", "soon"], message: /--timeout .*got "soon"/ },
    {
      name: "zero timeout",
      args: ["run", "loop.js", "--timeout", "0"],
      message: /--timeout must be a positive integer/,
    },
    { name: "fractional timeout", args: ["run", "loop.js", "--timeout=1.5"], message: /--timeout .*got "1.5"/ },
    { name: "negative timeout", args: ["run", "loop.js", "--timeout", "-5"], message: "write --timeout=-5" },
    { name: "non-numeric memory", args: ["run", "loop.js", "--memory", "lots"], message: /--memory .*MiB.*got "lots"/ },
    { name: "too much memory", args: ["run", "loop.js", "--memory", "5000"], message: /--memory .*up to 4096/ },
    {
      name: "unknown isolation",
      args: ["run", "loop.js", "--isolation", "thread"],
      message: '--isolation must be "worker" or "inline" or "process" or "gvisor", got "thread"',
    },
    { name: "no script", args: ["run"], message: "airlock run: missing script" },
    { name: "two scripts", args: ["run", "loop.js", "echo.js"], message: "expected one script, got 2" },
    { name: "missing script file", args: ["run", "nope.js"], message: "script file not found: nope.js\n" },
    {
      name: "missing tools module",
      args: ["run", "echo.js", "--tools", "nope.mjs"],
      message: "--tools: module not found: nope.mjs",
    },
    {
      name: "tools default export that is not an array",
      args: ["run", "echo.js", "--tools", "not-array.mjs"],
      message: "--tools not-array.mjs: the default export must be an array of tools, got an object",
    },
    {
      name: "tools module without a default export",
      args: ["run", "echo.js", "--tools", "no-default.mjs"],
      message: "--tools no-default.mjs: the module has no default export",
    },
    {
      name: "a tool without a name",
      args: ["run", "echo.js", "--tools", "no-name.mjs"],
      message: "--tools no-name.mjs: entry 1 has no name",
    },
    {
      name: "a tool without execute",
      args: ["run", "echo.js", "--tools", "no-execute.mjs"],
      message: '--tools no-execute.mjs: entry 0 ("lonely") has no execute function',
    },
    {
      name: "two tools with one name",
      args: ["run", "echo.js", "--tools", "duplicate.mjs"],
      message: '--tools duplicate.mjs: a tool named "twin" is already registered',
    },
    {
      name: "a tools module that throws",
      args: ["run", "echo.js", "--tools", "broken.mjs"],
      message: "--tools broken.mjs: the module failed to load: boom while loading",
    },
  ];

  it.concurrent.for(cases)("$name", async ({ args, message }, { expect }) => {
    const result = await runCli(args, { cwd: dir });
    expect(result.code).toBe(2);
    expect(result.stdout).toBe("");
    if (typeof message === "string") expect(result.stderr).toContain(message);
    else expect(result.stderr).toMatch(message);
    expect(result.stderr).toMatch(/Run "airlock( run)? --help" for usage\.\n/);
  });

  it("no command: names the problem, then prints the usage", async () => {
    const result = await runCli([]);
    expect(result.code).toBe(2);
    expect(result.stdout).toBe("");
    expect(result.stderr.startsWith("airlock: missing command\n\nUsage: airlock <command> [options]\n")).toBe(true);
  });
});

describe("the first example of docs/cli.md", () => {
  it("npx airlock run examples/hello.js --tools examples/tools.mjs", async () => {
    const result = await runCli(["run", "examples/hello.js", "--tools", "examples/tools.mjs"], { cwd: REPO_ROOT });
    expect(result.stderr).toBe("");
    expect(result.code).toBe(0);
    expect(result.stdout).toBe(
      [
        "Lisbon: 21 °C, sunny",
        "Oslo: 3 °C, snow showers",
        "Nairobi: 24 °C, partly cloudy",
        "note.txt says: Only the tools you hand it can reach this file.",
        "{",
        '  "cities": 3,',
        '  "averageC": 16',
        "}",
        "",
      ].join("\n"),
    );
  });

  it("the example slow tool stops when the run times out", async () => {
    const result = await runCli(["run", "-", "--tools", "examples/tools.mjs", "--timeout", "300"], {
      input: "return await tools.slow({ ms: 60000 });",
    });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain("run failed (timeout)");
    expect(result.durationMs).toBeLessThan(10_000);
  });
});

describe("run", () => {
  it("exits 0 and prints output lines, then the value", async () => {
    const script = [
      'text("plain text");',
      'console.log("from", "console", { n: 1 });',
      `image("data:image/png;base64,${PNG_1x1}");`,
      "return { answer: 42, list: [1, 2] };",
    ].join("\n");
    const result = await runCli(["run", "-"], { input: script });
    expect(result.code).toBe(0);
    expect(result.stderr).toBe("");
    expect(result.stdout).toBe(
      'plain text\nfrom console {"n":1}\n[image image/png, 70 bytes]\n{\n  "answer": 42,\n  "list": [\n    1,\n    2\n  ]\n}\n',
    );
  });

  it("prints a string value as is, null as JSON, and nothing for undefined", async () => {
    const [string, nil, none] = await Promise.all([
      runCli(["run", "-"], { input: 'return "just text";' }),
      runCli(["run", "-"], { input: "return null;" }),
      runCli(["run", "-"], { input: 'text("only output");' }),
    ]);
    expect(string.stdout).toBe("just text\n");
    expect(nil.stdout).toBe("null\n");
    expect(none.stdout).toBe("only output\n");
    expect([string.code, nil.code, none.code]).toEqual([0, 0, 0]);
  });

  it("reads the script from stdin for -", async () => {
    const result = await runCli(["run", "-", "--tools", "tools.mjs"], {
      cwd: dir,
      input: 'const r = await tools.echo({ from: "stdin" });\ntext(r.from);\nreturn 7 * 6;',
    });
    expect(result.code).toBe(0);
    expect(result.stdout).toBe("stdin\n42\n");
  });

  it("exits 1 on a script error: output on stdout, kind, message and stack on stderr", async () => {
    const result = await runCli(["run", "throws.js"], { cwd: dir });
    expect(result.code).toBe(1);
    expect(result.stdout).toBe("before the throw\n");
    expect(result.stderr).toMatch(/^airlock: run failed \(script\): TypeError: bad input\nthrows\.js:2:\d+\n/);
    expect(result.stderr).toMatch(/\n {4}at .*\(throws\.js:2:\d+\)\n$/);
  });

  it("--tools: resolves the module from the cwd and gives the script its tools", async () => {
    const result = await runCli(["run", "echo.js", "--tools", "./tools.mjs"], { cwd: dir });
    expect(result.stderr).toBe("");
    expect(result.code).toBe(0);
    expect(result.stdout).toBe('{\n  "said": "hi"\n}\n');
  });

  it("--tools: a failing tool is an error the script sees", async () => {
    const result = await runCli(["run", "-", "--tools", "tools.mjs"], { cwd: dir, input: "await tools.fail();" });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain("run failed (script): Error: the tool failed on purpose");
  });

  it("without --tools the script has no tools", async () => {
    const result = await runCli(["run", "echo.js"], { cwd: dir });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain("tools.echo does not exist");
  });

  for (const isolation of ["worker", "inline"]) {
    it(`--timeout stops an endless loop (${isolation})`, async () => {
      const result = await runCli(["run", "loop.js", "--timeout", "300", "--isolation", isolation], { cwd: dir });
      expect(result.code).toBe(1);
      expect(result.stdout).toBe("");
      expect(result.stderr).toBe("airlock: run failed (timeout): The execution timed out after 300 ms\n");
      expect(result.durationMs).toBeLessThan(10_000);
    });
  }

  it("--memory caps the heap: an allocation bomb runs out of memory", async () => {
    const result = await runCli(["run", "bomb.js", "--memory", "8"], { cwd: dir });
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/^airlock: run failed \(script\): InternalError: out of memory\n/);
  });

  it("--memory sets the cap in MiB: 32 MiB of string fits by default, not in 8 MiB", async () => {
    const [fits, capped] = await Promise.all([
      runCli(["run", "big-string.js"], { cwd: dir }),
      runCli(["run", "big-string.js", "--memory", "8"], { cwd: dir }),
    ]);
    expect(fits.code).toBe(0);
    expect(fits.stdout).toBe(`${32 * 1024 * 1024}\n`);
    expect(capped.code).toBe(1);
    expect(capped.stderr).toContain("out of memory");
  });

  it("--isolation: worker runs the script off the CLI's thread, inline on it", async () => {
    // The tools module counts host timer ticks; a busy script blocks them only when it runs on the host's thread.
    const script = [
      "const before = await tools.ticks();",
      "const end = Date.now() + 500;",
      "while (Date.now() < end) {}",
      "return (await tools.ticks()) - before;",
    ].join("\n");
    const worker = await runCli(["run", "-", "--tools", "tools.mjs", "--isolation", "worker"], {
      cwd: dir,
      input: script,
    });
    const inline = await runCli(["run", "-", "--tools", "tools.mjs", "--isolation", "inline"], {
      cwd: dir,
      input: script,
    });
    expect(worker.code).toBe(0);
    expect(inline.code).toBe(0);
    expect(Number(worker.stdout)).toBeGreaterThan(5);
    expect(Number(inline.stdout)).toBeLessThanOrEqual(1);
  });

  it("exits promptly although the tools module keeps a timer running", async () => {
    const result = await runCli(["run", "-", "--tools", "tools.mjs"], { cwd: dir, input: "return 1;" });
    expect(result.code).toBe(0);
    expect(result.signal).toBe(null);
    expect(result.durationMs).toBeLessThan(10_000);
  });

  it("--json prints the whole result object", async () => {
    const script = [
      'console.log("logged");',
      'text("texted");',
      "const r = await tools.echo({ x: 1 });",
      'store("kept", r);',
      'store("gone", undefined);',
      "return r;",
    ].join("\n");
    const result = await runCli(["run", "-", "--tools", "tools.mjs", "--json"], { cwd: dir, input: script });
    expect(result.code).toBe(0);
    expect(result.stderr).toBe("");
    expect(JSON.parse(result.stdout)).toEqual({
      ok: true,
      value: { x: 1 },
      output: [
        { type: "text", text: "logged", console: true },
        { type: "text", text: "texted" },
      ],
      calls: [{ name: "echo", status: "ok", durationMs: expect.any(Number) }],
      // "gone" was not in the store (no --store): deleting it writes nothing.
      storeWrites: { set: { kept: { x: 1 } }, delete: [] },
    });
  });

  it("--json prints a failed result too, exits 1, and leaves stderr empty", async () => {
    const result = await runCli(["run", "throws.js", "--json"], { cwd: dir });
    expect(result.code).toBe(1);
    expect(result.stderr).toBe("");
    const parsed = JSON.parse(result.stdout);
    expect(parsed).toEqual({
      ok: false,
      error: {
        kind: "script",
        name: "TypeError",
        message: "bad input",
        stack: expect.stringContaining("throws.js:2:"),
      },
      output: [{ type: "text", text: "before the throw" }],
      calls: [],
    });
  });
});

describe("run --store", () => {
  it("round-trips a counter across two runs (examples/counter.js)", async () => {
    const { dir: cwd, cleanup: done } = tempDir();
    try {
      const counter = join(REPO_ROOT, "examples", "counter.js");
      const first = await runCli(["run", counter, "--store", "counter.json"], { cwd });
      expect(first.code).toBe(0);
      expect(first.stdout).toBe("This script has run 1 time.\n1\n");
      expect(JSON.parse(readFileSync(join(cwd, "counter.json"), "utf8"))).toEqual({ count: 1 });
      const second = await runCli(["run", counter, "--store", "counter.json"], { cwd });
      expect(second.code).toBe(0);
      expect(second.stdout).toBe("This script has run 2 times.\n2\n");
      expect(JSON.parse(readFileSync(join(cwd, "counter.json"), "utf8"))).toEqual({ count: 2 });
      // The write went through a temporary file and a rename: nothing else is left behind.
      expect(readdirSync(cwd)).toEqual(["counter.json"]);
    } finally {
      done();
    }
  });

  it("keeps the keys the script did not touch and removes the ones it deleted", async () => {
    const { dir: cwd, cleanup: done } = tempDir({ "state.json": '{"keep":"yes","drop":1}' });
    try {
      const script = 'store("drop", undefined);\nstore("copy", load("keep"));\nreturn load("drop");';
      const result = await runCli(["run", "-", "--store", "state.json"], { cwd, input: script });
      expect(result.code).toBe(0);
      expect(result.stdout).toBe("");
      expect(JSON.parse(readFileSync(join(cwd, "state.json"), "utf8"))).toEqual({ keep: "yes", copy: "yes" });
    } finally {
      done();
    }
  });

  it("leaves the file untouched when the run fails", async () => {
    const original = '{ "count":   7 }\n';
    const { dir: cwd, cleanup: done } = tempDir({ "state.json": original });
    try {
      const thrown = await runCli(["run", "-", "--store", "state.json"], {
        cwd,
        input: 'store("count", load("count") + 1);\nthrow new Error("after the store");',
      });
      expect(thrown.code).toBe(1);
      expect(thrown.stderr).toContain("after the store");
      const timedOut = await runCli(["run", "-", "--store", "state.json", "--timeout", "200"], {
        cwd,
        input: 'store("count", 0);\nwhile (true) {}',
      });
      expect(timedOut.code).toBe(1);
      expect(readFileSync(join(cwd, "state.json"), "utf8")).toBe(original);
      expect(readdirSync(cwd)).toEqual(["state.json"]);
    } finally {
      done();
    }
  });

  it("does not create a missing file when the run fails", async () => {
    const { dir: cwd, cleanup: done } = tempDir();
    try {
      const result = await runCli(["run", "-", "--store", "new.json"], { cwd, input: 'store("a", 1);\nthrow 1;' });
      expect(result.code).toBe(1);
      expect(existsSync(join(cwd, "new.json"))).toBe(false);
    } finally {
      done();
    }
  });

  it.each([
    ["an array", "[1, 2]", "must hold a JSON object, found an array"],
    ["a string", '"text"', "must hold a JSON object, found a string"],
    ["null", "null", "must hold a JSON object, found null"],
    ["not JSON", "{ count: 1", "is not valid JSON"],
  ])("rejects a store file holding %s with exit 2", async (_what, content, message) => {
    const { dir: cwd, cleanup: done } = tempDir({ "bad.json": content });
    try {
      const result = await runCli(["run", "-", "--store", "bad.json"], { cwd, input: 'store("a", 1);' });
      expect(result.code).toBe(2);
      expect(result.stderr).toContain(`airlock run: --store bad.json ${message}`);
      expect(readFileSync(join(cwd, "bad.json"), "utf8")).toBe(content);
    } finally {
      done();
    }
  });
});

describe("Ctrl-C", () => {
  const interruptWhenReady = (stderr: string, child: ChildProcess) => {
    if (stderr.includes("READY") && !child.killed) child.kill("SIGINT");
  };

  it("aborts a computing script (worker): kind aborted, exit 1", async () => {
    const result = await runCli(["run", "-", "--tools", "tools.mjs"], {
      cwd: dir,
      input: "await tools.ready();\nwhile (true) {}",
      onStderr: interruptWhenReady,
    });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain("airlock: run failed (aborted): The execution was aborted\n");
  });

  it("aborts a script waiting on a tool (inline), and the tool sees its signal", async () => {
    const result = await runCli(["run", "-", "--tools", "tools.mjs", "--isolation", "inline"], {
      cwd: dir,
      input: "await tools.ready();\nawait tools.wait_for_abort();",
      onStderr: interruptWhenReady,
    });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain("CANCELLED\n");
    expect(result.stderr).toContain("airlock: run failed (aborted): The execution was aborted\n");
  });
});

describe("serve --http: an address it cannot bind", () => {
  it("exits 2 naming --http when the port is taken, without starting the upstream servers", async () => {
    const upstream = { command: process.execPath, args: ["-e", 'require("fs").writeFileSync("started", "")'] };
    const { dir: cwd, cleanup: done } = tempDir({ "mcp.json": JSON.stringify({ mcpServers: { upstream } }) });
    const taken = createServer();
    try {
      await new Promise<void>((listening) => taken.listen(0, "127.0.0.1", listening));
      const { port } = taken.address() as AddressInfo;
      const result = await runCli(["serve", "--config", "mcp.json", "--http", String(port)], { cwd });
      expect(result.code).toBe(2);
      expect(result.stderr).toContain(`airlock serve: --http ${port}: address in use\n`);
      expect(result.stderr).not.toMatch(/\n {4}at /);
      expect(existsSync(join(cwd, "started"))).toBe(false);
    } finally {
      taken.close();
      done();
    }
  });

  it("exits 2 naming --host when the host does not resolve", async () => {
    const { dir: cwd, cleanup: done } = tempDir({ "mcp.json": '{ "mcpServers": {} }' });
    try {
      const result = await runCli(["serve", "--config", "mcp.json", "--http", "0", "--host", "not a host"], { cwd });
      expect(result.code).toBe(2);
      expect(result.stderr).toContain("airlock serve: --host not a host: ");
      expect(result.stderr).not.toMatch(/\n {4}at /);
    } finally {
      done();
    }
  });
});

/** Runs the CLI with its stdin or stdout bound to a file descriptor, as `<file` or `>file` in a shell would. */
function runWithFds(
  args: string[],
  fds: { stdin?: number; stdout?: number },
  cwd = REPO_ROOT,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [CLI, ...args], {
    cwd,
    env: { ...process.env, NODE_OPTIONS: "" },
    stdio: [fds.stdin ?? "ignore", fds.stdout ?? "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout?.setEncoding("utf8").on("data", (chunk: string) => {
    stdout += chunk;
  });
  child.stderr?.setEncoding("utf8").on("data", (chunk: string) => {
    stderr += chunk;
  });
  return new Promise((done) => child.on("close", (code) => done({ code, stdout, stderr })));
}

describe("run: a script that cannot be read", () => {
  it("exits 2 when stdin cannot be read", async () => {
    const { dir: cwd, cleanup: done } = tempDir({ "in.txt": "" });
    // Opened for writing only: reading it fails with EBADF, as `airlock run - 0>file` does.
    const fd = openSync(join(cwd, "in.txt"), "w");
    try {
      const result = await runWithFds(["run", "-"], { stdin: fd }, cwd);
      expect(result.code).toBe(2);
      expect(result.stderr).toContain("airlock run: cannot read the script from stdin: EBADF");
      expect(result.stderr).not.toMatch(/\n {4}at /);
    } finally {
      closeSync(fd);
      done();
    }
  });

  it("exits 2 for a script longer than a string can be, from a file or from stdin", async () => {
    const { dir: cwd, cleanup: done } = tempDir();
    // A sparse file: 600 MiB of zero bytes that take no disk space.
    const big = join(cwd, "big.js");
    writeFileSync(big, "");
    truncateSync(big, 600 * 1024 * 1024);
    const fd = openSync(big, "r");
    try {
      const file = await runCli(["run", "big.js"], { cwd });
      expect(file.code).toBe(2);
      expect(file.stderr).toContain("airlock run: cannot read script file big.js: it is too large");
      const stdin = await runWithFds(["run", "-"], { stdin: fd }, cwd);
      expect(stdin.code).toBe(2);
      expect(stdin.stderr).toContain("airlock run: cannot read the script from stdin: it is too large");
      expect(stdin.stderr).not.toMatch(/\n {4}at /);
    } finally {
      closeSync(fd);
      done();
    }
  });
});

describe("run --store: the file it writes", () => {
  it("writes through a symlink to its target and keeps the file's mode", async () => {
    const { dir: cwd, cleanup: done } = tempDir({ "real.json": '{"n":1}' });
    try {
      chmodSync(join(cwd, "real.json"), 0o600);
      symlinkSync("real.json", join(cwd, "link.json"));
      const result = await runCli(["run", "-", "--store", "link.json"], { cwd, input: 'store("n", load("n") + 1);' });
      expect(result.code).toBe(0);
      expect(lstatSync(join(cwd, "link.json")).isSymbolicLink()).toBe(true);
      expect(JSON.parse(readFileSync(join(cwd, "real.json"), "utf8"))).toEqual({ n: 2 });
      expect(statSync(join(cwd, "real.json")).mode & 0o777).toBe(0o600);
    } finally {
      done();
    }
  });

  it("creates the file a dangling symlink points at, and keeps the link", async () => {
    const { dir: cwd, cleanup: done } = tempDir();
    try {
      mkdirSync(join(cwd, "data"));
      symlinkSync("data/state.json", join(cwd, "link.json"));
      symlinkSync("nowhere/state.json", join(cwd, "broken.json"));
      const result = await runCli(["run", "-", "--store", "link.json"], { cwd, input: 'store("n", 1);' });
      expect(result.code).toBe(0);
      // Before, the link itself was replaced by a plain file.
      expect(lstatSync(join(cwd, "link.json")).isSymbolicLink()).toBe(true);
      expect(JSON.parse(readFileSync(join(cwd, "data/state.json"), "utf8"))).toEqual({ n: 1 });
      const broken = await runCli(["run", "-", "--store", "broken.json"], { cwd, input: 'store("n", 1);' });
      expect(broken.code).toBe(2);
      expect(broken.stderr).toContain(
        `--store broken.json: directory ${join(realpathSync(cwd), "nowhere")} (where the link points) does not exist`,
      );
      expect(lstatSync(join(cwd, "broken.json")).isSymbolicLink()).toBe(true);
    } finally {
      done();
    }
  });

  it("refuses a file in a missing directory before the script runs", async () => {
    const { dir: cwd, cleanup: done } = tempDir({ "tools.mjs": TOOLS });
    try {
      const result = await runCli(["run", "-", "--tools", "tools.mjs", "--store", "nowhere/state.json"], {
        cwd,
        input: 'await tools.ready();\nstore("a", 1);',
      });
      expect(result.code).toBe(2);
      expect(result.stderr).toContain("airlock run: --store nowhere/state.json: directory nowhere does not exist");
      // The script, and so its tools, never ran.
      expect(result.stderr).not.toContain("READY");
      expect(result.stderr).not.toContain(".tmp");
    } finally {
      done();
    }
  });
});

describe("--tools: a module whose top-level await never settles", () => {
  it.each([{ command: ["run", "-"] }, { command: ["declarations"] }])(
    "airlock $command.0 exits 2 naming it",
    async ({ command }) => {
      const { dir: cwd, cleanup: done } = tempDir({ "stuck.mjs": "await new Promise(() => {});\nexport default [];" });
      try {
        const result = await runCli([...command, "--tools", "stuck.mjs"], { cwd, input: "return 1;" });
        expect(result.code).toBe(2);
        expect(result.stderr).toContain(
          "--tools stuck.mjs: the module failed to load: its top-level await never settles",
        );
      } finally {
        done();
      }
    },
  );
});

describe("declarations --tools: the tool list checks of run", () => {
  it.each([
    ["duplicate.mjs", '--tools duplicate.mjs: a tool named "twin" is already registered'],
    ["same-id.mjs", '--tools same-id.mjs: tools "a b" and "a_b" would both be tools.a_b; rename one of them'],
  ])("%s: run and declarations refuse it alike, with exit 2", async (module, message) => {
    const [run, declarations] = await Promise.all([
      runCli(["run", "echo.js", "--tools", module], { cwd: dir }),
      runCli(["declarations", "--tools", module], { cwd: dir }),
    ]);
    for (const result of [run, declarations]) {
      expect(result.code).toBe(2);
      expect(result.stdout).toBe("");
      expect(result.stderr).toContain(message);
    }
  });
});

describe("stdout that cannot be written", () => {
  it.skipIf(!existsSync("/dev/full"))("prints one line and exits 1 when stdout is full", async () => {
    const fd = openSync("/dev/full", "w");
    try {
      const result = await runWithFds(["run", "-", "--help"], { stdout: fd });
      expect(result.code).toBe(1);
      expect(result.stderr).toBe("airlock: cannot write to stdout: ENOSPC: no space left on device, write\n");
    } finally {
      closeSync(fd);
    }
  });
});

describe("run: max_output_tokens on the options line", () => {
  const script = (max: number) =>
    `// @options: {"max_output_tokens": ${max}}\nfor (let i = 0; i < 100; i++) text("line " + i);\nreturn "the end";`;

  it("cuts the printed output to that many tokens, with a note", async () => {
    const result = await runCli(["run", "-"], { input: script(20) });
    expect(result.code).toBe(0);
    expect(result.stdout.startsWith("line 0\nline 1\n")).toBe(true);
    expect(result.stdout).not.toContain("the end");
    expect(result.stdout).toMatch(
      /\n\[Output cut: the text above is the first 20 tokens \(o200k_base\) of \d+ characters\./,
    );
  });

  it("leaves output within the budget as it is", async () => {
    const result = await runCli(["run", "-"], { input: script(100_000) });
    expect(result.code).toBe(0);
    expect(result.stdout).toBe(`${Array.from({ length: 100 }, (_, i) => `line ${i}\n`).join("")}the end\n`);
  });
});

describe("repeated flags and help help", () => {
  it.each([
    [["run", "echo.js", "--timeout", "5000", "--timeout", "1"], "airlock run: --timeout was given twice"],
    [["run", "echo.js", "--tools=a.mjs", "--tools", "b.mjs"], "airlock run: --tools was given twice"],
    [["declarations", "--tools", "a.mjs", "--tools", "b.mjs"], "airlock declarations: --tools was given twice"],
  ])("%j exits 2", async (args, message) => {
    const result = await runCli(args, { cwd: dir });
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(message);
  });

  it("help help prints the general help", async () => {
    const [help, helpHelp] = await Promise.all([runCli(["help"]), runCli(["help", "help"])]);
    expect(helpHelp.code).toBe(0);
    expect(helpHelp.stdout).toBe(help.stdout);
  });
});
