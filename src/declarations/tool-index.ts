import { jsDoc, summarize } from "./comments.ts";
import type { ToolIndexOptions, ToolLike } from "./declaration-types.ts";
import { assignToolKeys } from "./names.ts";
import { DEFAULT_INDEX_HINT, SUMMARY_MAX_CHARS } from "./render-limits.ts";

/**
 * A compact index of a catalog: one line per tool with its name and the first sentence of its description,
 * declared loosely (`(args: unknown): Promise<unknown>`) so that it still type-checks, and a comment on how to
 * get a tool's full declaration.
 */
export function renderToolIndex(catalog: readonly ToolLike[], options: ToolIndexOptions = {}): string {
  const entries = assignToolKeys(catalog);
  const maxChars = options.summaryMaxChars ?? SUMMARY_MAX_CHARS;
  const header = jsDoc(
    [
      `Index of ${entries.length} tools: each line gives a tool's name and what it does, not its parameters.`,
      options.hint ?? DEFAULT_INDEX_HINT,
    ],
    "",
  );
  const lines = entries.map(({ tool, key }) => {
    const params = tool.spread ? "...args: unknown[]" : "args: unknown";
    const summary = summarize(tool.description, maxChars);
    return `  ${key}(${params}): Promise<unknown>;${summary === "" ? "" : ` // ${summary}`}\n`;
  });
  return `${header}declare const tools: {\n${lines.join("")}};`;
}
