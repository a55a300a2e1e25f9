/**
 * `airlock run --config` and `airlock declarations --config`: a script against real MCP servers' tools from the shell,
 * and exactly what a model would see of them through `airlock serve`.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { everything, filesystem } from "./fixtures/mcp/servers.ts";
import { assertCliBuilt, CLI, runCli, tempDir } from "./helpers/cli.ts";

let dir = "";
let cleanup = () => {};
beforeAll(() => {
  assertCliBuilt();
  ({ dir, cleanup } = tempDir({ "note.txt": "a note on disk\n" }));
  writeFileSync(
    join(dir, "mcp.json"),
    JSON.stringify({
      mcpServers: {
        files: filesystem(dir),
        everything: { ...everything(), tools: ["get-sum", "echo"] },
      },
    }),
  );
});
afterAll(() => cleanup());

const options = { timeoutMs: 60_000 };

describe("airlock run --config", () => {
  it("runs a script against the servers' tools, named <server>__<tool>", async () => {
    writeFileSync(
      join(dir, "both.js"),
      [
        `const note = await tools.files__read_text_file({ path: ${JSON.stringify(join(dir, "note.txt"))} });`,
        "text(note.content.trim());",
        "return await tools.everything__get_sum({ a: 20, b: 22 });",
      ].join("\n"),
    );
    const result = await runCli(["run", "both.js", "--config", "mcp.json"], { cwd: dir, ...options });
    expect(result.stderr).toBe("");
    expect(result.code).toBe(0);
    expect(result.stdout).toBe("a note on disk\nThe sum of 20 and 22 is 42.\n");
  }, 70_000);

  it("keeps only read-only tools with --read-only", async () => {
    const script = "return ALL_TOOLS.map((t) => t.name).filter((n) => n.startsWith('files__')).sort();";
    const [all, readOnly] = await Promise.all([
      runCli(["run", "-", "--config", "mcp.json", "--json"], { cwd: dir, input: script, ...options }),
      runCli(["run", "-", "--config", "mcp.json", "--json", "--read-only"], { cwd: dir, input: script, ...options }),
    ]);
    const names = (result: { stdout: string }) => (JSON.parse(result.stdout) as { value: string[] }).value;
    expect(names(all)).toContain("files__write_file");
    expect(names(readOnly)).toContain("files__read_text_file");
    expect(names(readOnly)).not.toContain("files__write_file");
  }, 70_000);

  it("combines them with --tools", async () => {
    writeFileSync(join(dir, "tools.mjs"), 'export default [{ name: "twice", execute: ({ n }) => n * 2 }];');
    const result = await runCli(["run", "-", "--config", "mcp.json", "--tools", "tools.mjs"], {
      cwd: dir,
      input: "return [await tools.twice({ n: 21 }), await tools.everything__echo({ message: 'hi' })];",
      ...options,
    });
    expect(result.code).toBe(0);
    expect(JSON.parse(result.stdout)).toEqual([42, "Echo: hi"]);
  }, 70_000);

  it("is bad usage for a config that is wrong, naming the file and the field", async () => {
    writeFileSync(join(dir, "bad.json"), JSON.stringify({ mcpServers: { x: { command: "node", readonly: true } } }));
    const result = await runCli(["run", "-", "--config", "bad.json"], { cwd: dir, input: "return 1" });
    expect(result.code).toBe(2);
    expect(result.stderr).toContain("airlock run: --config bad.json: ");
    expect(result.stderr).toContain('unknown field "readonly"; did you mean "readOnly"?');
    const missing = await runCli(["run", "-", "--config", "nowhere.json"], { cwd: dir, input: "return 1" });
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain("config file not found");
    const readOnly = await runCli(["run", "-", "--read-only"], { cwd: dir, input: "return 1" });
    expect(readOnly.code).toBe(2);
    expect(readOnly.stderr).toContain("airlock run: --read-only needs --config <mcp.json>");
  });

  it("refuses a call that needs a person's approval (no client to ask), and a bad approval field", async () => {
    writeFileSync(
      join(dir, "gated.json"),
      JSON.stringify({
        mcpServers: { everything: { ...everything(), tools: ["get-sum", "echo"], approval: ["get-sum"] } },
      }),
    );
    const result = await runCli(["run", "-", "--config", "gated.json", "--json"], {
      cwd: dir,
      input: [
        "let refused;",
        "try { await tools.everything__get_sum({ a: 1, b: 2 }); } catch (e) { refused = [e.code, e.message]; }",
        "return [refused, await tools.everything__echo({ message: 'ungated' })];",
      ].join("\n"),
      ...options,
    });
    expect(result.code).toBe(0);
    expect((JSON.parse(result.stdout) as { value: unknown }).value).toEqual([
      [
        "GUARD_BLOCKED",
        'tools.everything__get_sum needs a person\'s approval (the "approval" field of server "everything"), and this run has no MCP client to ask: only the gateway\'s execute asks, through MCP elicitation; the call was not sent',
      ],
      "Echo: ungated",
    ]);
    writeFileSync(
      join(dir, "bad-approval.json"),
      JSON.stringify({ mcpServers: { x: { command: "node", approval: "yes" } } }),
    );
    for (const command of ["run", "serve"]) {
      const bad = await runCli(
        command === "run" ? ["run", "-", "--config", "bad-approval.json"] : ["serve", "--config", "bad-approval.json"],
        { cwd: dir, input: "return 1" },
      );
      expect(bad.code).toBe(2);
      expect(bad.stderr).toContain(
        'server "x": "approval" must be "always", "never" or an array of tool names (whose calls a person approves), got the string "yes"',
      );
    }
    const badDeadline = await runCli(["serve", "--config", "gated.json", "--approval-timeout", "0"], { cwd: dir });
    expect(badDeadline.code).toBe(2);
    expect(badDeadline.stderr).toContain(
      '--approval-timeout must be a positive integer number of milliseconds up to 2147483647, got "0"',
    );
  }, 70_000);

  it("fails with exit status 1 when a server does not start, with what it said", async () => {
    writeFileSync(
      join(dir, "dies.json"),
      JSON.stringify({
        mcpServers: {
          dies: { command: process.execPath, args: ["-e", "console.error('no such database'); process.exit(3)"] },
        },
      }),
    );
    const result = await runCli(["run", "-", "--config", "dies.json"], { cwd: dir, input: "return 1", ...options });
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/^airlock run: .*"dies".*\n/);
    expect(result.stderr).toContain("no such database");
    expect(result.stdout).toBe("");
  }, 70_000);
});

describe("airlock declarations --config", () => {
  it("prints exactly the tool list and instructions a client gets from airlock serve", async () => {
    const printed = await runCli(["declarations", "--config", "mcp.json", "--json"], { cwd: dir, ...options });
    expect(printed.code).toBe(0);
    const client = new Client({ name: "test", version: "1" });
    await client.connect(
      new StdioClientTransport({
        command: process.execPath,
        args: [CLI, "serve", "--config", "mcp.json"],
        cwd: dir,
        stderr: "ignore",
      }),
    );
    try {
      const served = { instructions: client.getInstructions(), tools: (await client.listTools()).tools };
      expect(JSON.parse(printed.stdout)).toEqual(served);
      expect(served.tools.map((tool) => tool.name)).toEqual(["search", "describe", "execute"]);
    } finally {
      await client.close();
    }
  }, 70_000);

  it("shows the declarations and limits in execute's description, as text without --json", async () => {
    const result = await runCli(["declarations", "--config", "mcp.json", "--timeout", "9000"], {
      cwd: dir,
      ...options,
    });
    expect(result.code).toBe(0);
    expect(result.stderr).toBe("");
    expect(result.stdout).toMatch(/^Instructions:\nAirlock code-mode gateway\. \d+ tools of 2 MCP servers/);
    expect(result.stdout).toContain("\nTool execute (Run a program against the tools):\n");
    expect(result.stdout).toContain("limits here: 9000 ms, 20000 tokens");
    expect(result.stdout).toContain("everything__get_sum(args: {");
    expect(result.stdout).toContain("Input schema:\n{");
  }, 70_000);

  it("refuses flags that belong to the other form", async () => {
    const both = await runCli(["declarations", "--config", "mcp.json", "--tools", "tools.mjs"], { cwd: dir });
    expect([both.code, both.stderr.split("\n")[0]]).toEqual([
      2,
      "airlock declarations: give --tools <module> or --config <mcp.json>, not both",
    ]);
    const json = await runCli(["declarations", "--tools", "tools.mjs", "--json"], { cwd: dir });
    expect([json.code, json.stderr.split("\n")[0]]).toEqual([
      2,
      "airlock declarations: --json needs --config <mcp.json>",
    ]);
    const none = await runCli(["declarations"], { cwd: dir });
    expect([none.code, none.stderr.split("\n")[0]]).toEqual([
      2,
      "airlock declarations: --tools <module> or --config <mcp.json> is required",
    ]);
  });
});
