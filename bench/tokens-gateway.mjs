// Tokens an MCP client loads into the model's context to offer the tools of real MCP servers: every upstream tool
// listed directly, against the three tools of `airlock serve` (search, describe, execute) in front of the same
// servers. The servers are the npm reference servers, started here as child processes. Build first
// (`npm run build`), then `node bench/tokens-gateway.mjs`.
//
// A tool costs what a client sends the model for it: its name, description and input schema as JSON (the shape of
// a tool definition in the Anthropic and OpenAI APIs; clients leave out title, annotations and output schema).
// "gateway" is the default, whose execute description carries full declarations, else one-line signatures, else
// one line per server, whichever fits DEFAULT_DECLARATIONS_MAX_TOKENS; "gateway, servers" and "gateway, counts"
// force the smaller forms that larger catalogs get.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import { Tiktoken } from "js-tiktoken/lite";
import cl100k_base from "js-tiktoken/ranks/cl100k_base";
import o200k_base from "js-tiktoken/ranks/o200k_base";
import { renderToolSignatures } from "../dist/declarations/index.js";
import { McpGateway, McpToolset } from "../dist/mcp.js";
import { runtime } from "./lib.mjs";

const root = fileURLToPath(new URL("..", import.meta.url));
const modules = join(root, "node_modules", "@modelcontextprotocol");
const folder = mkdtempSync(join(tmpdir(), "airlock-bench-"));
const servers = {
  everything: { command: process.execPath, args: [join(modules, "server-everything", "dist", "index.js"), "stdio"] },
  filesystem: { command: process.execPath, args: [join(modules, "server-filesystem", "dist", "index.js"), folder] },
  memory: {
    command: process.execPath,
    args: [join(modules, "server-memory", "dist", "index.js")],
    env: { MEMORY_FILE_PATH: join(folder, "memory.jsonl") },
  },
};

const encoders = { o200k_base: new Tiktoken(o200k_base), cl100k_base: new Tiktoken(cl100k_base) };
const tokens = (encoding, text) => encoders[encoding].encode(text, [], []).length;

/** What a client sends the model for a list of MCP tools. */
const modelFacing = (tools) =>
  JSON.stringify(tools.map(({ name, description, inputSchema }) => ({ name, description, input_schema: inputSchema })));

/** The tools/list of a gateway in front of `config`, as a client receives it. */
async function gatewayTools(toolset, options) {
  const gateway = new McpGateway(toolset, { ...options, poolSize: 1 });
  const [serverSide, clientSide] = InMemoryTransport.createLinkedPair();
  const server = gateway.createServer();
  await server.connect(serverSide);
  const client = new Client({ name: "bench", version: "1.0.0" });
  await client.connect(clientSide);
  const { tools } = await client.listTools();
  await client.close();
  await gateway.close();
  return tools;
}

/** The execute description's forms: the default for the catalog, one line per server, the servers' counts. */
const variants = [
  ["gateway", () => ({})],
  ["gateway, servers", (tools) => ({ declarationsMaxTokens: tokens("o200k_base", renderToolSignatures(tools)) - 1 })],
  ["gateway, counts", () => ({ declarationsMaxTokens: 0 })],
];

const rows = [];
const sets = [...Object.keys(servers).map((name) => [name]), Object.keys(servers)];
try {
  for (const names of sets) {
    const config = { mcpServers: Object.fromEntries(names.map((name) => [name, servers[name]])) };
    const toolset = await McpToolset.connect(config);
    // Every tool the servers list (task-only tools included: a client would list them too).
    const listed = [];
    for (const upstream of toolset.upstreams) listed.push(...(await upstream.listTools()));
    const row = { label: names.length === 1 ? names[0] : "all three", tools: listed.length, forms: {} };
    row.forms.direct = modelFacing(listed);
    for (const [label, options] of variants)
      row.forms[label] = modelFacing(await gatewayTools(toolset, options(toolset.tools)));
    await toolset.close();
    rows.push(row);
  }
} finally {
  rmSync(folder, { recursive: true, force: true });
}

for (const encoding of Object.keys(encoders)) {
  console.log(
    `\n${encoding} tokens a client loads to offer the tools (name, description, input schema as JSON), ${runtime}\n`,
  );
  const header = ["servers", "tools", "direct", ...variants.map(([label]) => label)];
  const widths = [12, 6, 9, 16, 18, 17];
  console.log(header.map((cell, i) => (i === 0 ? cell.padEnd(widths[i]) : cell.padStart(widths[i]))).join(""));
  for (const row of rows) {
    const direct = tokens(encoding, row.forms.direct);
    const cells = [row.label, String(row.tools), String(direct)];
    for (const [label] of variants) {
      const count = tokens(encoding, row.forms[label]);
      cells.push(`${count} (${((100 * count) / direct).toFixed(0)}%)`);
    }
    console.log(cells.map((cell, i) => (i === 0 ? cell.padEnd(widths[i]) : cell.padStart(widths[i]))).join(""));
  }
}
console.log(
  "\nThe gateway's percentages are of the direct listing. describe returns a tool's full declaration on demand.",
);
