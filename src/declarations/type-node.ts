/** The intermediate form of a rendered type: schemas convert to it, the printer turns it into TypeScript. */
import { MAX_LITERAL_DEPTH, MAX_LITERAL_VALUES } from "./render-limits.ts";

export type Keyword = "string" | "number" | "boolean" | "null" | "undefined" | "unknown" | "never";

export type TypeNode =
  | { kind: "keyword"; name: Keyword }
  | { kind: "literal"; value: unknown }
  | { kind: "array"; items: TypeNode }
  | { kind: "tuple"; elements: TypeNode[]; required: number; rest?: TypeNode }
  | { kind: "object"; properties: PropertyNode[]; index?: TypeNode }
  | { kind: "union"; members: TypeNode[] }
  | { kind: "intersection"; members: TypeNode[] };

export interface PropertyNode {
  name: string;
  optional: boolean;
  type: TypeNode;
  description?: string;
  tags: string[];
}

export const UNKNOWN: TypeNode = { kind: "keyword", name: "unknown" };
export const NEVER: TypeNode = { kind: "keyword", name: "never" };
export const NULL: TypeNode = { kind: "keyword", name: "null" };
export const UNDEFINED: TypeNode = { kind: "keyword", name: "undefined" };
/** `{ [key: string]: unknown }`: any object. */
export const ANY_OBJECT: TypeNode = { kind: "object", properties: [], index: UNKNOWN };

export function keyword(name: Keyword): TypeNode {
  return { kind: "keyword", name };
}

export function isKeyword(node: TypeNode, name: Keyword): boolean {
  return node.kind === "keyword" && node.name === name;
}

/** A structural key: equal keys mean equal types (comments aside). */
export function nodeKey(node: TypeNode): string {
  switch (node.kind) {
    case "keyword":
      return node.name;
    case "literal":
      return `=${JSON.stringify(node.value)}`;
    case "array":
      return `[${nodeKey(node.items)}]`;
    case "tuple":
      return `(${node.elements.map(nodeKey).join(",")};${node.required};${node.rest ? nodeKey(node.rest) : ""})`;
    case "object":
      return `{${node.properties.map((p) => `${JSON.stringify(p.name)}${p.optional ? "?" : ""}:${nodeKey(p.type)}`).join(",")};${node.index ? nodeKey(node.index) : ""}}`;
    case "union":
      return `|(${node.members.map(nodeKey).join(",")})`;
    case "intersection":
      return `&(${node.members.map(nodeKey).join(",")})`;
  }
}

/** A union with nested unions flattened, duplicates and `never` removed; `unknown` absorbs everything. */
export function union(members: TypeNode[]): TypeNode {
  const flat: TypeNode[] = [];
  const seen = new Set<string>();
  const add = (member: TypeNode): boolean => {
    if (member.kind === "union") return member.members.every(add);
    if (isKeyword(member, "unknown")) return false;
    if (isKeyword(member, "never")) return true;
    const key = nodeKey(member);
    if (!seen.has(key)) {
      seen.add(key);
      flat.push(member);
    }
    return true;
  };
  if (!members.every(add)) return UNKNOWN;
  if (flat.length === 0) return NEVER;
  if (flat.length === 1) return flat[0] as TypeNode;
  return { kind: "union", members: flat };
}

/** An intersection with `unknown` members removed; `never` absorbs everything. */
export function intersection(members: TypeNode[]): TypeNode {
  const flat: TypeNode[] = [];
  const seen = new Set<string>();
  for (const member of members.flatMap((m) => (m.kind === "intersection" ? m.members : [m]))) {
    if (isKeyword(member, "never")) return NEVER;
    if (isKeyword(member, "unknown")) continue;
    const key = nodeKey(member);
    if (!seen.has(key)) {
      seen.add(key);
      flat.push(member);
    }
  }
  if (flat.length === 0) return UNKNOWN;
  if (flat.length === 1) return flat[0] as TypeNode;
  return { kind: "intersection", members: flat };
}

/** The keyword type a JSON literal belongs to; objects and arrays have none. A BigInt crosses as a JSON number. */
function literalBase(value: unknown): TypeNode {
  if (value === null) return NULL;
  if (typeof value === "string") return keyword("string");
  if (typeof value === "number" || typeof value === "bigint") return keyword("number");
  if (typeof value === "boolean") return keyword("boolean");
  if (Array.isArray(value)) return { kind: "array", items: UNKNOWN };
  return typeof value === "object" ? ANY_OBJECT : UNKNOWN;
}

/**
 * The type of a `const` or `enum` value: the literal itself when it is plain JSON within the bounds above, and its
 * base type otherwise, so that a cyclic, very deep or huge value (or a BigInt) is printed, keyed and compared without
 * unbounded recursion.
 */
export function literal(value: unknown): TypeNode {
  let budget = MAX_LITERAL_VALUES;
  const plain = (v: unknown, depth: number): boolean => {
    if (--budget < 0) return false;
    if (v === null || typeof v === "string" || typeof v === "boolean") return true;
    // NaN and Infinity are not JSON: as literals they would print as `number` and key as `null`.
    if (typeof v === "number") return Number.isFinite(v);
    if (typeof v !== "object" || depth >= MAX_LITERAL_DEPTH) return false;
    if (Array.isArray(v)) return v.every((item) => plain(item, depth + 1));
    const proto = Object.getPrototypeOf(v);
    return (proto === Object.prototype || proto === null) && Object.values(v).every((item) => plain(item, depth + 1));
  };
  return plain(value, 0) ? { kind: "literal", value } : literalBase(value);
}

/**
 * The shallow form of a type, used when a type is too large: objects lose their members, literals widen to their
 * primitive type, arrays keep a shallow item type. Applied member by member, so a type that was assignable to
 * another stays assignable after both are made shallow.
 */
export function shallow(node: TypeNode): TypeNode {
  switch (node.kind) {
    case "keyword":
      return node;
    case "literal":
      return literalBase(node.value);
    case "array":
      return { kind: "array", items: shallow(node.items) };
    case "tuple":
      return {
        kind: "array",
        items: union([...node.elements, ...(node.rest ? [node.rest] : [])].map(shallow)),
      };
    case "object":
      return ANY_OBJECT;
    case "union":
      return union(node.members.map(shallow));
    case "intersection":
      return intersection(node.members.map(shallow));
  }
}

/** How many object levels the type has: 0 for a primitive, 1 for a flat object, and so on. */
export function objectDepth(node: TypeNode): number {
  switch (node.kind) {
    case "keyword":
    case "literal":
      return 0;
    case "array":
      return objectDepth(node.items);
    case "tuple":
      return deepest(node.rest ? [...node.elements, node.rest] : node.elements);
    case "object":
      return 1 + deepest([...node.properties.map((p) => p.type), ...(node.index ? [node.index] : [])]);
    case "union":
    case "intersection":
      return deepest(node.members);
  }
}

/** The largest objectDepth of `nodes`, in a loop: spreading an enum of 100k members as arguments overflows the stack. */
function deepest(nodes: TypeNode[]): number {
  let max = 0;
  for (const node of nodes) max = Math.max(max, objectDepth(node));
  return max;
}
