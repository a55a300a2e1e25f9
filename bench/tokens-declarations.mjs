// Tokens a model reads to learn a 200-tool catalog: as the JSON tool list, as full TypeScript declarations, as the
// compact index plus one described tool, and through `airlock serve`: the gateway's whole tool list (search,
// describe, execute with its description) plus one `describe` answer. For the gateway the catalog is served by real
// MCP servers (test/fixtures/mcp/catalog-server.mjs), one per group of tools, as a client would configure them.
// Build first (`npm run build`), then `node bench/tokens-declarations.mjs`.
// Options: --size N (catalog size, default 200), --tool NAME (the described tool, default edit_file),
// --encoding o200k_base|cl100k_base (default o200k_base).
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import { Tiktoken } from "js-tiktoken/lite";
import cl100k_base from "js-tiktoken/ranks/cl100k_base";
import o200k_base from "js-tiktoken/ranks/o200k_base";
import { describeTool, INDEX_THRESHOLD_TOOLS, renderDeclarations } from "../dist/declarations/index.js";
import { McpGateway } from "../dist/mcp.js";
import { runtime } from "./lib.mjs";
import { buildCatalog, catalogServers } from "./tokens-catalog.mjs";

/** The reduction the gateway's form is held to against the JSON tool list. */
const TARGET_REDUCTION = 0.95;

const { values } = parseArgs({
  options: {
    size: { type: "string", default: "200" },
    tool: { type: "string", default: "edit_file" },
    encoding: { type: "string", default: "o200k_base" },
  },
});
const ranks = { o200k_base, cl100k_base }[values.encoding];
if (ranks === undefined) throw new Error(`unknown encoding ${values.encoding}`);
const encoder = new Tiktoken(ranks);
const tokens = (text) => encoder.encode(text, [], []).length;

const size = Number(values.size);
const catalog = buildCatalog(size);
if (catalog.length <= INDEX_THRESHOLD_TOOLS) throw new Error("the catalog must be larger than the index threshold");

// What an MCP client hands the model: each tool's name, description and schemas, as compact JSON.
const json = JSON.stringify(catalog);
const full = renderDeclarations({ tools: catalog }, { indexThreshold: Number.POSITIVE_INFINITY });
const index = renderDeclarations({ tools: catalog });
const described = describeTool(catalog, values.tool);
const indexPlusOne = `${index}\n\n${described}`;

/** What a client sends the model for a list of MCP tools (the shape of the Anthropic and OpenAI tool definitions). */
const modelFacing = (tools) =>
  JSON.stringify(tools.map(({ name, description, inputSchema }) => ({ name, description, input_schema: inputSchema })));

// The gateway in front of the same catalog, served by one MCP server per group.
const folder = mkdtempSync(join(tmpdir(), "airlock-bench-"));
const server = fileURLToPath(new URL("../test/fixtures/mcp/catalog-server.mjs", import.meta.url));
const groups = catalogServers(size);
const mcpServers = {};
for (const { server: name, tools } of groups) {
  const file = join(folder, `${name}.json`);
  writeFileSync(file, JSON.stringify({ tools }));
  mcpServers[name] = { command: process.execPath, args: [server, file] };
}
const owner = groups.find((group) => group.tools.some((tool) => tool.name === values.tool));
if (owner === undefined) throw new Error(`no tool ${values.tool} in the catalog`);
let gatewayList;
let gatewayDescribed;
let form;
const gateway = await McpGateway.start({ mcpServers }, { poolSize: 1 });
try {
  const [serverSide, clientSide] = InMemoryTransport.createLinkedPair();
  await gateway.createServer().connect(serverSide);
  const client = new Client({ name: "bench", version: "1.0.0" });
  await client.connect(clientSide);
  const { tools } = await client.listTools();
  gatewayList = modelFacing(tools);
  const answer = await client.callTool({ name: "describe", arguments: { names: [`${owner.server}__${values.tool}`] } });
  gatewayDescribed = answer.content.map((block) => block.text).join("\n");
  form = /The \d+ tools by server/.test(tools.find((tool) => tool.name === "execute").description)
    ? "one line per server"
    : "declarations or signatures";
  await client.close();
} finally {
  await gateway.close();
  rmSync(folder, { recursive: true, force: true });
}

const rows = [
  ["JSON tool list", json],
  ["full declarations", full],
  [`index + describeTool("${values.tool}")`, indexPlusOne],
  ["  index alone", index],
  ["  one described tool", described],
  [`gateway tools/list + describe`, `${gatewayList}\n${gatewayDescribed}`],
  ["  gateway tools/list", gatewayList],
  ["  describe answer", gatewayDescribed],
];
const base = tokens(json);
console.log(
  `${catalog.length} tools (${groups.length} servers for the gateway), ${values.encoding} tokens, ${runtime}\n`,
);
console.log(`${"form".padEnd(40)}${"tokens".padStart(9)}${"chars".padStart(10)}${"vs JSON".padStart(10)}`);
for (const [label, text] of rows) {
  const count = tokens(text);
  const ratio = `${((100 * count) / base).toFixed(1)}%`;
  console.log(
    `${label.padEnd(40)}${String(count).padStart(9)}${String(text.length).padStart(10)}${ratio.padStart(10)}`,
  );
}
const gatewayTokens = tokens(`${gatewayList}\n${gatewayDescribed}`);
const reduction = 1 - gatewayTokens / base;
console.log(
  `\nThe gateway's execute description lists the tools as ${form}. Description and one described tool: ${gatewayTokens} of ${base} tokens, ${(100 * reduction).toFixed(1)}% fewer (target: at least ${100 * TARGET_REDUCTION}%).`,
);
if (reduction < TARGET_REDUCTION) process.exitCode = 1;
