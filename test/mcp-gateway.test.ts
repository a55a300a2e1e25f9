/**
 * `airlock serve`, the code-mode MCP gateway, run from its build (dist/cli/main.js) as a child process in front of
 * real MCP servers, and driven by the official SDK's `Client` over stdio and over Streamable HTTP.
 */
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { PassThrough } from "node:stream";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import { type CallToolResult, ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";
import {
  connectMcpServers,
  MAX_SEARCH_QUERY_CHARS,
  MAX_STDIO_LINE_BYTES,
  MAX_TOOL_NAME_CHARS,
  McpGateway,
  parseMcpConfig,
  serveGatewayHttp,
  serveGatewayStdio,
} from "airlock-codemode/mcp";
import { MAX_TYPESCRIPT_CHARS } from "airlock-codemode/source";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { countTokens } from "../dist/gateway/tokens.js";
import {
  everything,
  filesystem,
  isAlive,
  memory,
  paged,
  REPO_ROOT,
  tempFolder,
  waitFor,
} from "./fixtures/mcp/servers.ts";

const CLI = join(REPO_ROOT, "dist", "cli", "main.js");

let folder: { dir: string; cleanup: () => void };
let configPath = "";

beforeAll(() => {
  folder = tempFolder({ "hello.txt": "hello from the folder\n" });
  configPath = join(folder.dir, "mcp.json");
  writeFileSync(
    configPath,
    JSON.stringify({
      mcpServers: {
        everything: everything(),
        files: filesystem(folder.dir),
        memory: memory(join(folder.dir, "memory.jsonl")),
      },
    }),
  );
});

afterAll(() => folder?.cleanup());

/** Process ids of the children of `pid` (Linux /proc). */
function childrenOf(pid: number): number[] {
  const children: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      if (Number(fields[1]) === pid) children.push(Number(entry));
    } catch {
      // The process ended while it was being read.
    }
  }
  return children;
}

function textOf(result: unknown): string {
  const { content } = result as CallToolResult;
  return content
    .filter((block) => block.type === "text")
    .map((block) => (block as { text: string }).text)
    .join("\n");
}

const INITIALIZE = JSON.stringify({
  jsonrpc: "2.0",
  id: 1,
  method: "initialize",
  params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "raw", version: "1" } },
});

interface RawResponse {
  id?: unknown;
  result?: { content?: unknown; isError?: boolean };
  error?: { code: number; message: string };
}

/** Streams for serveGatewayStdio that a test writes raw lines to and reads the answers of, by id. */
function rawStdio() {
  const stdin = new PassThrough();
  const stdout = new PassThrough();
  const responses: RawResponse[] = [];
  let buffered = "";
  stdout.on("data", (chunk) => {
    const lines = (buffered + chunk).split("\n");
    buffered = lines.pop() ?? "";
    for (const line of lines) responses.push(JSON.parse(line));
  });
  return {
    stdin,
    stdout,
    responses,
    send: (line: string) => stdin.write(`${line}\n`),
    async response(id: unknown): Promise<RawResponse> {
      await waitFor(() => responses.some((r) => r.id === id), 20_000, `the answer to request ${String(id)}`);
      return responses.find((r) => r.id === id) as RawResponse;
    },
  };
}

/** The checks both transports run: list tools, search, describe, execute. */
async function exercise(client: Client) {
  const { tools } = await client.listTools();
  expect(tools.map((tool) => tool.name)).toEqual(["search", "describe", "execute"]);
  const execute = tools.find((tool) => tool.name === "execute");
  expect(execute?.description).toContain("The program is the body of an async function");
  expect(execute?.description).toContain('// @options: {"timeout_ms": 30000, "max_output_tokens": 4000}');
  expect(execute?.description).toMatch(/\(limits here: \d+ ms, \d+ tokens; longer text is cut\)/);
  // 36 tools have more declarations than the description's budget: it carries their signatures, enough to call them.
  expect(execute?.description).toContain("The tools (describe gives a tool's documentation):");
  expect(execute?.description).toContain(
    "  everything__get_sum(args: { a: number; b: number }): Promise<unknown>; // Returns the sum of two numbers\n",
  );
  expect(execute?.description).toContain(
    "  files__read_text_file(args: { path: string; tail?: number; head?: number }): Promise<{ content: string }>;",
  );
  expect(execute?.description).not.toContain("args: unknown");
  expect(await countTokens(execute?.description ?? "")).toBeLessThan(2_500);
  expect(execute?.inputSchema.properties).toHaveProperty("code");
  expect(tools.find((tool) => tool.name === "search")?.annotations?.readOnlyHint).toBe(true);

  const search = await client.callTool({ name: "search", arguments: { query: "add two numbers sum", limit: 3 } });
  expect(search.isError).toBeFalsy();
  expect(textOf(search)).toMatch(/^3 tools match "add two numbers sum", best first/);
  expect(textOf(search)).toContain(
    "tools.everything__get_sum(args: { a: number; b: number; }): Promise<unknown>\n  Returns the sum of two numbers",
  );

  const describeResult = await client.callTool({
    name: "describe",
    arguments: { names: ["everything__get_sum", "tools.files__list_directory"] },
  });
  expect(textOf(describeResult)).toMatch(/^declare const tools: \{\n {2}\/\*\* Returns the sum of two numbers \*\//);
  expect(textOf(describeResult)).toMatch(
    / {2}files__list_directory\(args: \{\n {4}path: string;\n {2}\}\): Promise<\{/,
  );
  const unknown = await client.callTool({ name: "describe", arguments: { names: ["everything__get_summ"] } });
  expect(unknown.isError).toBe(true);
  expect(textOf(unknown)).toMatch(/Unknown tool "everything__get_summ". Did you mean "everything__get_sum"/);

  // TypeScript, the options line, several upstream servers, text, an image and a value.
  const run = await client.callTool({
    name: "execute",
    arguments: {
      code: [
        '// @options: {"timeout_ms": 10000}',
        "interface Weather { temperature: number; conditions: string }",
        'const weather: Weather = await tools.everything__get_structured_content({ location: "Chicago" });',
        `const file = await tools.files__read_text_file({ path: ${JSON.stringify(join(folder.dir, "hello.txt"))} });`,
        'await tools.memory__create_entities({ entities: [{ name: "Oslo", entityType: "city", observations: [] }] });',
        'const graph = await tools.memory__search_nodes({ query: "Oslo" });',
        "const blocks = await tools.everything__get_tiny_image({});",
        'console.log("read", file.content.trim());',
        'image(blocks.find((b: { type: string }) => b.type === "image"));',
        "return { conditions: weather.conditions, cities: graph.entities.map((e: { name: string }) => e.name) };",
      ].join("\n"),
    },
  });
  expect(run.isError, textOf(run)).toBeFalsy();
  const content = run.content as CallToolResult["content"];
  expect(content.map((block) => block.type)).toEqual(["text", "image", "text"]);
  expect(content[0]).toEqual({ type: "text", text: "read hello from the folder" });
  expect(content[1]).toMatchObject({ type: "image", mimeType: "image/png" });
  expect(JSON.parse((content[2] as { text: string }).text)).toEqual({
    conditions: "Light rain / drizzle",
    cities: ["Oslo"],
  });
  // The same run as data, checked by the client against execute's outputSchema.
  expect(execute?.outputSchema?.required).toEqual(["ok", "output", "images", "truncated", "calls"]);
  expect(run.structuredContent).toEqual({
    ok: true,
    value: { conditions: "Light rain / drizzle", cities: ["Oslo"] },
    output: "read hello from the folder",
    images: 1,
    truncated: false,
    calls: {
      total: 5,
      failed: 0,
      cancelled: 0,
      byTool: {
        everything__get_structured_content: 1,
        files__read_text_file: 1,
        memory__create_entities: 1,
        memory__search_nodes: 1,
        everything__get_tiny_image: 1,
      },
    },
  });

  // A failed run: isError, kind, message and stack lines.
  const failed = await client.callTool({
    name: "execute",
    arguments: { code: 'text("step 1");\nconst graph = null;\nreturn graph.entities;' },
  });
  expect(failed.isError).toBe(true);
  expect(textOf(failed)).toBe(
    "Error (script): TypeError: cannot read property 'entities' of null (line 3: return graph.entities;)\n    at <anonymous> (codemode.js:3:8)\nOutput before the error:\nstep 1",
  );
  expect(failed.structuredContent).toMatchObject({
    ok: false,
    output: "step 1",
    error: {
      kind: "script",
      name: "TypeError",
      message: "cannot read property 'entities' of null (line 3: return graph.entities;)",
    },
  });
  expect(failed.structuredContent).not.toHaveProperty("value");
  // A tool the gateway does not have is a protocol error, not a result.
  await expect(client.callTool({ name: "exec", arguments: { code: "return 1" } })).rejects.toMatchObject({
    code: -32602,
    message: expect.stringContaining('Unknown tool "exec": this server has the tools search, describe, execute'),
  });
  const upstreamError = await client.callTool({
    name: "execute",
    arguments: {
      code: `await tools.files__read_text_file({ path: ${JSON.stringify(join(folder.dir, "nope.txt"))} });`,
    },
  });
  expect(upstreamError.isError).toBe(true);
  expect(textOf(upstreamError)).toMatch(
    /^Error \(script\): Error: ENOENT: no such file or directory.*\nTool calls that failed: tools\.files__read_text_file$/,
  );
  const syntax = await client.callTool({ name: "execute", arguments: { code: "const x = ;" } });
  expect(syntax.isError).toBe(true);
  expect(textOf(syntax)).toMatch(
    /^Error \(script\): CodemodeSourceError: TypeScript syntax error at line 1, column 11: Expression expected\n[\s\S]*\n {4}at codemode\.js:1:11$/,
  );

  // store() and load() keep values between executions of one session.
  await client.callTool({ name: "execute", arguments: { code: 'store("seen", ["a"]);' } });
  const loaded = await client.callTool({ name: "execute", arguments: { code: 'return load("seen");' } });
  expect(JSON.parse(textOf(loaded))).toEqual(["a"]);
}

describe("over stdio", () => {
  let client: Client;
  let transport: StdioClientTransport;
  let stderr = "";

  beforeAll(async () => {
    transport = new StdioClientTransport({
      command: process.execPath,
      args: [CLI, "serve", "--config", configPath, "--timeout", "2000", "--max-output-tokens", "2000"],
      cwd: REPO_ROOT,
      stderr: "pipe",
    });
    transport.stderr?.on("data", (chunk) => {
      stderr += chunk;
    });
    client = new Client({ name: "gateway-test", version: "1.0.0" });
    await client.connect(transport);
  });

  afterAll(async () => {
    await client?.close();
  });

  it("lists three tools, searches, describes and executes", async () => {
    await exercise(client);
    expect(client.getServerVersion()?.name).toBe("airlock");
    // The everything server lists get_roots_list to clients that have roots, as the gateway does for its clients'.
    expect(client.getInstructions()).toContain("36 tools of 3 MCP servers: everything (13), files (14), memory (9).");
    expect(stderr).toContain("airlock serve: 36 tools from everything (13), files (14), memory (9)");
  });

  it("honours the options line within the flags' limits", async () => {
    const started = Date.now();
    const capped = await client.callTool({
      name: "execute",
      arguments: { code: '// @options: {"timeout_ms": 3600000}\nwhile (true) {}' },
    });
    expect(capped.isError).toBe(true);
    expect(textOf(capped)).toMatch(/^Error \(timeout\)/);
    expect(Date.now() - started).toBeLessThan(6000);

    const short = await client.callTool({
      name: "execute",
      arguments: {
        code: '// @options: {"timeout_ms": 100}\nawait tools.everything__trigger_long_running_operation({ duration: 5, steps: 1 });',
      },
    });
    expect(textOf(short)).toMatch(/^Error \(timeout\)/);
  });

  it("cuts the text output to max_output_tokens with a real tokenizer, and says so", async () => {
    const long = await client.callTool({
      name: "execute",
      arguments: {
        code: '// @options: {"max_output_tokens": 50}\nfor (let i = 0; i < 200; i++) console.log("line " + i + " of the output");\nreturn "the end";',
      },
    });
    expect(long.isError).toBeFalsy();
    const blocks = long.content as { type: string; text: string }[];
    const note = blocks.at(-1)?.text ?? "";
    expect(note).toMatch(/^\[Output cut: the text above is the first 50 tokens \(o200k_base\) of \d+ characters\./);
    expect(note).toContain('// @options: {"max_output_tokens": 2000} (at most 2000)');
    const kept = blocks
      .slice(0, -1)
      .map((block) => block.text)
      .join("");
    expect(kept.startsWith("line 0 of the output\nline 1 of the output")).toBe(true);
    expect(await countTokens(kept)).toBeLessThanOrEqual(50);
    expect(await countTokens(kept)).toBeGreaterThan(40);
    expect(kept).not.toContain("the end");

    // Above the flag's limit, the flag wins.
    const capped = await client.callTool({
      name: "execute",
      arguments: { code: '// @options: {"max_output_tokens": 100000}\nreturn "word ".repeat(5000);' },
    });
    const cappedNote = (capped.content as { text: string }[]).at(-1)?.text ?? "";
    expect(cappedNote).toContain("the first 2000 tokens");
    expect(cappedNote).toContain("return or print less");
  });

  it("cancels a run when the client cancels its request", async () => {
    const controller = new AbortController();
    const started = Date.now();
    const pending = client.callTool(
      {
        name: "execute",
        arguments: { code: "await tools.everything__trigger_long_running_operation({ duration: 30, steps: 1 });" },
      },
      undefined,
      { signal: controller.signal },
    );
    setTimeout(() => controller.abort(), 200);
    await expect(pending).rejects.toThrow();
    const after = await client.callTool({ name: "execute", arguments: { code: "return 1 + 1;" } });
    expect(textOf(after)).toBe("2");
    expect(Date.now() - started).toBeLessThan(5000);
  });

  it("stops, with its upstream servers, when the client closes stdin", async () => {
    const own = new StdioClientTransport({
      command: process.execPath,
      args: [CLI, "serve", "--config", configPath],
      cwd: REPO_ROOT,
      stderr: "pipe",
    });
    const ownClient = new Client({ name: "gateway-test", version: "1.0.0" });
    await ownClient.connect(own);
    const pid = own.pid as number;
    const children = childrenOf(pid);
    expect(children.length).toBeGreaterThanOrEqual(3);
    await ownClient.close();
    await waitFor(() => !isAlive(pid) && children.every((child) => !isAlive(child)), 10_000, "the gateway to exit");
  });
});

describe("over Streamable HTTP", () => {
  let child: ChildProcess;
  let url = "";
  let stderr = "";

  beforeAll(async () => {
    child = spawn(process.execPath, [CLI, "serve", "--config", configPath, "--http", "0", "--timeout", "5000"], {
      cwd: REPO_ROOT,
      stdio: ["ignore", "pipe", "pipe"],
    });
    child.stderr?.on("data", (chunk) => {
      stderr += chunk;
    });
    await waitFor(() => /listening on (\S+)/.test(stderr) || child.exitCode !== null, 20_000, "the gateway to listen");
    url = /listening on (\S+)/.exec(stderr)?.[1] ?? "";
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/mcp$/);
  });

  afterAll(async () => {
    if (child.exitCode === null) child.kill("SIGKILL");
  });

  it("lists three tools, searches, describes and executes; sessions keep their own store", async () => {
    const client = new Client({ name: "gateway-http-test", version: "1.0.0" });
    const transport = new StreamableHTTPClientTransport(new URL(url));
    await client.connect(transport);
    const other = new Client({ name: "gateway-http-test-2", version: "1.0.0" });
    await other.connect(new StreamableHTTPClientTransport(new URL(url)));
    try {
      await exercise(client);
      expect(transport.sessionId).toMatch(/^[0-9a-f-]{36}$/);
      const elsewhere = await other.callTool({
        name: "execute",
        arguments: { code: 'return load("seen") ?? "empty";' },
      });
      expect(textOf(elsewhere)).toBe("empty");
    } finally {
      await transport.terminateSession();
      await client.close();
      await other.close();
    }
  });

  it("refuses a Host header that is not this machine (DNS rebinding)", async () => {
    const port = new URL(url).port;
    const status = await new Promise<string>((resolve) => {
      execFile(
        "curl",
        [
          "-s",
          "-o",
          "/dev/null",
          "-w",
          "%{http_code}",
          "-X",
          "POST",
          "-H",
          "Host: evil.example",
          "-d",
          "{}",
          `http://127.0.0.1:${port}/mcp`,
        ],
        (_error, stdout) => resolve(stdout),
      );
    });
    expect(status).toBe("403");
    const foreign = await fetch(url, { method: "POST", headers: { origin: "https://evil.example" }, body: "{}" });
    expect(foreign.status).toBe(403);
    const wrongPath = await fetch(url.replace("/mcp", "/other"), { method: "POST", body: "{}" });
    expect(wrongPath.status).toBe(404);
    const noSession = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json", accept: "application/json, text/event-stream" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" }),
    });
    expect(noSession.status).toBe(400);
  });

  it("requires the token of --token-env", async () => {
    const guarded = spawn(
      process.execPath,
      [CLI, "serve", "--config", configPath, "--http", "0", "--token-env", "AIRLOCK_GATEWAY_TOKEN"],
      { cwd: REPO_ROOT, stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, AIRLOCK_GATEWAY_TOKEN: "t0ken" } },
    );
    let log = "";
    guarded.stderr?.on("data", (chunk) => {
      log += chunk;
    });
    try {
      await waitFor(() => /listening on \S+ \(bearer token required\)/.test(log), 20_000, "the gateway to listen");
      const endpoint = /listening on (\S+)/.exec(log)?.[1] ?? "";
      const denied = await fetch(endpoint, { method: "POST", body: "{}" });
      expect(denied.status).toBe(401);
      const client = new Client({ name: "gateway-token-cli", version: "1.0.0" });
      await client.connect(
        new StreamableHTTPClientTransport(new URL(endpoint), {
          requestInit: { headers: { authorization: "Bearer t0ken" } },
        }),
      );
      expect((await client.listTools()).tools.map((tool) => tool.name)).toContain("execute");
      await client.close();
    } finally {
      // SIGTERM, so that it stops its upstream servers too.
      const exited = new Promise((resolve) => guarded.once("exit", resolve));
      guarded.kill("SIGTERM");
      await exited;
    }
  });

  it("stops on SIGTERM with its upstream servers", async () => {
    const children = childrenOf(child.pid as number);
    expect(children.length).toBeGreaterThanOrEqual(3);
    const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
    child.kill("SIGTERM");
    expect(await exited).toBe(0);
    await waitFor(() => children.every((pid) => !isAlive(pid)), 10_000, "the upstream servers to exit");
  });
});

describe("errors at start", () => {
  const serve = (config: unknown, flags: string[] = []) => {
    const path = join(folder.dir, `config-${Math.random().toString(36).slice(2)}.json`);
    writeFileSync(path, JSON.stringify(config));
    return new Promise<{ code: number | null; stderr: string }>((resolve) => {
      const proc = execFile(
        process.execPath,
        [CLI, "serve", "--config", path, ...flags],
        { cwd: REPO_ROOT, timeout: 20_000 },
        (_e, _out, err) => resolve({ code: proc.exitCode, stderr: err }),
      );
      proc.stdin?.end();
    });
  };

  it("exits 2 naming the server and field of a bad config", async () => {
    const result = await serve({ mcpServers: { files: { command: "node", args: "server.js" } } });
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(
      /^airlock serve: .*config-\w+\.json: server "files": "args" must be an array of strings, got the string "server\.js"\n/,
    );
  });

  it("exits 2 for HTTP flags without --http, an unset token variable, or a bad session idle time", async () => {
    const config = { mcpServers: { data: paged("--tools", "1") } };
    const alone = await serve(config, ["--session-idle", "5"]);
    expect([alone.code, alone.stderr]).toEqual([2, expect.stringContaining("--session-idle needs --http <port>")]);
    const tokenAlone = await serve(config, ["--token-env", "AIRLOCK_TEST_TOKEN"]);
    expect([tokenAlone.code, tokenAlone.stderr]).toEqual([
      2,
      expect.stringContaining("--token-env needs --http <port>"),
    ]);
    const unset = await serve(config, ["--http", "0", "--token-env", "AIRLOCK_TEST_TOKEN_UNSET"]);
    expect([unset.code, unset.stderr]).toEqual([
      2,
      expect.stringContaining("--token-env: environment variable AIRLOCK_TEST_TOKEN_UNSET is not set"),
    ]);
    const bad = await serve(config, ["--http", "0", "--session-idle", "soon"]);
    expect([bad.code, bad.stderr]).toEqual([
      2,
      expect.stringContaining('--session-idle must be a positive integer number of minutes up to 10080, got "soon"'),
    ]);
    const sessionsAlone = await serve(config, ["--max-sessions", "10"]);
    expect([sessionsAlone.code, sessionsAlone.stderr]).toEqual([
      2,
      expect.stringContaining("--max-sessions needs --http <port>"),
    ]);
    const noSessions = await serve(config, ["--http", "0", "--max-sessions-per-principal", "0"]);
    expect([noSessions.code, noSessions.stderr]).toEqual([
      2,
      expect.stringContaining(
        '--max-sessions-per-principal must be a positive integer number of sessions up to 100000, got "0"',
      ),
    ]);
  });

  it("exits 1 for a name collision", async () => {
    const collision = await serve({ mcpServers: { data: paged("--tools", "1", "--collide") } });
    expect(collision.code).toBe(1);
    expect(collision.stderr).toContain("would both be tools.data__get_value");
  });
});

describe("an upstream that does not start", () => {
  it("is reported with its stderr tail and tried again in the background, while the others serve", async () => {
    const path = join(folder.dir, "config-broken.json");
    writeFileSync(path, JSON.stringify({ mcpServers: { broken: paged("--fail-start"), data: paged("--tools", "2") } }));
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [CLI, "serve", "--config", path],
      cwd: REPO_ROOT,
      stderr: "pipe",
    });
    let stderr = "";
    transport.stderr?.on("data", (chunk) => {
      stderr += chunk;
    });
    const client = new Client({ name: "gateway-down-test", version: "1.0.0" });
    await client.connect(transport);
    try {
      expect(stderr).toContain(
        'airlock serve: server "broken" is down (attempt 1); trying again in 1 s: server "broken" did not start: the process exited before finishing the MCP handshake',
      );
      expect(stderr).toContain("  paged-server: fatal: PAGED_TOKEN is not set");
      expect(stderr).toContain("airlock serve: 6 tools from broken (down), data (6)");
      const { tools } = await client.listTools();
      const description = tools.find((tool) => tool.name === "execute")?.description ?? "";
      expect(description).toContain(
        "Down now, tried again in the background (their tools appear when they are back):\n- broken: did not start: the process exited before finishing the MCP handshake",
      );
      const search = await client.callTool({ name: "search", arguments: { query: "item" } });
      expect(textOf(search)).toContain("Servers down now (their tools are missing; tried again in the background):");
      const run = await client.callTool({
        name: "execute",
        arguments: { code: "return (await tools.data__item_1()).item" },
      });
      expect(textOf(run)).toBe("1");
      // Retried with a doubling delay: its second and third failures are reported in a line each.
      await waitFor(
        () => /broken" is down \(attempt 3\); trying again in 4 s/.test(stderr),
        20_000,
        "the third attempt",
      );
      expect(stderr).toContain(
        'server "broken" is down (attempt 2); trying again in 2 s: server "broken" did not start',
      );
    } finally {
      await client.close();
    }
  });
});

describe("the gateway as a library", () => {
  it("takes an upstream's new tool list and tells its clients", async () => {
    const gateway = await McpGateway.start({ mcpServers: { paged: paged("--tools", "1") } }, { poolSize: 1 });
    const [serverSide, clientSide] = InMemoryTransport.createLinkedPair();
    await gateway.createServer().connect(serverSide);
    let notified = 0;
    const client = new Client({ name: "in-memory", version: "1.0.0" });
    client.setNotificationHandler(ToolListChangedNotificationSchema, () => {
      notified++;
    });
    await client.connect(clientSide);
    try {
      expect(gateway.tools.map((tool) => tool.name)).not.toContain("paged__grown_1");
      const grow = await client.callTool({ name: "execute", arguments: { code: "return await tools.paged__grow();" } });
      expect(textOf(grow)).toBe("grown-1");
      await waitFor(() => notified > 0, 5000, "tools/list_changed from the gateway");
      expect(gateway.tools.map((tool) => tool.name)).toContain("paged__grown_1");
      const { tools } = await client.listTools();
      expect(tools.find((tool) => tool.name === "execute")?.description).toContain("paged__grown_1(args:");
      const run = await client.callTool({
        name: "execute",
        arguments: { code: "return await tools.paged__grown_1();" },
      });
      expect(JSON.parse(textOf(run))).toEqual({ grown: 1 });
    } finally {
      await client.close();
      await gateway.close();
    }
  });

  it("refuses a search query or tool name past its cap, naming the limit, instead of matching it against every tool", async () => {
    const gateway = await McpGateway.start({ mcpServers: { paged: paged("--tools", "1") } }, { poolSize: 1 });
    const [serverSide, clientSide] = InMemoryTransport.createLinkedPair();
    await gateway.createServer().connect(serverSide);
    const client = new Client({ name: "in-memory", version: "1.0.0" });
    await client.connect(clientSide);
    try {
      const query = "word ".repeat(MAX_SEARCH_QUERY_CHARS / 5 + 1);
      const search = await client.callTool({ name: "search", arguments: { query } });
      expect(search.isError).toBe(true);
      expect(textOf(search)).toMatch(/a query has at most 1000 characters/);
      const name = "q".repeat(MAX_TOOL_NAME_CHARS + 1);
      const describe = await client.callTool({ name: "describe", arguments: { names: ["paged__stats", name] } });
      expect(describe.isError).toBe(true);
      expect(textOf(describe)).toMatch(/a tool name has at most 500 characters/);
      // Up to the cap, an unknown name is answered as before.
      const longest = await client.callTool({
        name: "describe",
        arguments: { names: ["q".repeat(MAX_TOOL_NAME_CHARS)] },
      });
      expect(textOf(longest)).toMatch(/^Unknown tool "q+"\. /);
      // The library methods refuse the same.
      expect(() => gateway.search(query)).toThrow(/The query is 1005 characters long; a query has at most 1000/);
      expect(() => gateway.describe([name])).toThrow(/A name of 501 characters was given; a tool name has at most 500/);
      expect(() => gateway.describe(Array(51).fill("paged__stats"))).toThrow(/describe takes at most 50 at once/);
    } finally {
      await client.close();
      await gateway.close();
    }
  });

  it("over stdio, answers a message past the size limit with an error and goes on serving", async () => {
    const gateway = await McpGateway.start({ mcpServers: { paged: paged("--tools", "1") } }, { poolSize: 1 });
    const stdio = rawStdio();
    const serving = await serveGatewayStdio(gateway, { stdin: stdio.stdin, stdout: stdio.stdout });
    let closed = false;
    void serving.closed.then(() => {
      closed = true;
    });
    try {
      stdio.send(INITIALIZE);
      await stdio.response(1);
      const execute = (id: number, code: string) =>
        stdio.send(
          JSON.stringify({
            jsonrpc: "2.0",
            id,
            method: "tools/call",
            params: { name: "execute", arguments: { code } },
          }),
        );
      // Past the SDK transport's own 10 MiB buffer, which closed the session without a word: the whole program
      // arrives (its length is in the answer), and is refused as longer than MAX_TYPESCRIPT_CHARS.
      const long = `return ${JSON.stringify("x".repeat(11 * 1024 * 1024))}.length`;
      execute(2, long);
      const refused = (await stdio.response(2)).result;
      expect(refused?.isError).toBe(true);
      expect(refused?.content).toEqual([
        {
          type: "text",
          text: `Error (script): CodemodeSourceError: The TypeScript script has ${long.length} characters; types are stripped from scripts of at most ${MAX_TYPESCRIPT_CHARS}. Write a shorter program.`,
        },
      ]);
      execute(3, `return ${JSON.stringify("x".repeat(MAX_STDIO_LINE_BYTES))}.length`);
      expect((await stdio.response(3)).error).toEqual({
        code: -32600,
        message: `The message is larger than ${MAX_STDIO_LINE_BYTES} bytes, the most airlock serve takes over stdio`,
      });
      // The id after the params, as some clients write it: found at the line's end.
      const big = `return ${JSON.stringify("x".repeat(MAX_STDIO_LINE_BYTES))}.length`;
      stdio.send(
        JSON.stringify({
          jsonrpc: "2.0",
          method: "tools/call",
          params: { name: "execute", arguments: { code: big } },
          id: 5,
        }),
      );
      expect((await stdio.response(5)).error?.code).toBe(-32600);
      execute(4, "return 1 + 1");
      expect((await stdio.response(4)).result?.content).toEqual([{ type: "text", text: "2" }]);
      expect(closed).toBe(false);
    } finally {
      await serving.close();
      await gateway.close();
    }
  });

  it("over stdio, answers a request that is not JSON-RPC 2.0 with an error, as over HTTP", async () => {
    const gateway = await McpGateway.start({ mcpServers: { paged: paged("--tools", "1") } }, { poolSize: 1 });
    const stdio = rawStdio();
    const serving = await serveGatewayStdio(gateway, { stdin: stdio.stdin, stdout: stdio.stdout });
    try {
      stdio.send(INITIALIZE);
      await stdio.response(1);
      stdio.send(JSON.stringify({ jsonrpc: "2.0", id: 2, method: "tools/call", params: 7 }));
      stdio.send(JSON.stringify({ jsonrpc: "1.0", id: "three", method: "tools/list" }));
      stdio.send("this is not json");
      stdio.send(JSON.stringify({ jsonrpc: "2.0", id: 4, method: "tools/list" }));
      expect((await stdio.response(2)).error).toEqual({
        code: -32600,
        message: 'Invalid Request: "params" must be an object',
      });
      expect((await stdio.response("three")).error).toEqual({
        code: -32600,
        message: 'Invalid Request: "jsonrpc" must be "2.0"',
      });
      await stdio.response(4);
      const parseError = stdio.responses.find((r) => r.id === undefined);
      expect(parseError?.error?.code).toBe(-32700);
      expect(parseError?.error?.message).toMatch(/^Parse error: /);
    } finally {
      await serving.close();
      await gateway.close();
    }
  });

  it("refuses misspelt options, naming them: a misspelt bearerToken never serves without a token", async () => {
    const config = { mcpServers: { paged: paged("--tools", "1") } };
    // Refused before any server is started.
    await expect(McpGateway.start(config, { poolSize: 1, readonly: true } as never)).rejects.toThrow(
      /startMcpGateway has no option "readonly" \(it takes timeoutMs, /,
    );
    await expect(connectMcpServers(config, { readonly: true } as never)).rejects.toThrow(
      /connectMcpServers has no option "readonly"/,
    );
    expect(() => parseMcpConfig(config, { readonly: true } as never)).toThrow(
      /parseMcpConfig has no option "readonly"/,
    );
    const warnings: string[] = [];
    // Gateway and connection options together are taken, each by its part.
    const gateway = await McpGateway.start(config, { poolSize: 1, readOnly: true, onWarning: (w) => warnings.push(w) });
    try {
      expect(() => new McpGateway(gateway.toolset, { timeout: 5 } as never)).toThrow(
        /McpGateway has no option "timeout"/,
      );
      await expect(serveGatewayHttp(gateway, { port: 0, bearer_token: "s3cret" } as never)).rejects.toThrow(
        /serveGatewayHttp has no option "bearer_token"/,
      );
      await expect(serveGatewayStdio(gateway, { stdn: process.stdin } as never)).rejects.toThrow(/"stdn"/);
      await expect(gateway.execute("return 1", { stor: {} } as never)).rejects.toThrow(/execute has no option "stor"/);
    } finally {
      await gateway.close();
    }
  });

  it("requires the bearer token it was given from every HTTP request", async () => {
    const gateway = await McpGateway.start({ mcpServers: { paged: paged("--tools", "1") } }, { poolSize: 1 });
    await expect(serveGatewayHttp(gateway, { port: 0, bearerToken: "has space" })).rejects.toThrow(/bearerToken/);
    const token = "s3cret-Token_123";
    const serving = await serveGatewayHttp(gateway, { port: 0, bearerToken: token });
    const client = new Client({ name: "gateway-token-test", version: "1.0.0" });
    try {
      for (const authorization of [undefined, "Bearer wrong", `Bearer ${token}x`, `Basic ${token}`, token]) {
        const response = await fetch(serving.url, {
          method: "POST",
          headers: {
            "content-type": "application/json",
            accept: "application/json, text/event-stream",
            ...(authorization === undefined ? {} : { authorization }),
          },
          body: "{}",
        });
        expect([authorization, response.status]).toEqual([authorization, 401]);
        const challenge = response.headers.get("www-authenticate");
        const metadata = `resource_metadata="${serving.metadataUrl}"`;
        // No token: a challenge naming the metadata; a wrong one: invalid_token as well.
        expect(challenge).toBe(
          authorization === undefined || !authorization.startsWith("Bearer ")
            ? `Bearer realm="airlock", ${metadata}`
            : `Bearer realm="airlock", error="invalid_token", error_description="the token is not the gateway's", ${metadata}`,
        );
      }
      expect(serving.sessions).toBe(0);
      await client.connect(
        new StreamableHTTPClientTransport(new URL(serving.url), {
          requestInit: { headers: { authorization: `Bearer ${token}` } },
        }),
      );
      const run = await client.callTool({ name: "execute", arguments: { code: "return 6 * 7" } });
      expect(textOf(run)).toBe("42");
    } finally {
      await client.close();
      await serving.close();
      await gateway.close();
    }
  });

  it("closes an HTTP session idle past sessionIdleMs, but not one with an open stream", async () => {
    const gateway = await McpGateway.start({ mcpServers: { paged: paged("--tools", "1") } }, { poolSize: 1 });
    await expect(serveGatewayHttp(gateway, { port: 0, sessionIdleMs: 0 })).rejects.toThrow(/sessionIdleMs/);
    const serving = await serveGatewayHttp(gateway, { port: 0, sessionIdleMs: 300 });
    const post = (body: object, sessionId?: string) =>
      fetch(serving.url, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          accept: "application/json, text/event-stream",
          ...(sessionId === undefined ? {} : { "mcp-session-id": sessionId, "mcp-protocol-version": "2025-06-18" }),
        },
        body: JSON.stringify(body),
      });
    const client = new Client({ name: "gateway-idle-test", version: "1.0.0" });
    try {
      const init = await post({
        jsonrpc: "2.0",
        id: 1,
        method: "initialize",
        params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "raw", version: "1" } },
      });
      expect(init.status).toBe(200);
      await init.text();
      const sessionId = init.headers.get("mcp-session-id") ?? "";
      expect(serving.sessions).toBe(1);
      await waitFor(() => serving.sessions === 0, 5_000, "the idle session to close");
      const late = await post({ jsonrpc: "2.0", id: 2, method: "tools/list" }, sessionId);
      expect(late.status).toBe(404);
      // A client keeps a GET stream open for the server's notifications: its session stays however long it is quiet.
      await client.connect(new StreamableHTTPClientTransport(new URL(serving.url)));
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      expect(serving.sessions).toBe(1);
      expect((await client.listTools()).tools.map((tool) => tool.name)).toContain("execute");
    } finally {
      await client.close();
      await serving.close();
      await gateway.close();
    }
  });

  it("runs one client's program while another's computes, on the library's default pool", async () => {
    const gateway = await McpGateway.start({ mcpServers: { paged: paged("--tools", "1") } });
    const connect = async () => {
      const [serverSide, clientSide] = InMemoryTransport.createLinkedPair();
      await gateway.createServer().connect(serverSide);
      const client = new Client({ name: "in-memory", version: "1.0.0" });
      await client.connect(clientSide);
      return client;
    };
    const [a, b] = await Promise.all([connect(), connect()]);
    try {
      let aDone = false;
      const spinning = a
        .callTool({
          name: "execute",
          arguments: { code: "const end = Date.now() + 4000; while (Date.now() < end) {} return 'a';" },
        })
        .then((result) => {
          aDone = true;
          return result;
        });
      // B's trivial program finishes while A's still computes: it was not queued behind A on one worker (with
      // poolSize: 1 it is).
      await new Promise((resolve) => setTimeout(resolve, 200));
      const quick = await b.callTool({
        name: "execute",
        arguments: { code: "return (await tools.paged__item_0()).item" },
      });
      expect([textOf(quick), aDone]).toEqual(["0", false]);
      expect(textOf(await spinning)).toBe("a");
    } finally {
      await a.close();
      await b.close();
      await gateway.close();
    }
  });

  it("declares a small catalog in full in execute's description", async () => {
    const gateway = await McpGateway.start({ mcpServers: { everything: everything() } }, { poolSize: 1 });
    try {
      const description = gateway.executeDescription();
      expect(description).toContain('the tools of the MCP servers "everything"');
      expect(description).toContain("The tools:\n```ts\ndeclare const tools: {\n");
      expect(description).toContain("  everything__get_sum(args: {\n    // First number\n    a: number;");
      expect(description).toContain("  everything__get_structured_content(args: {");
      expect(description).toContain("}): Promise<{\n    // Temperature in celsius\n    temperature: number;");
    } finally {
      await gateway.close();
    }
  });

  it("declares a large catalog as an index, and marks execute read-only in read-only mode", async () => {
    const gateway = await McpGateway.start(
      { mcpServers: { paged: paged("--tools", "60") } },
      { readOnly: true, declarationsMaxTokens: 300, poolSize: 1 },
    );
    try {
      expect(gateway.tools.every((tool) => tool.annotations?.readOnlyHint === true)).toBe(true);
      expect(gateway.tools).toHaveLength(32);
      const description = gateway.executeDescription();
      expect(description).toContain(
        "The 32 tools by server, as tools.<server>__<tool>. Before calling one, get its declaration with describe",
      );
      expect(description).toContain("- paged (32 tools): item_0, item_2, item_4,");
      const server = gateway.createServer();
      const [a, b] = InMemoryTransport.createLinkedPair();
      await server.connect(a);
      const client = new Client({ name: "in-memory", version: "1.0.0" });
      await client.connect(b);
      const { tools } = await client.listTools();
      expect(tools.find((tool) => tool.name === "execute")?.annotations?.readOnlyHint).toBe(true);
      const run = await client.callTool({
        name: "execute",
        arguments: { code: "return (await tools.paged__item_58()).item;" },
      });
      expect(textOf(run)).toBe("58");
      await client.close();
    } finally {
      await gateway.close();
    }
  });
});
