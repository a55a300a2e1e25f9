/**
 * What MCP clients expect of the gateway besides its three tools, driven by the official SDK's `Client` against real
 * upstream servers (the npm reference servers): logging and progress while a program runs, the upstream servers'
 * resources and prompts (through the gateway and from programs), search and describe inside programs, the client's
 * roots forwarded upstream, and execute's annotations and structured result.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import {
  type CallToolResult,
  ListRootsRequestSchema,
  LoggingMessageNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";
import { MAX_LOG_CHARS_PER_RUN, McpGateway } from "airlock-codemode/mcp";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { everything, filesystem, paged, tempFolder } from "./fixtures/mcp/servers.ts";

let folder: { dir: string; cleanup: () => void };
let gateway: McpGateway;

beforeAll(async () => {
  folder = tempFolder({ "configured.txt": "in the configured folder\n" });
  mkdirSync(join(folder.dir, "configured"));
  mkdirSync(join(folder.dir, "root"));
  writeFileSync(join(folder.dir, "root", "rooted.txt"), "in the client's root\n");
  gateway = await McpGateway.start(
    { mcpServers: { everything: everything(), files: filesystem(join(folder.dir, "configured")) } },
    { poolSize: 1, timeoutMs: 20_000 },
  );
});

afterAll(async () => {
  await gateway?.close();
  folder?.cleanup();
});

function textOf(result: unknown): string {
  return (result as CallToolResult).content
    .filter((block) => block.type === "text")
    .map((block) => (block as { text: string }).text)
    .join("\n");
}

/** A client connected to a new session of the gateway, in memory. */
async function connect(options: ConstructorParameters<typeof Client>[1] = {}): Promise<Client> {
  const [serverSide, clientSide] = InMemoryTransport.createLinkedPair();
  await gateway.createServer().connect(serverSide);
  const client = new Client({ name: "protocol-test", version: "1.0.0" }, options);
  await client.connect(clientSide);
  return client;
}

describe("logging and progress", () => {
  it("sends console output as log messages while the program runs, once the client asked for them", async () => {
    const client = await connect();
    const events: string[] = [];
    client.setNotificationHandler(LoggingMessageNotificationSchema, (notification) => {
      events.push(
        `log ${notification.params.level} ${notification.params.logger}: ${String(notification.params.data)}`,
      );
    });
    // The slow call comes after the lines: they must arrive before the result does.
    const code = [
      'console.log("first line");',
      'text("not a console line");',
      'console.warn("second line");',
      "await tools.everything__trigger_long_running_operation({ duration: 1, steps: 2 });",
      'return "done";',
    ].join("\n");
    try {
      const quiet = await client.callTool({ name: "execute", arguments: { code } });
      events.push(`result ${textOf(quiet).split("\n").at(-1)}`);
      expect(events).toEqual(["result done"]);
      events.length = 0;

      await client.setLoggingLevel("info");
      const run = await client.callTool({ name: "execute", arguments: { code } });
      events.push(`result ${textOf(run).split("\n").at(-1)}`);
      expect(events).toEqual(["log info console: first line", "log info console: second line", "result done"]);
      events.length = 0;

      // Above info, console lines are not sent.
      await client.setLoggingLevel("warning");
      await client.callTool({ name: "execute", arguments: { code: 'console.log("hidden"); return 1' } });
      expect(events).toEqual([]);
    } finally {
      await client.close();
    }
  });

  it(`sends at most ${MAX_LOG_CHARS_PER_RUN} characters of console lines as log messages, the rest only in the result`, async () => {
    const client = await connect();
    const logged: string[] = [];
    client.setNotificationHandler(LoggingMessageNotificationSchema, (notification) => {
      logged.push(String(notification.params.data));
    });
    try {
      await client.setLoggingLevel("info");
      // 16 lines of 100,000 characters: 1.6 million in all.
      const run = await client.callTool({
        name: "execute",
        arguments: { code: 'for (let i = 0; i < 16; i++) console.log(String(i % 10).repeat(100000)); return "done";' },
      });
      expect(run.structuredContent).toMatchObject({ ok: true });
      const note = "\n(further console output is only in the result)";
      expect(logged).toHaveLength(3);
      expect(logged.slice(0, 2)).toEqual(["0".repeat(100000), "1".repeat(100000)]);
      expect(logged[2]).toBe(`${"2".repeat(MAX_LOG_CHARS_PER_RUN - 200000)}${note}`);
    } finally {
      await client.close();
    }
  });

  it("reports progress to a request with a progress token, from the program's calls and output", async () => {
    const client = await connect();
    const progress: { progress: number; message?: string }[] = [];
    try {
      const run = await client.callTool(
        {
          name: "execute",
          arguments: {
            code: [
              "for (let i = 0; i < 3; i++) {",
              "  await tools.everything__trigger_long_running_operation({ duration: 0.4, steps: 1 });",
              '  console.log("step " + i);',
              "}",
              'return "finished";',
            ].join("\n"),
          },
        },
        undefined,
        { onprogress: (p) => progress.push({ progress: p.progress, ...(p.message ? { message: p.message } : {}) }) },
      );
      expect(textOf(run)).toContain("finished");
      expect(progress.length).toBeGreaterThanOrEqual(3);
      // Progress only grows, and says what the program did so far.
      for (let i = 1; i < progress.length; i++) {
        expect(progress[i]?.progress).toBeGreaterThan(progress[i - 1]?.progress as number);
      }
      expect(progress.at(-1)?.message).toMatch(
        /^running for \d+\.\d s: 3 tool calls \(\d answered\), \d lines? printed$/,
      );
      expect(progress.some((p) => /1 tool call \(0 answered\)/.test(p.message ?? ""))).toBe(true);
    } finally {
      await client.close();
    }
  });
});

describe("upstream resources and prompts", () => {
  it("lists and reads the servers' resources and prompts through the gateway, named <server>__<name>", async () => {
    const client = await connect();
    try {
      const { resources } = await client.listResources();
      const architecture = resources.find((r) => r.uri === "demo://resource/static/document/architecture.md");
      expect(architecture).toMatchObject({
        name: "everything__architecture.md",
        mimeType: "text/markdown",
        _meta: { "dev.airlock/server": "everything" },
      });
      const read = await client.readResource({ uri: "demo://resource/static/document/architecture.md" });
      expect((read.contents[0] as { text: string }).text.length).toBeGreaterThan(100);
      // A URI of a template is routed to the server whose template matches it.
      const { resourceTemplates } = await client.listResourceTemplates();
      expect(resourceTemplates.map((t) => t.uriTemplate)).toContain("demo://resource/dynamic/text/{resourceId}");
      const dynamic = await client.readResource({ uri: "demo://resource/dynamic/text/7" });
      expect((dynamic.contents[0] as { text: string }).text).toContain("7");
      await expect(client.readResource({ uri: "nowhere://nothing" })).rejects.toMatchObject({ code: -32002 });

      const { prompts } = await client.listPrompts();
      expect(prompts.map((p) => p.name)).toEqual(
        expect.arrayContaining(["everything__simple-prompt", "everything__args-prompt"]),
      );
      const prompt = await client.getPrompt({ name: "everything__args-prompt", arguments: { city: "Oslo" } });
      expect(JSON.stringify(prompt.messages)).toContain("Oslo");
      await expect(client.getPrompt({ name: "simple-prompt" })).rejects.toMatchObject({ code: -32602 });
    } finally {
      await client.close();
    }
  });

  it("lets programs list and read resources, and call search and describe", async () => {
    const client = await connect();
    try {
      const run = await client.callTool({
        name: "execute",
        arguments: {
          code: [
            'const listed = await resources.list("everything");',
            'const doc = listed.find((r) => r.name === "architecture.md");',
            'const [content] = await resources.read("everything", doc.uri);',
            'const found = await search("sum of two numbers", 3);',
            'const declaration = await describe("everything__get_sum");',
            "return {",
            "  servers: [...new Set(listed.map((r) => r.server))],",
            "  text: content.text.length > 100, mimeType: content.mimeType,",
            "  found: found.map((r) => r.name), server: found[0].server,",
            "  declares: declaration.includes('everything__get_sum(args: {'),",
            "};",
          ].join("\n"),
        },
      });
      expect(run.isError, textOf(run)).toBeFalsy();
      expect((run.structuredContent as { value?: unknown } | undefined)?.value).toEqual({
        servers: ["everything"],
        text: true,
        mimeType: "text/markdown",
        found: expect.arrayContaining(["everything__get_sum"]),
        server: "everything",
        declares: true,
      });
      const bad = await client.callTool({ name: "execute", arguments: { code: "return await resources.read(1, 2)" } });
      expect(textOf(bad)).toContain("resources.read takes a server name and a URI");
      const unknown = await client.callTool({
        name: "execute",
        arguments: { code: 'return await describe("everything__get_summ")' },
      });
      expect(textOf(unknown)).toContain('Unknown tool "everything__get_summ". Did you mean "everything__get_sum"');
    } finally {
      await client.close();
    }
  });
});

describe("roots", () => {
  it("hands the client's roots to the upstream servers that ask, and tells them when they change", async () => {
    const root = join(folder.dir, "root");
    let roots = [{ uri: `file://${root}`, name: "the client's root" }];
    const client = new Client(
      { name: "roots-test", version: "1.0.0" },
      { capabilities: { roots: { listChanged: true } } },
    );
    client.setRequestHandler(ListRootsRequestSchema, () => ({ roots }));
    const [serverSide, clientSide] = InMemoryTransport.createLinkedPair();
    await gateway.createServer().connect(serverSide);
    await client.connect(clientSide);
    const run = (code: string) => client.callTool({ name: "execute", arguments: { code } });
    try {
      // The everything server lists the roots it got; the filesystem server takes them as its allowed directories.
      const waitForRoots = async (expected: string) => {
        for (let i = 0; i < 100; i++) {
          const listed = textOf(await run("return await tools.everything__get_roots_list({})"));
          if (listed.includes(expected)) return listed;
          await new Promise((resolve) => setTimeout(resolve, 50));
        }
        throw new Error(`the everything server never listed ${expected}`);
      };
      expect(await waitForRoots(root)).toContain("the client's root");
      // Each server asks for the roots on its own time: the filesystem server may take them a little later.
      const readRooted = () =>
        run(
          `return (await tools.files__read_text_file({ path: ${JSON.stringify(join(root, "rooted.txt"))} })).content`,
        );
      let rooted = await readRooted();
      for (let i = 0; i < 100 && textOf(rooted).includes("Access denied"); i++) {
        await new Promise((resolve) => setTimeout(resolve, 50));
        rooted = await readRooted();
      }
      expect(textOf(rooted)).toBe("in the client's root\n");

      roots = [{ uri: `file://${join(folder.dir, "configured")}`, name: "another root" }];
      await client.sendRootsListChanged();
      expect(await waitForRoots("another root")).not.toContain("the client's root");
    } finally {
      await client.close();
    }
  });
});

describe("execute's annotations and result", () => {
  it("derives the annotations from the tools it can reach", async () => {
    const client = await connect();
    try {
      const execute = (await client.listTools()).tools.find((tool) => tool.name === "execute");
      // The everything and filesystem servers have tools that write, and do not say they are closed-world.
      expect(execute?.annotations).toEqual({
        title: "Run a program against the tools",
        readOnlyHint: false,
        destructiveHint: true,
        idempotentHint: false,
        openWorldHint: true,
      });
    } finally {
      await client.close();
    }
    const readOnly = await McpGateway.start(
      { mcpServers: { paged: paged("--tools", "4") } },
      { readOnly: true, poolSize: 1 },
    );
    try {
      expect(readOnly.executeAnnotations()).toEqual({
        title: "Run a program against the tools",
        readOnlyHint: true,
        destructiveHint: false,
        idempotentHint: true,
        openWorldHint: true,
      });
    } finally {
      await readOnly.close();
    }
  });

  it("leaves a value out of the structured result when its text was cut, and counts the calls", async () => {
    const client = await connect();
    try {
      const run = await client.callTool({
        name: "execute",
        arguments: {
          code: [
            '// @options: {"max_output_tokens": 40}',
            'await tools.everything__echo({ message: "a" });',
            "await tools.everything__get_sum({ a: 1, b: 2 }).catch(() => 0);",
            'await tools.everything__echo({}).catch(() => "refused");',
            'console.log("short line");',
            'return "word ".repeat(200);',
          ].join("\n"),
        },
      });
      expect(run.structuredContent).toMatchObject({
        ok: true,
        output: "short line",
        truncated: true,
        calls: { total: 3, failed: 1, cancelled: 0, byTool: { everything__echo: 2, everything__get_sum: 1 } },
      });
      expect(run.structuredContent).not.toHaveProperty("value");
    } finally {
      await client.close();
    }
  });
});
