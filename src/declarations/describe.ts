import { toCodemodeIdentifier } from "../platform/identifier.ts";
import type { RenderDeclarationsOptions, ToolLike } from "./declaration-types.ts";
import { assignToolKeys, type ToolKey } from "./names.ts";
import { renderToolMember } from "./render.ts";
import { searchTools } from "./search.ts";

/** Edit distance between two strings (insertions, deletions, substitutions). */
function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      const substitution = (previous[j - 1] as number) + (a[i - 1] === b[j - 1] ? 0 : 1);
      current.push(Math.min((previous[j] as number) + 1, (current[j - 1] as number) + 1, substitution));
    }
    previous = current;
  }
  return previous[b.length] as number;
}

/**
 * Names longer than this get no suggestions by spelling: edit distance costs the product of the two lengths, for every
 * tool, and a name this long is no misspelling.
 */
const MAX_SUGGESTED_NAME_CHARS = 128;

/** Up to three tool names close to `name`: by spelling first, then by search. */
export function suggestToolNames(catalog: readonly ToolLike[], name: string): string[] {
  const wanted = name.toLowerCase();
  const limit = Math.max(2, Math.floor(wanted.length / 3));
  // The distance is at least the difference in length: a candidate that differs by more is not computed.
  const distanceTo = (candidate: string) =>
    Math.abs(candidate.length - wanted.length) > limit ? Number.POSITIVE_INFINITY : editDistance(wanted, candidate);
  const spelled = wanted.length > MAX_SUGGESTED_NAME_CHARS ? [] : catalog;
  const close = spelled
    .map((tool) => {
      const candidates = [tool.name, toCodemodeIdentifier(tool.name)].map((c) => c.toLowerCase());
      const distance = Math.min(...candidates.map(distanceTo));
      const contains = wanted.length >= 3 && candidates.some((c) => c.includes(wanted) || wanted.includes(c));
      return { name: tool.name, distance: contains ? Math.min(distance, 1.5) : distance };
    })
    .filter((entry) => entry.distance <= limit)
    .sort((a, b) => a.distance - b.distance)
    .map((entry) => entry.name);
  const searched = searchTools(catalog, name, { limit: 3 }).map((result) => result.name);
  return [...new Set([...close, ...searched])].slice(0, 3);
}

/** Finds a tool by its name, its identifier, or (when only one matches) either ignoring case. */
function findTool(entries: ToolKey[], name: string): ToolKey | undefined {
  const exact = entries.find((entry) => entry.tool.name === name) ?? entries.find((entry) => entry.identifier === name);
  if (exact !== undefined) return exact;
  const lower = name.toLowerCase();
  const loose = entries.filter(
    (entry) => entry.tool.name.toLowerCase() === lower || entry.identifier.toLowerCase() === lower,
  );
  return loose.length === 1 ? loose[0] : undefined;
}

/**
 * The full declaration of one tool of a catalog, as `declare const tools: { … }` holding that tool alone.
 * `name` is the tool's name or its identifier; an unknown name throws an Error suggesting close names.
 */
export function describeTool(catalog: readonly ToolLike[], name: string, options: RenderDeclarationsOptions = {}) {
  const entries = assignToolKeys(catalog);
  const entry = findTool(entries, name);
  if (entry === undefined) {
    const suggestions = suggestToolNames(catalog, name);
    const hint =
      suggestions.length > 0
        ? ` Did you mean ${suggestions.map((s) => JSON.stringify(s)).join(", ")}?`
        : ` No tool has a similar name (${entries.length} tools in the catalog).`;
    throw new Error(`Unknown tool ${JSON.stringify(name)}.${hint}`);
  }
  return `declare const tools: {\n${renderToolMember(entry, options, "  ")}\n};`;
}
