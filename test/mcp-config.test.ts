// biome-ignore-all lint/suspicious/noTemplateCurlyInString: config values spell ${VAR} references on purpose
/**
 * The config formats the gateway reads: the `mcpServers` one of Claude Desktop and others, and VS Code's `servers`
 * (with `inputs`, `envFile` and its `${env:…}`, `${userHome}` and `${workspaceFolder}` variables), checked with clear
 * errors, and run against a real server.
 */
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { loadMcpConfig, McpToolset, parseMcpConfig } from "airlock-codemode/mcp";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { configError, MEMORY, tempFolder } from "./fixtures/mcp/servers.ts";

let folder: { dir: string; cleanup: () => void };

beforeAll(() => {
  folder = tempFolder();
});

afterAll(() => folder?.cleanup());

describe("VS Code's servers format", () => {
  it("takes servers, inputs and ${env:VAR} beside mcpServers", () => {
    const parsed = parseMcpConfig(
      {
        inputs: [{ type: "promptString", id: "token", description: "API token", password: true }],
        servers: {
          files: { type: "stdio", command: "npx", args: ["-y", "server-filesystem", "${userHome}/projects"] },
          remote: { type: "http", url: "https://example.com/mcp", headers: { Authorization: "Bearer ${env:TOKEN}" } },
        },
        mcpServers: { memory: { command: "npx", args: ["-y", "server-memory"] } },
      },
      { env: { TOKEN: "s3cret" }, baseDir: folder.dir },
    );
    expect(parsed.warnings).toEqual([]);
    expect(parsed.servers.map((server) => server.name)).toEqual(["memory", "files", "remote"]);
    const files = parsed.servers.find((server) => server.name === "files");
    expect(files).toMatchObject({ transport: "stdio", args: ["-y", "server-filesystem", `${homedir()}/projects`] });
    expect(parsed.servers.find((server) => server.name === "remote")).toMatchObject({
      transport: "http",
      headers: { Authorization: "Bearer s3cret" },
    });
  });

  it("refuses what it cannot do, naming the server and field", () => {
    expect(configError({ servers: { gh: { command: "x", args: ["${input:token}"] } } })).toMatchObject({
      server: "gh",
      field: "args[0]",
      message: expect.stringContaining(
        "uses ${input:token}, an input VS Code prompts for; Airlock does not prompt: set an environment variable and write ${env:NAME}",
      ),
    });
    expect(configError({ servers: { gh: { command: "x", args: ["${config:editor.fontSize}"] } } }).message).toContain(
      "uses ${config:editor.fontSize}, which Airlock does not know",
    );
    expect(configError({ servers: { gh: { command: "x", env: { T: "${env:UNSET_HERE}" } } } }).message).toContain(
      "uses ${env:UNSET_HERE}, which is not set in the environment",
    );
    expect(configError({ servers: { gh: { type: "sse", url: "http://x/sse" } } }).message).toMatch(
      /"sse" is not supported/,
    );
    expect(configError({ servers: { a: { command: "x" } }, mcpServers: { a: { command: "y" } } })).toMatchObject({
      server: "a",
      message: 'mcp.json: server "a" is in both "mcpServers" and "servers"',
    });
    expect(configError({ servers: [] }).message).toMatch(
      /"servers" must be an object of servers by name, got an array/,
    );
    expect(configError({ Servers: {} }).message).toMatch(/unknown field "Servers"; did you mean "servers"\?/);
    expect(configError({ servers: { gh: { command: "x", envFile: "missing.env" } } }, {})).toMatchObject({
      server: "gh",
      field: "envFile",
      message: expect.stringMatching(/"envFile" \S+missing\.env does not exist/),
    });
  });

  it("reads a .vscode/mcp.json with its envFile and ${workspaceFolder}, and runs its server", async () => {
    const workspace = join(folder.dir, "workspace");
    mkdirSync(join(workspace, ".vscode"), { recursive: true });
    const memoryFile = join(workspace, "memory.jsonl");
    writeFileSync(
      join(workspace, ".env"),
      `# the memory server's file\nexport MEMORY_FILE_PATH="${memoryFile}"\nOTHER=from-file # a comment\nKEPT=file\n`,
    );
    writeFileSync(
      join(workspace, ".vscode", "mcp.json"),
      JSON.stringify({
        servers: {
          memory: {
            type: "stdio",
            command: process.execPath,
            args: [MEMORY],
            envFile: "${workspaceFolder}/.env",
            env: { KEPT: "config" },
            cwd: ".vscode",
          },
        },
      }),
    );
    const config = await loadMcpConfig(join(workspace, ".vscode", "mcp.json"));
    const memory = config.servers[0];
    expect(memory).toMatchObject({
      transport: "stdio",
      cwd: join(workspace, ".vscode"),
      env: { MEMORY_FILE_PATH: memoryFile, OTHER: "from-file", KEPT: "config" },
    });
    const toolset = await McpToolset.connect(config);
    try {
      const create = toolset.tools.find((tool) => tool.name === "memory__create_entities");
      await create?.execute(
        { entities: [{ name: "Oslo", entityType: "city", observations: [] }] },
        { signal: new AbortController().signal },
      );
      // The server wrote where the envFile told it to.
      expect(readFileSync(memoryFile, "utf8")).toContain('"name":"Oslo"');
    } finally {
      await toolset.close();
    }
  });
});

describe("hostile config text", () => {
  it("expands variables and reads an envFile in linear time, as before on ordinary text", () => {
    const env = { HOME_DIR: "/h", a: "A" };
    const config = (arg: string) =>
      parseMcpConfig({ mcpServers: { s: { command: "x", args: [arg] } } }, { env, source: "mcp.json" }).servers[0];
    expect(config("$${HOME_DIR}/x ${HOME_DIR} $$${HOME_DIR} ${MISSING:-fallback} ${env:a} ${ a}")).toMatchObject({
      args: ["${HOME_DIR}/x /h $${HOME_DIR} fallback A ${ a}"],
    });
    const started = Date.now();
    // 40,000 "${a:-" without a closing brace took a minute: every "${" was tried to the text's end.
    for (const hostile of [
      "${a:-".repeat(40_000),
      "${:".repeat(40_000),
      `\${a:b${"x".repeat(100_000)}:${"${a:b:".repeat(20_000)}`,
    ]) {
      expect(config(hostile)).toMatchObject({ args: [hostile] });
    }
    const envFile = join(folder.dir, "spaces.env");
    // A value with 200,000 spaces before its end took two minutes: `/\s+#.*$/` tried every space.
    writeFileSync(envFile, `SPACED=a${" ".repeat(200_000)}b\nCOMMENTED=value   # a comment\nHASH=a#b\n`);
    const fromFile = parseMcpConfig(
      { servers: { s: { command: "x", envFile } } },
      { env: {}, source: join(folder.dir, "mcp.json") },
    ).servers[0];
    expect(fromFile).toMatchObject({
      env: { SPACED: `a${" ".repeat(200_000)}b`, COMMENTED: "value", HASH: "a#b" },
    });
    expect(Date.now() - started).toBeLessThan(10_000);
  });
});

describe("the approval field", () => {
  it("is never by default, and takes always, never or tool names, on stdio and HTTP servers", () => {
    const parsed = parseMcpConfig({
      mcpServers: {
        plain: { command: "x" },
        all: { command: "x", approval: "always" },
        none: { url: "http://127.0.0.1:1/mcp", approval: "never" },
        some: { url: "http://127.0.0.1:1/mcp", approval: ["send", "send", "some__delete"] },
      },
    });
    expect(parsed.warnings).toEqual([]);
    expect(parsed.servers.map((server) => [server.name, server.approval])).toEqual([
      ["plain", "never"],
      ["all", "always"],
      ["none", "never"],
      ["some", ["send", "some__delete"]],
    ]);
  });

  it("refuses any other value, naming the server, the field and the value", () => {
    expect(configError({ mcpServers: { mail: { command: "x", approval: "ask" } } })).toMatchObject({
      server: "mail",
      field: "approval",
      message:
        'mcp.json: server "mail": "approval" must be "always", "never" or an array of tool names (whose calls a person approves), got the string "ask"',
    });
    expect(configError({ servers: { mail: { type: "http", url: "http://x/mcp", approval: {} } } })).toMatchObject({
      field: "approval",
      message: expect.stringContaining("got an object"),
    });
    expect(configError({ mcpServers: { mail: { command: "x", approval: ["send", ""] } } })).toMatchObject({
      server: "mail",
      field: "approval[1]",
      message: 'mcp.json: server "mail": "approval[1]" must be a tool name (a non-empty string), got the string ""',
    });
    expect(configError({ mcpServers: { mail: { command: "x", APPROVAL: "always" } } })).toMatchObject({
      server: "mail",
      field: "APPROVAL",
      message: expect.stringContaining('unknown field "APPROVAL"; did you mean "approval"?'),
    });
  });
});
