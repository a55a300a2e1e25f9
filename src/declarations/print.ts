import { isIdentifier } from "../platform/identifier.ts";
import { lineComments, textLines } from "./comments.ts";
import { type PropertyNode, shallow, type TypeNode } from "./type-node.ts";

export interface PrintOptions {
  tags: boolean;
  descriptions: boolean;
  /** Object levels printed with their members; deeper objects print in their shallow form. */
  maxLevels: number;
}

export const FULL: PrintOptions = { tags: true, descriptions: true, maxLevels: Number.POSITIVE_INFINITY };

/** A property key: bare when it is an identifier, a JSON string otherwise. */
export function propertyKey(name: string): string {
  return isIdentifier(name) ? name : JSON.stringify(name);
}

/** The TypeScript literal type of a JSON value. */
export function literalType(value: unknown): string {
  if (value === null) return "null";
  switch (typeof value) {
    case "string":
      return JSON.stringify(value);
    case "number":
      return Number.isFinite(value) ? String(value) : "number";
    case "boolean":
      return String(value);
    case "object": {
      if (Array.isArray(value)) return `[${value.map(literalType).join(", ")}]`;
      const entries = Object.entries(value as Record<string, unknown>);
      if (entries.length === 0) return "{}";
      return `{ ${entries.map(([key, item]) => `${propertyKey(key)}: ${literalType(item)}`).join("; ")} }`;
    }
    default:
      return "unknown";
  }
}

/** True when a printed type needs parentheses as an array item, a tuple member or an intersection member. */
function needsParens(node: TypeNode): boolean {
  return node.kind === "union" || node.kind === "intersection";
}

function wrap(node: TypeNode, text: string): string {
  return needsParens(node) ? `(${text})` : text;
}

function propertyComment(property: PropertyNode, options: PrintOptions, indent: string): string {
  const lines = options.descriptions && property.description !== undefined ? textLines(property.description) : [];
  const tags = options.tags ? property.tags.join(" ") : "";
  if (tags !== "") {
    if (lines.length === 0) lines.push(tags);
    else lines[lines.length - 1] = `${lines[lines.length - 1]} ${tags}`;
  }
  return lineComments(lines, indent);
}

/** Prints a type; lines after the first are indented relative to `indent`. */
export function printType(node: TypeNode, options: PrintOptions, indent = "", level = 0): string {
  switch (node.kind) {
    case "keyword":
      return node.name;
    case "literal":
      return literalType(node.value);
    case "array":
      return `${wrap(node.items, printType(node.items, options, indent, level))}[]`;
    case "tuple": {
      const elements = node.elements.map((element, i) => {
        const text = printType(element, options, indent, level);
        return i < node.required ? text : `${wrap(element, text)}?`;
      });
      if (node.rest) elements.push(`...${wrap(node.rest, printType(node.rest, options, indent, level))}[]`);
      return `[${elements.join(", ")}]`;
    }
    case "object": {
      if (level >= options.maxLevels) {
        return printType(shallow(node), { ...options, maxLevels: Number.POSITIVE_INFINITY }, indent, level);
      }
      const inner = `${indent}  `;
      if (node.properties.length === 0) {
        if (node.index === undefined) return "{}";
        const index = printType(node.index, options, inner, level + 1);
        if (!index.includes("\n")) return `{ [key: string]: ${index} }`;
      }
      let body = "";
      for (const property of node.properties) {
        body += propertyComment(property, options, inner);
        const type = printType(property.type, options, inner, level + 1);
        body += `${inner}${propertyKey(property.name)}${property.optional ? "?" : ""}: ${type};\n`;
      }
      if (node.index !== undefined) {
        body += `${inner}[key: string]: ${printType(node.index, options, inner, level + 1)};\n`;
      }
      return `{\n${body}${indent}}`;
    }
    case "union":
      return node.members.map((member) => printType(member, options, indent, level)).join(" | ");
    case "intersection":
      return node.members.map((member) => wrap(member, printType(member, options, indent, level))).join(" & ");
  }
}
