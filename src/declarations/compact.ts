/**
 * The two compact forms of a catalog, for descriptions that cannot carry the full declarations:
 * - signatures: one line per tool with its parameters and result type (names and types, no comments or tags), enough
 *   to write a program without asking for more;
 * - an overview: one line per group of tools (an MCP server, a namespace) naming its tools, enough to find them with
 *   search and describe.
 */
import { jsDoc, oneLine, summarize } from "./comments.ts";
import type { ToolLike } from "./declaration-types.ts";
import { assignToolKeys } from "./names.ts";
import { renderToolSignature } from "./render.ts";
import { COMPACT_INPUT_MAX_CHARS, COMPACT_OUTPUT_MAX_CHARS, COMPACT_SUMMARY_MAX_CHARS } from "./render-limits.ts";

export interface ToolSignaturesOptions {
  /** A comment above the block, for example how to get a tool's documentation. */
  hint?: string;
  /** Longest summary after each tool, in characters. Default `COMPACT_SUMMARY_MAX_CHARS`; 0 leaves them out. */
  summaryMaxChars?: number;
}

/**
 * `declare const tools: { … }` with one line per tool: `name(args: { path: string; head?: number }): Promise<R>;`
 * followed by the first sentence of its description. A type too large for its line budget
 * (`COMPACT_INPUT_MAX_CHARS`, `COMPACT_OUTPUT_MAX_CHARS`) loses its nested levels first.
 */
export function renderToolSignatures(catalog: readonly ToolLike[], options: ToolSignaturesOptions = {}): string {
  const entries = assignToolKeys(catalog);
  const maxChars = options.summaryMaxChars ?? COMPACT_SUMMARY_MAX_CHARS;
  const lines = entries.map(({ tool, key }) => {
    const signature = oneLine(
      renderToolSignature(tool, {
        descriptions: false,
        tags: false,
        inputSchemaMaxChars: COMPACT_INPUT_MAX_CHARS,
        outputSchemaMaxChars: COMPACT_OUTPUT_MAX_CHARS,
      }),
    ).replace(/; \}/g, " }");
    const summary = maxChars > 0 ? summarize(tool.description, maxChars) : "";
    return `  ${key}${signature};${summary === "" ? "" : ` // ${summary}`}\n`;
  });
  const header = options.hint === undefined ? "" : jsDoc([options.hint], "");
  return `${header}declare const tools: {\n${lines.join("")}};`;
}

/** One group of an overview: a name (an MCP server, a namespace), the tools' names in it, and optional notes. */
export interface ToolGroup {
  name: string;
  /** The tools' names as the group's own (`read_text_file`), not as scripts call them. */
  tools: readonly string[];
  /** Said after the count, for example that the server is down. */
  note?: string;
}

export interface ToolOverviewOptions {
  /** List the tools' names (default), or only count them. */
  names?: boolean;
}

/** One line per group: `files (14 tools): read_text_file, write_file, …`, or `files (14 tools)` without names. */
export function renderToolOverview(groups: readonly ToolGroup[], options: ToolOverviewOptions = {}): string {
  const names = options.names ?? true;
  return groups
    .map((group) => {
      const count = `${group.tools.length} tool${group.tools.length === 1 ? "" : "s"}`;
      const note = group.note === undefined ? "" : `; ${group.note}`;
      const list = names && group.tools.length > 0 ? `: ${group.tools.join(", ")}` : "";
      return `- ${group.name} (${count}${note})${list}`;
    })
    .join("\n");
}
