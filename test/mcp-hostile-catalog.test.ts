/**
 * An upstream chooses its tools' names, descriptions and schemas, and the gateway renders, counts and searches them
 * on its one thread. Each case here held that thread for seconds to minutes before: a description of 30,000
 * letters kept the gateway from listening (its token count was quadratic), descriptions of spaces before a letter
 * or of capitals took seconds per `search` and `describe` (quadratic regular expressions), and 10,000 tools took
 * over 20 s to register (each new tool was checked against every other). The servers are real (the catalog fixture),
 * driven by a real MCP client.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { InlineCodemodeSandbox, renderDeclarations } from "airlock-codemode";
import { describeTool, searchTools } from "airlock-codemode/declarations";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tempFolder } from "./fixtures/mcp/servers.ts";
import { gatewayWithClients } from "./helpers/gateway-clients.ts";

const CATALOG_SERVER = new URL("./fixtures/mcp/catalog-server.mjs", import.meta.url).pathname;

/** Seeded random lowercase letters: one word, as no space breaks it. */
function letters(length: number, seed: number): string {
  let state = seed;
  let out = "";
  for (let i = 0; i < length; i++) {
    state = (state * 1_103_515_245 + 12_345) % 2_147_483_648;
    out += String.fromCharCode(97 + (Math.floor(state / 65_536) % 26));
  }
  return out;
}

const HOSTILE_DESCRIPTIONS = {
  spaces: `${" ".repeat(300_000)}a`,
  capitals: "A".repeat(300_000),
  letters: letters(30_000, 11),
};

function tool(name: string, description: string) {
  return {
    name,
    description,
    inputSchema: { type: "object", properties: { id: { type: "string", description } }, required: ["id"] },
  };
}

let folder: { dir: string; cleanup: () => void };
beforeAll(() => {
  folder = tempFolder();
});
afterAll(() => folder?.cleanup());

/** A gateway in front of one catalog server listing `tools` (and resource templates), and a connected client. */
async function gatewayFor(tools: unknown[], resourceTemplates?: unknown[]) {
  const file = join(folder.dir, `catalog-${tools.length}-${Date.now()}.json`);
  writeFileSync(file, JSON.stringify({ tools, resourceTemplates }));
  const started = Date.now();
  const gateway = await gatewayWithClients(
    { mcpServers: { big: { command: process.execPath, args: [CATALOG_SERVER, file] } } },
    { poolSize: 1 },
  );
  const startMs = Date.now() - started;
  const { client, call } = await gateway.connect("catalog");
  /** Another program still gets its answer. */
  const servesPrograms = async () =>
    expect((await call("execute", { code: "return 40 + 2" })).structuredContent).toMatchObject({ ok: true, value: 42 });
  return { client, call, servesPrograms, startMs, close: gateway.close };
}

const textOf = (result: CallToolResult) =>
  result.content
    .filter((block) => block.type === "text")
    .map((block) => (block as { text: string }).text)
    .join("\n");

describe("hostile tool descriptions", () => {
  it("render, search and describe in linear time in the library", () => {
    const catalog = Object.entries(HOSTILE_DESCRIPTIONS).map(([name, description]) => tool(name, description));
    catalog.push(tool("read_file", "Reads a file."));
    const started = Date.now();
    expect(renderDeclarations({ tools: catalog })).toContain("read_file(args: {");
    expect(searchTools(catalog, "read file").map((result) => result.name)).toEqual(["read_file"]);
    expect(searchTools(catalog, "AAAA").map((result) => result.name)).toEqual([]);
    expect(describeTool(catalog, "capitals")).toContain("capitals(args: {");
    expect(describeTool(catalog, "spaces")).toContain("spaces(args: {");
    // Each of these took 7-10 s with 100,000 characters, and grew with the square.
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it("render a schema of 20,000 allOf members in linear time", () => {
    // Merging one member at a time copied every property so far: 2,000 members took 1.3 s, 20,000 minutes.
    const members = Array.from({ length: 20_000 }, (_, i) => ({
      type: "object",
      properties: { [`field_${i}`]: { type: "string" } },
      required: [`field_${i}`],
    }));
    const catalog = [{ name: "wide", description: "Takes many fields.", inputSchema: { allOf: members } }];
    const started = Date.now();
    // Past the argument type's size budget, the object is declared by its shape alone.
    expect(renderDeclarations({ tools: catalog })).toContain(
      "wide(args: { [key: string]: unknown }): Promise<unknown>;",
    );
    expect(searchTools(catalog, "takes fields").map((result) => result.name)).toEqual(["wide"]);
    expect(describeTool(catalog, "wide")).toContain("wide(args: {");
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it("leave the gateway listening, searching, describing and running programs", async () => {
    const catalog = Object.entries(HOSTILE_DESCRIPTIONS).map(([name, description]) => tool(name, description));
    catalog.push(tool("read_file", "Reads a file."));
    const { client, call, servesPrograms, startMs, close } = await gatewayFor(catalog);
    try {
      // The 30,000-letter description alone kept it from listening for 12-20 s.
      expect(startMs).toBeLessThan(20_000);
      const started = Date.now();
      const listed = await client.listTools();
      expect(listed.tools.map((t) => t.name)).toEqual(["search", "describe", "execute"]);
      expect(textOf(await call("search", { query: "read file" }))).toContain("big__read_file");
      expect(textOf(await call("describe", { names: ["big__capitals", "big__spaces", "big__letters"] }))).toContain(
        "big__capitals(args: {",
      );
      const found = await call("execute", {
        code: 'const found = await search("capitals"); const doc = await describe("big__spaces"); return [found.length, doc.includes("big__spaces(")];',
      });
      expect(found.structuredContent).toMatchObject({ ok: true, value: [1, true] });
      await servesPrograms();
      expect(Date.now() - started).toBeLessThan(20_000);
    } finally {
      await close();
    }
  });
});

describe("an upstream with 10,000 tools", () => {
  const many = Array.from({ length: 10_000 }, (_, i) => tool(`tool_${i}`, `Looks up record ${i} of the catalog.`));

  it("registers its tools in linear time", () => {
    const sandbox = new InlineCodemodeSandbox();
    const started = Date.now();
    // Twice as many as the gateway test: each tool was checked against every registered one (minutes for these).
    for (let i = 0; i < 20_000; i++) sandbox.registerTool({ name: `tool-${i}`, execute: () => i });
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(() => sandbox.registerTool({ name: "tool_5", execute: () => 0 })).toThrow(
      'tools "tool-5" and "tool_5" would both be tools.tool_5; rename one of them',
    );
    expect(() => sandbox.registerTool({ name: "tool-5", execute: () => 0 })).toThrow(
      'a tool named "tool-5" is already registered',
    );
    expect(sandbox.unregisterTool("tool-5")).toBe(true);
    sandbox.registerTool({ name: "tool_5", execute: () => 0 });
  });

  it("lets the gateway listen within seconds, and serves its tools", async () => {
    const { call, startMs, close } = await gatewayFor(many);
    try {
      // Over 20 s before (1,000 tools: 1.6 s).
      expect(startMs).toBeLessThan(30_000);
      expect(textOf(await call("search", { query: "record 9876" }))).toContain("big__tool_9876");
      const run = await call("execute", { code: 'return await tools.big__tool_9999({ id: "x" });' });
      expect(run.structuredContent).toMatchObject({ ok: true, value: { tool: "tool_9999", arguments: { id: "x" } } });
    } finally {
      await close();
    }
  });
});

describe("hostile resource templates", () => {
  it("route a read in linear time, and the gateway goes on serving", async () => {
    const { client, servesPrograms, close } = await gatewayFor(
      [tool("read_file", "Reads a file.")],
      [
        // As patterns, each tried every split of a URI that does not match: 2,000 characters took 7 s, 8,000 never ended.
        { name: "three", uriTemplate: "{a}{b}{c}" },
        { name: "separated", uriTemplate: "{a}x{b}x{c}x{d}" },
        { name: "many", uriTemplate: `r://${"{a}x".repeat(120)}` },
        { name: "files", uriTemplate: "repo://{owner}/{name}/contents{+path}" },
      ],
    );
    try {
      const started = Date.now();
      expect((await client.listResourceTemplates()).resourceTemplates).toHaveLength(4);
      for (const uri of [`${"x".repeat(8000)}/`, `r://${"x".repeat(8180)}/`]) {
        await expect(client.readResource({ uri })).rejects.toMatchObject({ code: -32002 });
      }
      const read = await client.readResource({ uri: "repo://acme/widgets/contents/src/index.ts" });
      expect(read.contents[0]).toMatchObject({ text: "read repo://acme/widgets/contents/src/index.ts" });
      await servesPrograms();
      expect(Date.now() - started).toBeLessThan(20_000);
    } finally {
      await close();
    }
  });
});
