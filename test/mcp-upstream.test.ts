// biome-ignore-all lint/suspicious/noTemplateCurlyInString: config values spell ${VAR} references on purpose
/**
 * MCP servers as sandbox tools, against real servers started as child processes: the npm reference servers
 * (everything, filesystem, memory) and a small paging server written with the official SDK (test/fixtures/mcp),
 * because none of the npm servers pages its tool list.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { CodemodeSandbox, isIdentifier } from "airlock-codemode";
import { renderDeclarations } from "airlock-codemode/declarations";
import {
  type McpConfigError,
  McpToolCollisionError,
  McpToolset,
  McpUpstreamError,
  mcpToolName,
  parseMcpConfig,
} from "airlock-codemode/mcp";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { callResultToValue } from "../dist/upstream/call-result.js";
import type { McpUpstream } from "../dist/upstream/server.js";
import { type HttpUpstream, startHttpUpstream } from "./fixtures/mcp/http-upstream.ts";
import {
  configError,
  EVERYTHING,
  everything,
  filesystem,
  freePort,
  isAlive,
  memory,
  paged,
  tempFolder,
  waitFor,
} from "./fixtures/mcp/servers.ts";

let folder: { dir: string; cleanup: () => void };
let toolset: McpToolset;
let sandbox: CodemodeSandbox;
const warnings: string[] = [];

beforeAll(async () => {
  folder = tempFolder({ "notes.txt": "first line\nsecond line\n" });
  toolset = await McpToolset.connect(
    {
      mcpServers: {
        everything: everything(),
        files: filesystem(folder.dir),
        memory: memory(join(folder.dir, "memory.jsonl")),
        paged: paged("--tools", "25", "--page-size", "4"),
      },
    },
    { onWarning: (warning) => warnings.push(warning) },
  );
  sandbox = new CodemodeSandbox({ poolSize: 1, tools: toolset.tools, timeoutMs: 20_000 });
});

afterAll(async () => {
  await sandbox?.close();
  await toolset?.close();
  folder?.cleanup();
});

describe("naming and declarations", () => {
  it("names every tool <server>__<tool> as an identifier, and declarations use the same names", () => {
    const names = toolset.tools.map((tool) => tool.name);
    expect(names).toContain("everything__get_sum");
    expect(names).toContain("everything__get_tiny_image");
    expect(names).toContain("files__read_text_file");
    expect(names).toContain("memory__create_entities");
    expect(names).toContain("paged__item_3");
    for (const name of names) expect(isIdentifier(name)).toBe(true);
    const sum = toolset.tools.find((tool) => tool.name === "everything__get_sum");
    expect(sum).toMatchObject({ server: "everything", toolName: "get-sum" });
    expect(mcpToolName("everything", "get-sum")).toBe("everything__get_sum");

    const declarations = renderDeclarations({ tools: toolset.tools }, { indexThreshold: Number.POSITIVE_INFINITY });
    expect(declarations).toContain("  everything__get_sum(args: {");
    expect(declarations).toContain("  files__read_text_file(args: {");
    // An output schema becomes the result type.
    expect(declarations).toMatch(
      /files__list_directory\(args: \{\n\s+path: string;\n\s+\}\): Promise<\{\n\s+content: string;/,
    );
  });

  it("leaves out task-only tools with a warning", () => {
    expect(toolset.tools.some((tool) => tool.toolName === "simulate-research-query")).toBe(false);
    expect(warnings.join("\n")).toContain('tool "simulate-research-query" is left out');
  });
});

describe("tools/list pagination", () => {
  it("follows nextCursor through every page of the paging server", async () => {
    const pagedTools = toolset.tools.filter((tool) => tool.server === "paged");
    // 25 items + wait_for_cancel + slow_write + grow + stats = 29 tools in pages of 4 = 8 pages.
    expect(pagedTools).toHaveLength(29);
    expect(pagedTools.map((tool) => tool.toolName).slice(0, 3)).toEqual(["item-0", "item-1", "item-2"]);
    expect(pagedTools.at(-1)?.toolName).toBe("stats");
    const result = await sandbox.execute("return await tools.paged__stats({});");
    expect(result.ok && result.value).toEqual({ cancellations: expect.any(Number), listCalls: 8, mostListings: 1 });
  });
});

describe("calls", () => {
  it("chains calls across servers in one script", async () => {
    const result = await sandbox.execute(`
      await tools.memory__create_entities({
        entities: [{ name: "Ada", entityType: "person", observations: ["wrote the first program"] }],
      });
      await tools.memory__add_observations({ observations: [{ entityName: "Ada", contents: ["born 1815"] }] });
      const graph = await tools.memory__open_nodes({ names: ["Ada"] });
      const ada = graph.entities[0];
      const sum = await tools.everything__get_sum({ a: 1815, b: 37 });
      const path = ${JSON.stringify(join(folder.dir, "ada.txt"))};
      await tools.files__write_file({ path, content: ada.observations.join("; ") + "\\n" + sum });
      const back = await tools.files__read_text_file({ path });
      const listing = await tools.files__list_directory({ path: ${JSON.stringify(folder.dir)} });
      text("wrote " + path);
      return { observations: ada.observations, sum, back: back.content, listing: listing.content };
    `);
    expect(result.ok, JSON.stringify(!result.ok && result.error)).toBe(true);
    if (!result.ok) return;
    expect(result.value).toEqual({
      observations: ["wrote the first program", "born 1815"],
      sum: "The sum of 1815 and 37 is 1852.",
      back: "wrote the first program; born 1815\nThe sum of 1815 and 37 is 1852.",
      listing: expect.stringContaining("[FILE] ada.txt"),
    });
    expect(readFileSync(join(folder.dir, "ada.txt"), "utf8")).toContain("born 1815");
    expect(result.calls.map((call) => call.name)).toEqual([
      "memory__create_entities",
      "memory__add_observations",
      "memory__open_nodes",
      "everything__get_sum",
      "files__write_file",
      "files__read_text_file",
      "files__list_directory",
    ]);
    expect(result.calls.every((call) => call.status === "ok")).toBe(true);
  });

  it("resolves to structuredContent when present, to JSON-parsed text otherwise", async () => {
    const result = await sandbox.execute(`
      return [
        await tools.everything__get_structured_content({ location: "Chicago" }),
        await tools.paged__item_3(),
        await tools.everything__echo({ message: "hi" }),
      ];
    `);
    expect(result.ok && result.value).toEqual([
      { temperature: 36, conditions: "Light rain / drizzle", humidity: 82 },
      { item: 3 },
      "Echo: hi",
    ]);
    expect(callResultToValue({ content: [{ type: "text", text: " [1, 2] " }] })).toEqual([1, 2]);
    expect(callResultToValue({ content: [{ type: "text", text: "true story" }] })).toBe("true story");
    expect(callResultToValue({ content: [] })).toBeNull();
  });

  it("gives image blocks that image() accepts", async () => {
    const result = await sandbox.execute(`
      const blocks = await tools.everything__get_tiny_image({});
      const picture = blocks.find((block) => block.type === "image");
      text(blocks[0]);
      image(picture);
      return { count: blocks.length, mimeType: picture.mimeType, bytes: picture.data.length };
    `);
    expect(result.ok, JSON.stringify(!result.ok && result.error)).toBe(true);
    if (!result.ok) return;
    expect(result.value).toMatchObject({ count: 3, mimeType: "image/png" });
    expect(result.output[0]).toEqual({ type: "text", text: "Here's the image you requested:" });
    const image = result.output[1];
    expect(image?.type).toBe("image");
    if (image?.type !== "image") return;
    expect(image.mimeType).toBe("image/png");
    expect(Buffer.from(image.data, "base64").subarray(1, 4).toString()).toBe("PNG");
  });

  it("rejects with the server's message for an isError result", async () => {
    const missing = join(folder.dir, "missing.txt");
    const caught = await sandbox.execute(`
      try {
        await tools.files__read_text_file({ path: ${JSON.stringify(missing)} });
        return "no error";
      } catch (error) {
        return error.message;
      }
    `);
    expect(caught.ok && caught.value).toMatch(/ENOENT: no such file or directory/);

    const uncaught = await sandbox.execute(`await tools.everything__get_sum({ a: "one", b: 2 });`);
    expect(uncaught.ok).toBe(false);
    if (uncaught.ok) return;
    expect(uncaught.error.kind).toBe("script");
    expect(uncaught.error.message).toMatch(/Input validation error/);
    expect(uncaught.calls).toEqual([expect.objectContaining({ name: "everything__get_sum", status: "error" })]);
  });

  it("refuses arguments that are not one object", async () => {
    const result = await sandbox.execute(`await tools.everything__echo("hi");`);
    expect(!result.ok && result.error.message).toMatch(/takes one object of arguments, got string/);
  });
});

describe("abort", () => {
  it("cancels the upstream request when the run is aborted", async () => {
    const controller = new AbortController();
    const started = Date.now();
    const running = sandbox.execute("await tools.paged__wait_for_cancel({}); return 'not cancelled';", {
      signal: controller.signal,
    });
    setTimeout(() => controller.abort(), 300);
    const result = await running;
    expect(result.ok).toBe(false);
    if (result.ok) return;
    expect(result.error.kind).toBe("aborted");
    expect(result.calls).toEqual([expect.objectContaining({ name: "paged__wait_for_cancel", status: "cancelled" })]);
    expect(Date.now() - started).toBeLessThan(5000);
    // The server saw notifications/cancelled for its request.
    let stats = { cancellations: 0 };
    for (let i = 0; i < 50 && stats.cancellations === 0; i++) {
      const check = await sandbox.execute("return await tools.paged__stats({});");
      if (check.ok) stats = check.value as typeof stats;
      if (stats.cancellations === 0) await new Promise((resolve) => setTimeout(resolve, 50));
    }
    expect(stats.cancellations).toBe(1);
  });

  it("stops a long upstream operation at the run's deadline", async () => {
    const started = Date.now();
    const result = await sandbox.execute(
      "return await tools.everything__trigger_long_running_operation({ duration: 20, steps: 2 });",
      { timeoutMs: 400 },
    );
    expect(!result.ok && result.error.kind).toBe("timeout");
    expect(Date.now() - started).toBeLessThan(5000);
    // The server is still usable afterwards.
    const after = await sandbox.execute("return await tools.everything__get_sum({ a: 2, b: 2 });");
    expect(after.ok && after.value).toBe("The sum of 2 and 2 is 4.");
  });
});

describe("an upstream that dies", () => {
  it("is started again by the next call after its process was killed", async () => {
    const own = await McpToolset.connect({ mcpServers: { everything: everything() } });
    const ownSandbox = new CodemodeSandbox({ poolSize: 1, tools: own.tools });
    try {
      const upstream = own.upstream("everything");
      const pid = upstream?.pid as number;
      expect(pid).toBeGreaterThan(0);
      process.kill(pid, "SIGKILL");
      await waitFor(() => upstream?.connected === false, 5000, "the connection to close");
      expect(isAlive(pid)).toBe(false);

      const result = await ownSandbox.execute("return await tools.everything__get_sum({ a: 40, b: 2 });");
      expect(result.ok && result.value).toBe("The sum of 40 and 2 is 42.");
      expect(upstream?.reconnects).toBe(1);
      expect(upstream?.pid).not.toBe(pid);
    } finally {
      await ownSandbox.close();
      await own.close();
    }
  });

  it("repeats a read-only call that was running when the server died, and not a writing one", async () => {
    const own = await McpToolset.connect({ mcpServers: { everything: everything(), paged: paged("--tools", "1") } });
    const ownSandbox = new CodemodeSandbox({ poolSize: 1, tools: own.tools });
    try {
      const killSoon = (server: string) => {
        const pid = own.upstream(server)?.pid as number;
        setTimeout(() => process.kill(pid, "SIGKILL"), 250);
      };
      // trigger-long-running-operation is annotated readOnlyHint: true, so it is sent again after the reconnect.
      killSoon("everything");
      const repeated = await ownSandbox.execute(
        "return await tools.everything__trigger_long_running_operation({ duration: 0.6, steps: 1 });",
      );
      expect(repeated.ok && repeated.value).toBe("Long running operation completed. Duration: 0.6 seconds, Steps: 1.");
      expect(own.upstream("everything")?.reconnects).toBe(1);

      // slow_write is neither read-only nor idempotent: the call fails and says why; the next call reconnects.
      killSoon("paged");
      const failed = await ownSandbox.execute("return await tools.paged__slow_write({ ms: 3000 });");
      expect(!failed.ok && failed.error.message).toMatch(
        /connection to server "paged" was lost while the call ran; the tool may or may not have run/,
      );
      const next = await ownSandbox.execute("return await tools.paged__slow_write({ ms: 1 });");
      expect(next.ok && next.value).toBe("done");
      expect(own.upstream("paged")?.reconnects).toBe(1);
    } finally {
      await ownSandbox.close();
      await own.close();
    }
  });
});

describe("a JSON-RPC error from the server", () => {
  it("is the tool's error even with code -32000 (also the SDK's connection-closed code): no restart, no repeat", async () => {
    const own = await McpToolset.connect({ mcpServers: { paged: paged("--tools", "1", "--busy") } });
    const ownSandbox = new CodemodeSandbox({ poolSize: 1, tools: own.tools });
    try {
      const upstream = own.upstream("paged");
      const pid = upstream?.pid;
      const result = await ownSandbox.execute("return await tools.paged__busy({});");
      expect(!result.ok && result.error.message).toBe("MCP error -32000: rate limited, try later");
      expect(upstream?.pid).toBe(pid);
      expect(upstream?.reconnects).toBe(0);
    } finally {
      await ownSandbox.close();
      await own.close();
    }
  });
});

describe("a message from the server that is not JSON-RPC", () => {
  it("disconnects the server at once, failing the call it answered and saying why; the next call starts it again", async () => {
    const own = await McpToolset.connect({ mcpServers: { paged: paged("--tools", "1", "--malformed") } });
    // Without the disconnect, the call would wait for this deadline.
    const ownSandbox = new CodemodeSandbox({ poolSize: 1, tools: own.tools, timeoutMs: 60_000 });
    try {
      const upstream = own.upstream("paged");
      const pid = upstream?.pid;
      const result = await ownSandbox.execute("return await tools.paged__malformed({});");
      expect(!result.ok && result.error.message).toMatch(
        /^server "paged" sent a message that is not JSON-RPC and was disconnected while the call ran; the tool may or may not have run, so it was not repeated/,
      );
      const next = await ownSandbox.execute("return await tools.paged__item_0({});");
      expect(next.ok && next.value).toEqual({ item: 0 });
      expect(upstream?.pid).not.toBe(pid);
    } finally {
      await ownSandbox.close();
      await own.close();
    }
  });
});

describe("Streamable HTTP upstream", () => {
  let child: ChildProcess | undefined;
  const startHttpServer = async (port: number) => {
    const started = spawn(process.execPath, [EVERYTHING, "streamableHttp"], {
      env: { ...process.env, PORT: String(port) },
      stdio: ["ignore", "ignore", "pipe"],
    });
    let stderr = "";
    started.stderr?.on("data", (chunk) => {
      stderr += chunk;
    });
    await waitFor(() => stderr.includes("listening on port"), 10_000, "the HTTP server to listen");
    return started;
  };
  afterAll(() => {
    child?.kill("SIGKILL");
  });

  it("calls tools over HTTP, and reconnects after the server restarted", async () => {
    const port = await freePort();
    child = await startHttpServer(port);
    const own = await McpToolset.connect({
      mcpServers: { web: { url: `http://127.0.0.1:${port}/mcp`, headers: { "X-Test": "1" } } },
    });
    const ownSandbox = new CodemodeSandbox({ poolSize: 1, tools: own.tools });
    try {
      expect(own.tools.map((tool) => tool.name)).toContain("web__get_sum");
      const first = await ownSandbox.execute("return await tools.web__get_sum({ a: 1, b: 1 });");
      expect(first.ok && first.value).toBe("The sum of 1 and 1 is 2.");

      child.kill("SIGKILL");
      await new Promise((resolve) => child?.once("exit", resolve));
      child = await startHttpServer(port);
      // The new process does not know the old session: the call reconnects and is sent again.
      const second = await ownSandbox.execute("return await tools.web__get_sum({ a: 2, b: 3 });");
      expect(second.ok && second.value).toBe("The sum of 2 and 3 is 5.");
      expect(own.upstream("web")?.reconnects).toBe(1);
    } finally {
      await ownSandbox.close();
      await own.close();
      child?.kill("SIGKILL");
    }
  });

  it("fails a call when the server dies while it runs, instead of waiting for the deadline", async () => {
    const port = await freePort();
    child = await startHttpServer(port);
    const own = await McpToolset.connect({ mcpServers: { web: { url: `http://127.0.0.1:${port}/mcp` } } });
    const ownSandbox = new CodemodeSandbox({ poolSize: 1, tools: own.tools, timeoutMs: 30_000 });
    try {
      const running = ownSandbox.execute(
        "return await tools.web__trigger_long_running_operation({ duration: 20, steps: 4 });",
      );
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      child.kill("SIGKILL");
      const result = await running;
      // Not "timeout": the call failed as soon as the server did not answer a ping after its stream broke.
      expect(!result.ok && result.error.kind).toBe("script");
      expect(!result.ok && result.error.message).toMatch(/server "web"/);
    } finally {
      await ownSandbox.close();
      await own.close();
    }
  });
});

describe("Streamable HTTP upstream failures", () => {
  let upstream: HttpUpstream;
  let own: McpToolset;
  let ownSandbox: CodemodeSandbox;
  beforeAll(async () => {
    upstream = await startHttpUpstream();
    own = await McpToolset.connect({ mcpServers: { pay: { url: upstream.url } } });
    ownSandbox = new CodemodeSandbox({ poolSize: 1, tools: own.tools });
  });
  afterAll(async () => {
    await ownSandbox?.close();
    await own?.close();
    await upstream?.close();
  });

  it("does not send a writing call again when the connection dropped after the request was sent", async () => {
    const result = await ownSandbox.execute("return await tools.pay__charge({});");
    expect(!result.ok && result.error.message).toMatch(
      /connection to server "pay" was lost while the call ran; the tool may or may not have run, so it was not repeated/,
    );
    expect(upstream.calls.charge).toBe(1);
    // The next call reconnects; a read-only call that meets the same drop is sent again once.
    const next = await ownSandbox.execute("return await tools.pay__echo({});");
    expect(next.ok && next.value).toBe("echo");
    const lookup = await ownSandbox.execute("return await tools.pay__lookup({});");
    expect(!lookup.ok && lookup.error.message).toMatch(/lost again when the call was sent a second time/);
    expect(upstream.calls.lookup).toBe(2);
  });

  it("fails a call whose answer stream broke or ended unanswered at once, keeping the connection to a live server", async () => {
    // Connected first (an earlier test dropped the connection), so that a reconnect below would show.
    expect((await ownSandbox.execute("return await tools.pay__echo({});")).ok).toBe(true);
    const before = own.upstream("pay")?.reconnects;
    // Before, both calls waited for their deadline: the SDK resumes only streams whose events have ids.
    const cut = await ownSandbox.execute("return await tools.pay__cut({});", { timeoutMs: 10_000 });
    expect(!cut.ok && cut.error.message).toMatch(
      /server "pay" did not answer the call of cut; the tool may or may not have run, so it was not repeated \(the server's answer stream broke before it answered/,
    );
    expect(upstream.calls.cut).toBe(1);
    // A read-only call is sent once more, on the same connection.
    const ended = await ownSandbox.execute("return await tools.pay__ended({});", { timeoutMs: 10_000 });
    expect(!ended.ok && ended.error.message).toMatch(
      /server "pay" did not answer the call of ended when it was sent a second time \(the server ended its answer stream without answering\)/,
    );
    expect(upstream.calls.ended).toBe(2);
    expect(own.upstream("pay")?.reconnects).toBe(before);
    const next = await ownSandbox.execute("return await tools.pay__echo({});");
    expect(next.ok && next.value).toBe("echo");
  });

  it("reports an HTTP error status as the server's answer, with the status, and does not send the call again", async () => {
    const result = await ownSandbox.execute("return await tools.pay__reject({});");
    expect(!result.ok && result.error.message).toMatch(
      /server "pay" answered the call of reject with HTTP 400: .*amount too large/,
    );
    expect(upstream.calls.reject).toBe(1);
  });
});

describe("allow-list and read-only mode", () => {
  it("exposes only the listed tools, and warns about names the server does not have", async () => {
    const seen: string[] = [];
    const own = await McpToolset.connect(
      { mcpServers: { everything: { ...everything(), tools: ["get-sum", "everything__echo", "no-such-tool"] } } },
      { onWarning: (warning) => seen.push(warning) },
    );
    try {
      expect(own.tools.map((tool) => tool.name)).toEqual(["everything__echo", "everything__get_sum"]);
      expect(seen.join("\n")).toContain('names "no-such-tool", which the server does not have');
    } finally {
      await own.close();
    }
  });

  it("keeps only tools annotated readOnlyHint: true", async () => {
    const own = await McpToolset.connect(
      { mcpServers: { paged: { ...paged("--tools", "4"), readOnly: true }, everything: everything() } },
      { readOnly: false },
    );
    const all = await McpToolset.connect({ readOnly: true, mcpServers: { everything: everything() } });
    try {
      expect(own.tools.filter((tool) => tool.server === "paged").map((tool) => tool.toolName)).toEqual([
        "item-0",
        "item-2",
        "wait_for_cancel",
        "stats",
      ]);
      // Only the paged server was read-only in the first config.
      expect(own.tools.some((tool) => tool.toolName === "toggle-simulated-logging")).toBe(true);
      const names = all.tools.map((tool) => tool.toolName);
      expect(names).toContain("get-sum");
      expect(names).not.toContain("toggle-simulated-logging");
      expect(names).not.toContain("gzip-file-as-resource");
      for (const tool of all.tools) expect(tool.annotations?.readOnlyHint).toBe(true);
    } finally {
      await Promise.all([own.close(), all.close()]);
    }
  });
});

describe("clear errors", () => {
  it("names the server and the field of a bad config", () => {
    expect(configError([]).message).toMatch(/^mcp\.json must be a JSON object/);
    expect(configError({ server: {} })).toMatchObject({
      field: "mcpServers",
      message: expect.stringMatching(/no "mcpServers" \(or VS Code's "servers"\) field/),
    });
    expect(configError({ mcpServers: { gh: {} } })).toMatchObject({
      server: "gh",
      message: 'mcp.json: server "gh": needs "command" (a stdio server) or "url" (a Streamable HTTP server)',
    });
    expect(configError({ mcpServers: { gh: { command: "x", args: ["a", 2] } } })).toMatchObject({
      server: "gh",
      field: "args[1]",
      message: 'mcp.json: server "gh": "args[1]" must be a string, got number 2',
    });
    expect(configError({ mcpServers: { gh: { command: "x", env: { TOKEN: 1 } } } })).toMatchObject({
      field: "env.TOKEN",
    });
    expect(configError({ mcpServers: { web: { url: "not a url" } } })).toMatchObject({ server: "web", field: "url" });
    expect(configError({ mcpServers: { web: { url: "ftp://x" } } }).message).toMatch(/must be an http: or https: URL/);
    expect(configError({ mcpServers: { web: { type: "sse", url: "http://x/sse" } } }).message).toMatch(
      /"sse" is not supported/,
    );
    expect(configError({ mcpServers: { web: { url: "http://x", tools: "all" } } })).toMatchObject({ field: "tools" });
    expect(configError({ mcpServers: { both: { command: "x", url: "http://x" } } }).message).toMatch(
      /both "command" and "url"/,
    );
    expect(
      configError({ mcpServers: { gh: { url: "http://x", headers: { Authorization: "Bearer ${GH_TOKEN}" } } } }),
    ).toMatchObject({
      server: "gh",
      field: "headers.Authorization",
      message: expect.stringMatching(/\$\{GH_TOKEN\}, which is not set/),
    });
    expect(configError({ mcpServers: { "my-fs": { command: "a" }, my_fs: { command: "b" } } }).message).toMatch(
      /server "my_fs": its tools would be named my_fs__<tool>, like those of server "my-fs"/,
    );
  });

  it("expands ${VAR} and collects warnings for unknown fields and disabled servers", () => {
    const parsed = parseMcpConfig(
      {
        mcpServers: {
          gh: {
            url: "https://example.com/${PATHPART}",
            headers: { Authorization: "Bearer ${TOKEN}" },
            autoApprove: [],
          },
          off: { command: "x", disabled: true },
          local: { command: "${BIN:-node}", args: ["$${LITERAL}"] },
        },
      },
      { env: { TOKEN: "abc", PATHPART: "mcp" } },
    );
    expect(parsed.servers).toMatchObject([
      { name: "gh", transport: "http", headers: { Authorization: "Bearer abc" } },
      { name: "local", transport: "stdio", command: "node", args: ["${LITERAL}"] },
    ]);
    expect(String((parsed.servers[0] as { url: URL }).url)).toBe("https://example.com/mcp");
    expect(parsed.warnings).toEqual([
      'the config: server "gh": unknown field "autoApprove" ignored',
      'the config: server "off" is disabled and left out',
    ]);
  });

  it("refuses a field that differs from one of its own only in case or separators, instead of ignoring it", () => {
    // Ignoring `readonly` would expose the server's write tools.
    expect(() => parseMcpConfig({ mcpServers: { mem: { command: "x", readonly: true } } })).toThrow(
      'the config: server "mem": unknown field "readonly"; did you mean "readOnly"?',
    );
    expect(() => parseMcpConfig({ mcpServers: { mem: { url: "https://example.com", Tools: ["a"] } } })).toThrow(
      /unknown field "Tools"; did you mean "tools"\?/,
    );
    expect(() => parseMcpConfig({ read_only: true, mcpServers: {} })).toThrow(
      'the config: unknown field "read_only"; did you mean "readOnly"?',
    );
    const error = (() => {
      try {
        parseMcpConfig({ mcpServers: { mem: { command: "x", read_only: true } } });
      } catch (e) {
        return e as McpConfigError;
      }
    })();
    expect(error).toMatchObject({ server: "mem", field: "read_only" });
  });

  it("reports an upstream that does not start with its stderr tail, and serves the others", async () => {
    const down: { server: string; attempts: number }[] = [];
    const set = await McpToolset.connect(
      { mcpServers: { fine: everything(), broken: paged("--fail-start") } },
      { retryInitialMs: 60_000, onDown: (server, state) => down.push({ server, attempts: state.attempts }) },
    );
    try {
      expect(down).toEqual([{ server: "broken", attempts: 1 }]);
      expect(set.tools.some((tool) => tool.server === "fine")).toBe(true);
      expect(set.status().map((s) => [s.server, s.state])).toEqual([
        ["fine", "up"],
        ["broken", "down"],
      ]);
      const upstreamError = set.down[0]?.down?.error as McpUpstreamError;
      expect(upstreamError).toBeInstanceOf(McpUpstreamError);
      expect(upstreamError.server).toBe("broken");
      expect(upstreamError.message).toMatch(
        /^server "broken" did not start: the process exited before finishing the MCP handshake/,
      );
      expect(upstreamError.stderrTail).toContain("fatal: PAGED_TOKEN is not set");
      expect(upstreamError.message).toContain("Its stderr ended with:\n  paged-server: loading settings");
      // Calls to a server that is down fail at once, saying so.
      const upstream = set.upstream("broken") as McpUpstream;
      await expect(upstream.callTool("item-0", {})).rejects.toThrow(
        /^server "broken" is down \(it did not start: the process exited before finishing the MCP handshake\); it is tried again in the background, next in \d+ s$/,
      );
    } finally {
      await set.close();
    }

    const startError = async (config: unknown) => {
      const one = await McpToolset.connect(config, { retryInitialMs: 60_000 });
      await one.close();
      return one.down[0]?.down?.error.message ?? "";
    };
    expect(await startError({ mcpServers: { ghost: { command: "airlock-no-such-command-here" } } })).toMatch(
      /server "ghost" did not start: command "airlock-no-such-command-here" was not found/,
    );
    // spawn() says ENOENT for a missing working directory as for a missing command.
    expect(
      await startError({ mcpServers: { nowhere: { command: process.execPath, cwd: join(folder.dir, "missing") } } }),
    ).toMatch(
      /^server "nowhere" did not start: its working directory "cwd" \(\S+missing\) is not a directory that exists/,
    );
    const port = await freePort();
    expect(await startError({ mcpServers: { web: { url: `http://127.0.0.1:${port}/mcp` } } })).toMatch(
      new RegExp(`server "web" at http://127.0.0.1:${port}/mcp could not be reached`),
    );
  });

  it("reports a tool name collision with both tools", async () => {
    const error = await McpToolset.connect({ mcpServers: { data: paged("--tools", "1", "--collide") } }).catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(McpToolCollisionError);
    // Renaming the server would not help: the message says so by not suggesting it.
    expect((error as Error).message).toBe(
      'Tool name collision: tools "get_value" and "get-value" of server "data" would both be tools.data__get_value. ' +
        'Leave one of them out with the server\'s "tools" allow-list.',
    );
    const twice = await McpToolset.connect({ mcpServers: { data: paged("--tools", "1", "--twice") } }).catch(
      (e: unknown) => e,
    );
    expect((twice as Error).message).toBe(
      'Tool name collision: server "data" lists the tool "item-0" twice (tools.data__item_0). Fix the server, or ' +
        'leave the tool out with the server\'s "tools" allow-list.',
    );
    // The allow-list resolves it.
    const fixed = await McpToolset.connect({
      mcpServers: { data: { ...paged("--tools", "1", "--collide"), tools: ["get-value"] } },
    });
    expect(fixed.tools.map((tool) => tool.toolName)).toEqual(["get-value"]);
    await fixed.close();
  });
});

describe("closing", () => {
  it("stops every stdio server it started", async () => {
    const own = await McpToolset.connect({ mcpServers: { a: everything(), b: paged("--tools", "1") } });
    const pids = own.upstreams.map((upstream) => upstream.pid as number);
    for (const pid of pids) expect(isAlive(pid)).toBe(true);
    await own.close();
    await waitFor(() => pids.every((pid) => !isAlive(pid)), 5000, "the servers to exit");
  });
});
