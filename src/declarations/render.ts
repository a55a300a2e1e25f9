import { jsDoc, textLines } from "./comments.ts";
import type { RenderDeclarationsOptions, ToolLike } from "./declaration-types.ts";
import { assignToolKeys, checkCatalog, isDeclarableName, type ToolKey } from "./names.ts";
import {
  DEFAULT_INPUT_SCHEMA_MAX_CHARS,
  DEFAULT_OUTPUT_SCHEMA_MAX_CHARS,
  INDEX_THRESHOLD_TOOLS,
} from "./render-limits.ts";
import { fitType, schemaToNode } from "./schema-to-type.ts";
import { renderToolIndex } from "./tool-index.ts";

export interface ToolSignatureOptions extends RenderDeclarationsOptions {
  /** Indentation of the line the signature starts on. Default "". */
  indent?: string;
}

function typeOptions(options: ToolSignatureOptions, maxChars: number) {
  return {
    maxChars,
    indent: options.indent ?? "",
    ...(options.tags === undefined ? {} : { tags: options.tags }),
    ...(options.descriptions === undefined ? {} : { descriptions: options.descriptions }),
  };
}

/** The TypeScript type of what a tool resolves to (`unknown` without an output schema), without `Promise<…>`. */
export function renderToolOutputType(tool: ToolLike, options: ToolSignatureOptions = {}): string {
  if (tool.outputSchema === undefined) return "unknown";
  const maxChars = options.outputSchemaMaxChars ?? DEFAULT_OUTPUT_SCHEMA_MAX_CHARS;
  return fitType(schemaToNode(tool.outputSchema, "output"), typeOptions(options, maxChars));
}

/** The argument type of a tool (`unknown` without an input schema); for `spread` tools, an array type. */
function renderInputType(tool: ToolLike, options: ToolSignatureOptions): string {
  const maxChars = options.inputSchemaMaxChars ?? DEFAULT_INPUT_SCHEMA_MAX_CHARS;
  if (tool.inputSchema === undefined) return tool.spread ? "unknown[]" : "unknown";
  const node = schemaToNode(tool.inputSchema, "input");
  if (tool.spread) {
    const isList = node.kind === "array" || node.kind === "tuple";
    const type = isList ? fitType(node, typeOptions(options, maxChars)) : "unknown[]";
    return type === "unknown" ? "unknown[]" : type;
  }
  return fitType(node, typeOptions(options, maxChars));
}

/**
 * A tool's parameter list and return type, `(args: { … }): Promise<R>`; `(...args: T): Promise<R>` for a `spread`
 * tool; the tool's own `signature` when it has one.
 */
export function renderToolSignature(tool: ToolLike, options: ToolSignatureOptions = {}): string {
  if (typeof tool.signature === "string" && tool.signature.trim() !== "") return tool.signature.trim();
  const input = renderInputType(tool, options);
  const output = renderToolOutputType(tool, options);
  return `(${tool.spread ? "...args" : "args"}: ${input}): Promise<${output}>`;
}

/** The JSDoc above a tool: its description, and its original name when scripts call it by another. */
function toolDoc(tool: ToolLike, key: string, indent: string): string {
  const lines = typeof tool.description === "string" ? textLines(tool.description) : [];
  if (key !== tool.name && !key.startsWith('"')) lines.push(`Original name: ${JSON.stringify(tool.name)}`);
  return jsDoc(lines, indent);
}

/** One member of `declare const tools`, JSDoc included. */
export function renderToolMember(entry: ToolKey, options: RenderDeclarationsOptions, indent: string): string {
  const signature = renderToolSignature(entry.tool, { ...options, indent });
  return `${toolDoc(entry.tool, entry.key, indent)}${indent}${entry.key}${signature};`;
}

/** `declare const tools: { … };` with every tool declared in full. */
export function renderToolsBlock(entries: ToolKey[], options: RenderDeclarationsOptions): string {
  const members = entries.map((entry) => `${renderToolMember(entry, options, "  ")}\n`).join("");
  return `declare const tools: {\n${members}};`;
}

interface GlobalTree {
  functions: ToolLike[];
  children: Map<string, GlobalTree>;
}

function emptyTree(): GlobalTree {
  return { functions: [], children: new Map() };
}

function renderGlobalTree(tree: GlobalTree, options: RenderDeclarationsOptions, indent: string, top: boolean): string {
  const parts: string[] = [];
  const prefix = top ? "declare " : "";
  for (const tool of tree.functions) {
    const name = tool.name.slice(tool.name.lastIndexOf(".") + 1);
    const signature = renderToolSignature(tool, { ...options, indent });
    parts.push(`${toolDoc(tool, tool.name, indent)}${indent}${prefix}function ${name}${signature};`);
  }
  for (const [name, child] of tree.children) {
    const body = renderGlobalTree(child, options, `${indent}  `, false);
    parts.push(`${indent}${prefix}namespace ${name} {\n${body}\n${indent}}`);
  }
  return parts.join("\n");
}

/** Globals as top-level functions; dotted names as functions in (nested) namespaces. */
export function renderGlobals(globals: readonly ToolLike[], options: RenderDeclarationsOptions, reserved: string[]) {
  const root = emptyTree();
  const skipped: string[] = [];
  const seen = new Set<string>();
  for (const global of globals) {
    if (seen.has(global.name)) continue;
    seen.add(global.name);
    const path = global.name.split(".");
    if (!path.every(isDeclarableName) || reserved.includes(path[0] as string)) {
      skipped.push(`// Global ${JSON.stringify(global.name)} is not declared: scripts cannot call it by that name.`);
      continue;
    }
    let tree = root;
    for (const segment of path.slice(0, -1)) {
      let child = tree.children.get(segment);
      if (child === undefined) {
        child = emptyTree();
        tree.children.set(segment, child);
      }
      tree = child;
    }
    // A function and a namespace of the same name merge; the function is declared first.
    tree.functions.push(global);
  }
  return [renderGlobalTree(root, options, "", true), ...skipped].filter((part) => part !== "").join("\n");
}

/**
 * TypeScript declarations of what a script can call: `declare const tools: { … }` and the globals as top-level
 * functions and namespaces. Catalogs of more than `indexThreshold` tools are declared as a compact index.
 */
export function renderDeclarations(
  catalog: { tools?: readonly ToolLike[]; globals?: readonly ToolLike[] },
  options: RenderDeclarationsOptions = {},
): string {
  if (catalog === null || typeof catalog !== "object")
    throw new TypeError("renderDeclarations needs { tools, globals }");
  if (options === null || typeof options !== "object")
    throw new TypeError("renderDeclarations options must be an object");
  const { tools = [], globals = [] } = catalog;
  checkCatalog(globals, "globals");
  const blocks: string[] = [];
  const entries = assignToolKeys(tools);
  if (entries.length > 0) {
    const threshold = options.indexThreshold ?? INDEX_THRESHOLD_TOOLS;
    blocks.push(
      entries.length > threshold
        ? renderToolIndex(tools, options.indexHint === undefined ? {} : { hint: options.indexHint })
        : renderToolsBlock(entries, options),
    );
  }
  const globalsText = renderGlobals(globals, options, entries.length > 0 ? ["tools"] : []);
  if (globalsText !== "") blocks.push(globalsText);
  return blocks.join("\n\n");
}
