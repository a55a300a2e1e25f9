/** The CLI's source handling: the options line, --ts, and `airlock declarations`. */
import { describe, expect, it } from "vitest";
import { REPO_ROOT, runCli } from "./helpers/cli.ts";

describe("airlock run and the source format", () => {
  it("honours timeout_ms from the options line", async () => {
    const result = await runCli(["run", "-"], { input: '// @options: {"timeout_ms": 150}\nwhile (true) {}' });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain("timed out after 150 ms");
  });

  it("keeps the smaller of --timeout and the options line", async () => {
    const result = await runCli(["run", "-", "--timeout", "120"], {
      input: '// @options: {"timeout_ms": 60000}\nwhile (true) {}',
    });
    expect(result.stderr).toContain("timed out after 120 ms");
  });

  it("fails a script with a bad options line, naming the rule", async () => {
    const result = await runCli(["run", "-"], { input: '// @options: {"timeout": 5}\nreturn 1' });
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/unknown field.*timeout/i);
  });

  it("keeps stack lines of the script as written after the options line", async () => {
    const result = await runCli(["run", "-"], { input: '// @options: {"timeout_ms": 5000}\n\nnull.x;' });
    expect(result.stderr).toContain("<stdin>:3:");
  });

  it("runs TypeScript with --ts and refuses it without", async () => {
    const code = "const n: number = 20;\nreturn n + 22;";
    const ts = await runCli(["run", "-", "--ts"], { input: code });
    expect([ts.code, ts.stdout.trim()]).toEqual([0, "42"]);
    const js = await runCli(["run", "-"], { input: code });
    expect(js.code).toBe(1);
    expect(js.stderr).toContain("SyntaxError");
  });
});

describe("airlock declarations", () => {
  it("prints the declarations of a tools module", async () => {
    const result = await runCli(["declarations", "--tools", "examples/tools.mjs"], { cwd: REPO_ROOT });
    expect(result.code).toBe(0);
    expect(result.stdout).toMatch(/^declare const tools: \{\n {2}\/\*\* Add two numbers\. \*\/\n {2}add\(args: \{/);
    expect(result.stdout).toContain("read_file(args: {\n    path: string;\n  }): Promise<string>;");
  });

  it("prints a compact index past --index-threshold", async () => {
    const result = await runCli(["declarations", "--tools", "examples/tools.mjs", "--index-threshold", "2"], {
      cwd: REPO_ROOT,
    });
    expect(result.code).toBe(0);
    expect(result.stdout).not.toContain("path: string;");
    expect(result.stdout).toMatch(/weather/);
  });

  it("needs --tools", async () => {
    const result = await runCli(["declarations"]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain("--tools <module> or --config <mcp.json> is required");
  });
});
