// Tokens a model reads to learn a 200-tool catalog: as the JSON tool list, as full TypeScript declarations, and as
// the compact index plus one described tool. Build first (`npm run build`), then `node bench/tokens-declarations.mjs`.
// Options: --size N (catalog size, default 200), --tool NAME (the described tool, default edit_file),
// --encoding o200k_base|cl100k_base (default o200k_base).
import { parseArgs } from "node:util";
import { Tiktoken } from "js-tiktoken/lite";
import cl100k_base from "js-tiktoken/ranks/cl100k_base";
import o200k_base from "js-tiktoken/ranks/o200k_base";
import { describeTool, INDEX_THRESHOLD_TOOLS, renderDeclarations } from "../dist/declarations/index.js";
import { runtime } from "./lib.mjs";
import { buildCatalog } from "./tokens-catalog.mjs";

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
const tokens = (text) => encoder.encode(text).length;

const catalog = buildCatalog(Number(values.size));
if (catalog.length <= INDEX_THRESHOLD_TOOLS) throw new Error("the catalog must be larger than the index threshold");

// What an MCP client hands the model: each tool's name, description and schemas, as compact JSON.
const json = JSON.stringify(catalog);
const full = renderDeclarations({ tools: catalog }, { indexThreshold: Number.POSITIVE_INFINITY });
const index = renderDeclarations({ tools: catalog });
const described = describeTool(catalog, values.tool);
const indexPlusOne = `${index}\n\n${described}`;

const rows = [
  ["JSON tool list", json],
  ["full declarations", full],
  [`index + describeTool("${values.tool}")`, indexPlusOne],
  ["  index alone", index],
  ["  one described tool", described],
];
const base = tokens(json);
console.log(`${catalog.length} tools, ${values.encoding} tokens, ${runtime}\n`);
console.log(`${"form".padEnd(40)}${"tokens".padStart(9)}${"chars".padStart(10)}${"vs JSON".padStart(10)}`);
for (const [label, text] of rows) {
  const count = tokens(text);
  const ratio = `${((100 * count) / base).toFixed(1)}%`;
  console.log(
    `${label.padEnd(40)}${String(count).padStart(9)}${String(text.length).padStart(10)}${ratio.padStart(10)}`,
  );
}
