/**
 * What `execute`'s description tells a model: the rules of a program, and the tools in the largest form that fits a
 * token budget (counted with the real tokenizer, o200k_base):
 * 1. the full declarations (parameters documented, result types), for small catalogs;
 * 2. one-line signatures (argument names and types, result types), for catalogs of tens of tools: enough to write
 *    the program without asking for more;
 * 3. one line per server naming its tools, for large catalogs: enough to find tools with search and describe,
 *    which programs can call too; past the budget even that is cut to the servers' tool counts.
 * Servers that are down are named in every form.
 */
import { renderDeclarations, renderToolOverview, renderToolSignatures } from "../declarations/index.ts";
import { MCP_TOOL_SEPARATOR } from "../upstream/tool-names.ts";
import type { McpTool, McpToolset } from "../upstream/toolset.ts";
import { countTokensNow } from "./tokens.ts";

/**
 * Default budget of the tools' part of `execute`'s description, in tokens: the three servers of the tests (36
 * tools) fit as signatures, a 200-tool catalog falls back to its servers (see bench/tokens-declarations.mjs).
 */
export const DEFAULT_DECLARATIONS_MAX_TOKENS = 2_000;

/** Which form the tools took. */
export type DeclarationsForm = "declarations" | "signatures" | "servers" | "counts";

export interface DescriptionInput {
  toolset: McpToolset;
  tools: readonly McpTool[];
  timeoutMs: number;
  maxOutputTokens: number;
  maxTokens: number;
  /** Programs have search(), describe() and resources (the gateway's own sandbox). */
  programFunctions: boolean;
  /** The gateway has a store: a client that cannot be asked gets a run that waits (see waiting.ts). */
  waiting?: boolean;
}

/** `execute`'s whole description. */
export function executeDescription(input: DescriptionInput): string {
  const servers = input.toolset.upstreams.map((u) => JSON.stringify(u.name)).join(", ") || "(none)";
  const functions = input.programFunctions
    ? "- search(words) and describe(name) work inside programs too (search gives data, describe a declaration); resources.list(server?) and resources.read(server, uri) read the servers' resources."
    : undefined;
  const rules = [
    `Run a JavaScript program (TypeScript types allowed) in a sandbox whose only way out is the tools of the MCP servers ${servers}. Do all the steps in one program: intermediate results stay in the sandbox; only what it prints and returns comes back.`,
    "",
    "The program is the body of an async function (top-level await and return).",
    `- tools.<server>${MCP_TOOL_SEPARATOR}<tool>(args: object) calls a tool; characters other than letters, digits, _ and $ in the names become _ (tool "get-sum" of server "math": tools.math${MCP_TOOL_SEPARATOR}get_sum).`,
    "- A call resolves to the tool's structured result, else its text (JSON-parsed when JSON); several content blocks give an array; images are { type: \"image\", data, mimeType }. Tool errors reject with the server's message. Use Promise.all for independent calls.",
    "- Print with text(value) or console.log(); show an image with image(img); the return value comes last (JSON unless a string).",
    "- store(key, value) / load(key) keep JSON values across executions in this session.",
    ...(functions === undefined ? [] : [functions]),
    ...approvalRule(input.tools, input.waiting === true),
    "- No fetch, require, import, process, files or timers.",
    `- Optional first line: // @options: {"timeout_ms": 30000, "max_output_tokens": 4000} (limits here: ${input.timeoutMs} ms, ${input.maxOutputTokens} tokens; longer text is cut).`,
    "- Failures return the error kind (script, timeout, aborted, sandbox), message and stack (codemode.js:<line>).",
  ].join("\n");
  return `${rules}\n\n${toolsBlock(input).text}`;
}

/** Gated tools named in the description at most; the rest are counted. */
const MAX_GATED_TOOLS_NAMED = 20;

/** The rule for tools whose calls a person approves, when there are any (see upstream/approval.ts). */
function approvalRule(tools: readonly McpTool[], waiting: boolean): string[] {
  const gated = tools.filter((tool) => tool.needsApproval).map((tool) => `tools.${tool.name}`);
  if (gated.length === 0) return [];
  const more = gated.length - MAX_GATED_TOOLS_NAMED;
  const named = gated.slice(0, MAX_GATED_TOOLS_NAMED).join(", ") + (more > 0 ? ` and ${more} more` : "");
  return [
    `- A person approves each call of ${named} before it is sent (asked through your MCP client); a call that is not approved is not sent and rejects with an error whose code is "GUARD_BLOCKED": catch it to go on without it.`,
    ...(waiting
      ? [
          `- If your client cannot be asked, the run stops at such a call and execute answers that it waits, with its id and the command a person runs to approve it. Once they did, call execute again with exactly the same code and "resume": "<id>": the program runs again from the start, the calls it already made are answered as before without being sent again, and it goes on from there.`,
        ]
      : []),
  ];
}

/** The tools' part of the description, in the largest form within `maxTokens`. */
export function toolsBlock(input: DescriptionInput): { form: DeclarationsForm; text: string } {
  const { tools, maxTokens, toolset } = input;
  const down = downLines(toolset);
  if (tools.length === 0) return { form: "declarations", text: `No tools are available.${down}` };
  // Counted only as far as the budget: a full declaration of a large catalog is not counted to its end.
  const fits = (text: string) => countTokensNow(text, maxTokens) <= maxTokens;
  const full = renderDeclarations({ tools }, { indexThreshold: Number.POSITIVE_INFINITY });
  if (fits(full)) return { form: "declarations", text: `The tools:\n\`\`\`ts\n${full}\n\`\`\`${down}` };
  const signatures = renderToolSignatures(tools);
  if (fits(signatures)) {
    return {
      form: "signatures",
      text: `The tools (describe gives a tool's documentation):\n\`\`\`ts\n${signatures}\n\`\`\`${down}`,
    };
  }
  // Each tool as scripts write it after `tools.<server>__`.
  const groups = toolset.upstreams.map((upstream) => ({
    name: upstream.name,
    tools: tools
      .filter((tool) => tool.server === upstream.name)
      .map((tool) => tool.name.slice(upstream.spec.prefix.length + MCP_TOOL_SEPARATOR.length)),
    ...(upstream.down === undefined ? {} : { note: "down" }),
  }));
  const lead = `The ${tools.length} tools by server, as tools.<server>${MCP_TOOL_SEPARATOR}<tool>. Before calling one, get its declaration with describe (a tool of this server, or describe("<server>${MCP_TOOL_SEPARATOR}<tool>") in a program); search finds tools by words.`;
  const named = renderToolOverview(groups);
  if (fits(named)) return { form: "servers", text: `${lead}\n${named}${down}` };
  return { form: "counts", text: `${lead}\n${renderToolOverview(groups, { names: false })}${down}` };
}

/** A line per server that is down, after a newline; empty when none is. */
function downLines(toolset: McpToolset): string {
  const down = toolset.down;
  if (down.length === 0) return "";
  const lines = down.map((status) => `- ${status.server}: ${status.down?.error.reason ?? "down"}`);
  return `\n\nDown now, tried again in the background (their tools appear when they are back):\n${lines.join("\n")}`;
}

/** "35 tools of 3 MCP servers: everything (12), files (14), memory (9)." with the servers that are down named. */
export function catalogSummary(toolset: McpToolset): string {
  const tools = toolset.tools;
  const counts = toolset.status().map((status) => {
    const n = tools.filter((tool) => tool.server === status.server).length;
    return `${status.server} (${n}${status.state === "down" ? ", down" : ""})`;
  });
  return `${tools.length} tools of ${counts.length} MCP server${counts.length === 1 ? "" : "s"}: ${counts.join(", ") || "none"}.`;
}
