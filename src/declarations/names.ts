import { isIdentifier, toCodemodeIdentifier } from "../platform/identifier.ts";
import type { ToolLike } from "./declaration-types.ts";

/** Words that cannot name a function or namespace in a module (reserved, strict-mode reserved, or fixed globals). */
const NOT_DECLARABLE = new Set([
  ..."break case catch class const continue debugger default delete do else enum export extends false finally for".split(
    " ",
  ),
  ..."function if import in instanceof new null return super switch this throw true try typeof var void while with".split(
    " ",
  ),
  ..."implements interface let package private protected public static yield await arguments eval".split(" "),
  ..."undefined NaN Infinity globalThis".split(" "),
]);

/** True when `name` can be declared as a function or namespace: an identifier that is not a reserved word. */
export function isDeclarableName(name: string): boolean {
  return isIdentifier(name) && !NOT_DECLARABLE.has(name);
}

/** How a tool appears in `declare const tools`: the key written and whether it is an identifier. */
export interface ToolKey {
  tool: ToolLike;
  /** `toCodemodeIdentifier(name)`: what scripts write after `tools.`. */
  identifier: string;
  /** The key rendered: the identifier, or the quoted original name when another tool already has the identifier. */
  key: string;
}

/**
 * Gives every tool its key, in catalog order. Tools whose name already is an identifier keep it; a renamed tool
 * whose identifier is taken is declared under its quoted original name (`tools["my-tool"]`). Repeated names keep
 * their first tool.
 */
export function assignToolKeys(tools: readonly ToolLike[]): ToolKey[] {
  checkCatalog(tools, "tools");
  const names = new Set<string>();
  const unique = tools.filter((tool) => !names.has(tool.name) && names.add(tool.name));
  const taken = new Set(unique.filter((tool) => isIdentifier(tool.name)).map((tool) => tool.name));
  return unique.map((tool) => {
    const identifier = toCodemodeIdentifier(tool.name);
    // `new(…)` in a type literal is a construct signature, not a method: only the quoted key names a method.
    if (identifier === "new")
      return { tool, identifier, key: tool.name === "new" ? '"new"' : JSON.stringify(tool.name) };
    if (identifier === tool.name) return { tool, identifier, key: identifier };
    if (taken.has(identifier)) return { tool, identifier, key: JSON.stringify(tool.name) };
    taken.add(identifier);
    return { tool, identifier, key: identifier };
  });
}

/**
 * Throws a TypeError naming what is wrong when `list` is not a list of tools as the renderers read them (a name, and
 * a description that is text): the declarations are built for hosts' catalogs, which may come from anywhere.
 */
export function checkCatalog(list: unknown, what: string): asserts list is readonly ToolLike[] {
  if (!Array.isArray(list)) throw new TypeError(`${what} must be an array of tools`);
  list.forEach((tool: unknown, index) => {
    if (tool === null || typeof tool !== "object") throw new TypeError(`${what}[${index}] is not an object`);
    const { name, description } = tool as { name?: unknown; description?: unknown };
    if (typeof name !== "string" || name === "")
      throw new TypeError(`${what}[${index}] has no name (a non-empty string)`);
    if (description !== undefined && typeof description !== "string") {
      throw new TypeError(`${what}[${index}] ("${name}") has a description that is not a string`);
    }
  });
}
