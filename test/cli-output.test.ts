/**
 * What `airlock run` shows as a script runs: output as the script produces it, a failure named by the script's file
 * with the failing line and a caret, an empty script as bad usage, and progress only on a terminal.
 */
import { spawn, spawnSync } from "node:child_process";
import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { everything } from "./fixtures/mcp/servers.ts";
import { assertCliBuilt, CLI, runCli, tempDir } from "./helpers/cli.ts";
import { findOnPath } from "./helpers/system-tools.ts";

/**
 * `released` resolves once the file `released` exists (the test creates it when it has seen the script's first line
 * on stdout), or gives up after 20 s: a CLI that printed only at the end would never release it.
 */
const TOOLS = `
import { existsSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
export default [{
  name: "released",
  async execute() {
    for (let i = 0; i < 1000; i++) {
      if (existsSync("released")) return "released";
      await sleep(20);
    }
    return "never released";
  },
}];
`;

let dir = "";
let cleanup = () => {};
beforeAll(() => {
  assertCliBuilt();
  ({ dir, cleanup } = tempDir({
    "tools.mjs": TOOLS,
    "wait.js": 'console.log("first");\nconsole.log(await tools.released());\nreturn "end";',
    "hello.js": 'text("hello");\nconst o = {};\nconst y = o.missing.deeper;\n',
    "tabs.js": "function f() {\n\t\tnope();\n}\nf();\n",
    "long.js": `const s = "${"x".repeat(300)}"; const t = s + missing;\n`,
    "typed.ts": "type T = { n?: { m: number } };\nconst t: T = {};\nconst n: number = 1; const m: number = t.n.m;\n",
    "blank.js": "  \n\n",
  }));
});
afterAll(() => cleanup());

describe("airlock run prints output as the script produces it", () => {
  it("shows the first line while the script still waits on a tool", async () => {
    const released = join(dir, "released");
    const stdout = await new Promise<string>((done) => {
      const child = spawn(process.execPath, [CLI, "run", "wait.js", "--tools", "tools.mjs"], { cwd: dir });
      let out = "";
      child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
        out += chunk;
        if (out.includes("first\n") && !existsSync(released)) writeFileSync(released, "");
      });
      child.on("close", () => done(out));
    });
    expect(stdout).toBe("first\nreleased\nend\n");
  }, 40_000);

  it("still prints one result object with --json", async () => {
    const { dir: cwd, cleanup: done } = tempDir({
      "tools.mjs": TOOLS,
      "wait.js": 'console.log("first");\nreturn await tools.released();',
      released: "",
    });
    try {
      const result = await runCli(["run", "wait.js", "--tools", "tools.mjs", "--json"], { cwd });
      expect(result.code).toBe(0);
      expect(JSON.parse(result.stdout)).toMatchObject({
        ok: true,
        value: "released",
        output: [{ type: "text", text: "first", console: true }],
      });
    } finally {
      done();
    }
  });
});

describe("a failed script names its file and shows the failing line", () => {
  it("hello.js:3:11, the line and a caret under the column, and the stack in the script's terms", async () => {
    const result = await runCli(["run", "hello.js"], { cwd: dir });
    expect(result.code).toBe(1);
    expect(result.stdout).toBe("hello\n");
    expect(result.stderr).toBe(
      [
        "airlock: run failed (script): TypeError: cannot read property 'deeper' of undefined (line 3: const y = o.missing.deeper;)",
        "hello.js:3:11",
        "  3 | const y = o.missing.deeper;",
        "    |           ^",
        "    at <anonymous> (hello.js:3:11)",
        "",
      ].join("\n"),
    );
  });

  it("names a script from stdin <stdin>", async () => {
    const result = await runCli(["run", "-"], { cwd: dir, input: "\n  null.x;" });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain("<stdin>:2:");
    expect(result.stderr).toContain("\n  2 |   null.x;\n");
    expect(result.stderr).not.toContain("codemode.js");
  });

  it("keeps tabs under the caret, so that it stands under the column", async () => {
    const result = await runCli(["run", "tabs.js"], { cwd: dir });
    expect(result.stderr).toContain("tabs.js:2:3\n  2 | \t\tnope();\n    | \t\t^\n    at f (tabs.js:2:3)\n");
  });

  it("shows a long line around the column", async () => {
    const result = await runCli(["run", "long.js"], { cwd: dir });
    const [, shown, caret] = /\n {2}1 \| (.*)\n {4}\| ( *)\^\n/.exec(result.stderr) ?? [];
    expect(shown?.startsWith("…")).toBe(true);
    expect(shown?.length).toBeLessThanOrEqual(122);
    // The caret stands under the name that is not defined.
    expect(shown?.slice(caret?.length ?? 0).startsWith("missing")).toBe(true);
  });

  it("points into TypeScript as written with --ts", async () => {
    const result = await runCli(["run", "typed.ts", "--ts"], { cwd: dir });
    expect(result.code).toBe(1);
    const line = "const n: number = 1; const m: number = t.n.m;";
    const column = line.indexOf("t.n.m") + 1;
    expect(result.stderr).toContain(`typed.ts:3:${column}\n  3 | ${line}\n    | ${" ".repeat(column - 1)}^\n`);
  });

  it("names the file in the stack that --json prints", async () => {
    const result = await runCli(["run", "hello.js", "--json"], { cwd: dir });
    const parsed = JSON.parse(result.stdout) as { error: { stack: string } };
    expect(parsed.error.stack).toContain("(hello.js:3:11)");
    expect(parsed.error.stack).not.toContain("codemode.js");
  });
});

describe("an empty script is bad usage", () => {
  it("exits 2 for empty stdin, saying how to pass a script", async () => {
    const result = await runCli(["run", "-"], { cwd: dir, input: "" });
    expect(result.code).toBe(2);
    expect(result.stderr).toBe(
      'airlock run: no script on stdin: pipe one in, or pass a file\nRun "airlock run --help" for usage.\n',
    );
  });

  it("exits 2 for a file with nothing but blank lines", async () => {
    const result = await runCli(["run", "blank.js"], { cwd: dir });
    expect(result.code).toBe(2);
    expect(result.stderr).toContain("airlock run: script file blank.js is empty\n");
  });
});

/** `script` (util-linux) runs a command on a pseudo-terminal, as a person at a terminal would. */
const scriptCommand = findOnPath("script");
if (scriptCommand === undefined) {
  process.stdout.write(
    "skipped the terminal progress test: script is not installed; install it: apt-get install bsdutils\n",
  );
}
describe("progress", () => {
  const config = () => JSON.stringify({ mcpServers: { everything: { ...everything(), tools: ["get-sum"] } } });
  it.runIf(scriptCommand !== undefined)(
    "is shown on a terminal while the upstream servers connect, then erased",
    () => {
      writeFileSync(join(dir, "mcp.json"), config());
      writeFileSync(join(dir, "sum.js"), "return await tools.everything__get_sum({ a: 2, b: 3 });");
      const command = `${process.execPath} ${CLI} run sum.js --config mcp.json`;
      const result = spawnSync(scriptCommand as string, ["-qfec", command, "/dev/null"], {
        cwd: dir,
        encoding: "utf8",
        timeout: 60_000,
      });
      expect(result.status, result.stdout).toBe(0);
      expect(result.stdout).toContain("\r\x1b[2Kconnecting to 1 MCP server (everything)…\r\x1b[2K");
      expect(result.stdout.trimEnd().endsWith("The sum of 2 and 3 is 5.")).toBe(true);
    },
    70_000,
  );

  it("is not written to a pipe", async () => {
    writeFileSync(join(dir, "mcp.json"), config());
    writeFileSync(join(dir, "sum.js"), "return await tools.everything__get_sum({ a: 2, b: 3 });");
    const result = await runCli(["run", "sum.js", "--config", "mcp.json"], { cwd: dir, timeoutMs: 60_000 });
    expect(result.code).toBe(0);
    expect(result.stdout).toBe("The sum of 2 and 3 is 5.\n");
    expect(result.stderr).toBe("");
  }, 70_000);
});
