import type { JsonSchemaObject, SchemaToTypeOptions } from "./declaration-types.ts";
import { FULL, type PrintOptions, printType } from "./print.ts";
import { resolveSchemaRef } from "./ref.ts";
import {
  DEFAULT_INPUT_SCHEMA_MAX_CHARS,
  MAX_REF_DEPTH,
  MAX_REF_EXPANSIONS,
  MAX_SCHEMA_NESTING,
  MAX_SCHEMA_NODES,
} from "./render-limits.ts";
import { schemaTags } from "./tags.ts";
import {
  intersection,
  keyword,
  literal,
  NEVER,
  NULL,
  nodeKey,
  objectDepth,
  type PropertyNode,
  type TypeNode,
  UNDEFINED,
  UNKNOWN,
  union,
} from "./type-node.ts";
import { isZodSchema, toJsonSchema } from "./zod.ts";

/** Keywords that only annotate: a schema with nothing else accepts any value. */
const ANNOTATIONS = new Set([
  "$schema",
  "$id",
  "$anchor",
  "$comment",
  "$defs",
  "definitions",
  "title",
  "description",
  "default",
  "examples",
  "example",
  "deprecated",
  "readOnly",
  "writeOnly",
  "nullable",
]);

/** Longest index-signature type (as a structural key) kept when it must also cover the named properties. */
const INDEX_UNION_MAX_KEY = 400;

interface Context {
  root: unknown;
  io: "input" | "output";
  /** `$ref`s being expanded, with the document they belong to. */
  refs: { root: unknown; ref: string }[];
  /** Schema objects being converted: a cycle among plain objects renders as `unknown`. */
  objects: Set<object>;
  expansions: number;
  nesting: number;
  /** Schema nodes converted so far. */
  nodes: number;
}

function isObject(value: unknown): value is JsonSchemaObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function omit(schema: JsonSchemaObject, keys: string[]): JsonSchemaObject {
  const result: JsonSchemaObject = {};
  for (const [key, value] of Object.entries(schema)) if (!keys.includes(key)) result[key] = value;
  return result;
}

/** True when the schema constrains values beyond annotations. */
function hasTypeInfo(schema: JsonSchemaObject): boolean {
  return Object.keys(schema).some((key) => !ANNOTATIONS.has(key));
}

/** The schema a `$ref` stands for, with the keywords written beside the `$ref` laid over it. */
function applyRef(target: unknown, siblings: JsonSchemaObject): unknown {
  if (Object.keys(siblings).length === 0) return target;
  if (target === true) return siblings;
  if (!isObject(target)) return target;
  return { ...target, ...siblings };
}

/**
 * Follows `$ref`s (keeping them on the stack while `use` runs, so recursion is seen), converts zod schemas met
 * inside JSON Schema, and hands the resolved schema to `use`. Unresolvable, remote, recursive or over-limit
 * references give `fallback`.
 */
function withResolved<T>(schema: unknown, context: Context, use: (schema: unknown) => T, fallback: T): T {
  if (isZodSchema(schema)) {
    const json = toJsonSchema(schema, context.io);
    const outerRoot = context.root;
    context.root = json;
    try {
      return withResolved(json, context, use, fallback);
    } finally {
      context.root = outerRoot;
    }
  }
  let pushed = 0;
  try {
    let current = schema;
    while (isObject(current) && typeof current.$ref === "string") {
      const ref = current.$ref;
      const root = context.root;
      if (context.refs.length >= MAX_REF_DEPTH || context.expansions >= MAX_REF_EXPANSIONS) return fallback;
      if (context.refs.some((entry) => entry.ref === ref && entry.root === root)) return fallback;
      const target = resolveSchemaRef(root, ref);
      if (target === undefined) return fallback;
      context.refs.push({ root, ref });
      context.expansions++;
      pushed++;
      current = applyRef(target, omit(current, ["$ref"]));
    }
    return use(current);
  } finally {
    context.refs.length -= pushed;
  }
}

/** Follows `$ref`s without keeping them on the stack: for schemas that are merged into another before converting. */
function dereference(schema: unknown, context: Context): unknown {
  let current = schema;
  for (let hops = 0; isObject(current) && typeof current.$ref === "string"; hops++) {
    if (hops >= MAX_REF_DEPTH || context.expansions >= MAX_REF_EXPANSIONS) return undefined;
    const target = resolveSchemaRef(context.root, current.$ref);
    if (target === undefined) return undefined;
    context.expansions++;
    current = applyRef(target, omit(current, ["$ref"]));
  }
  return current;
}

function convert(schema: unknown, context: Context): TypeNode {
  return withResolved(schema, context, (resolved) => convertResolved(resolved, context), UNKNOWN);
}

function convertResolved(schema: unknown, context: Context): TypeNode {
  if (schema === true) return UNKNOWN;
  if (schema === false) return NEVER;
  if (!isObject(schema) || context.objects.has(schema)) return UNKNOWN;
  if (context.nesting >= MAX_SCHEMA_NESTING || context.nodes >= MAX_SCHEMA_NODES) return UNKNOWN;
  context.nodes++;
  context.objects.add(schema);
  context.nesting++;
  try {
    const node = convertKeywords(schema, context);
    return schema.nullable === true ? union([node, NULL]) : node;
  } finally {
    context.nesting--;
    context.objects.delete(schema);
  }
}

function typeList(schema: JsonSchemaObject): string[] {
  if (typeof schema.type === "string") return [schema.type];
  if (Array.isArray(schema.type)) return schema.type.filter((t): t is string => typeof t === "string");
  if (["properties", "additionalProperties", "patternProperties", "required"].some((key) => key in schema)) {
    return ["object"];
  }
  if ("items" in schema || "prefixItems" in schema) return ["array"];
  return [];
}

function convertKeywords(schema: JsonSchemaObject, context: Context): TypeNode {
  if (Array.isArray(schema.allOf) && schema.allOf.length > 0) return convertAllOf(schema, schema.allOf, context);
  const oneOf = Array.isArray(schema.oneOf) ? schema.oneOf : undefined;
  const anyOf = Array.isArray(schema.anyOf) ? schema.anyOf : undefined;
  if (oneOf !== undefined || anyOf !== undefined) {
    const base = omit(schema, ["oneOf", "anyOf", "nullable"]);
    const unions = [oneOf, anyOf].filter((v) => v !== undefined).map((v) => convertVariants(base, v, context));
    return intersection(unions);
  }
  if ("const" in schema) return literal(schema.const);
  if (Array.isArray(schema.enum)) return union(schema.enum.map(literal));
  const types = typeList(schema);
  if (types.length === 0) return UNKNOWN;
  return union(types.map((type) => convertType(type, schema, context)));
}

function convertType(type: string, schema: JsonSchemaObject, context: Context): TypeNode {
  switch (type) {
    case "string":
      return keyword("string");
    case "number":
    case "integer":
      return keyword("number");
    case "boolean":
      return keyword("boolean");
    case "null":
      return NULL;
    case "object":
      return convertObject(schema, context);
    case "array":
      return convertArray(schema, context);
    default:
      return UNKNOWN;
  }
}

function convertProperty(name: string, schema: unknown, optional: boolean, context: Context): PropertyNode {
  return withResolved(
    schema,
    context,
    (resolved): PropertyNode => {
      const type = convertResolved(resolved, context);
      if (!isObject(resolved)) return { name, optional, type, tags: [] };
      const tupleLength = type.kind === "tuple" && type.rest === undefined ? type.elements.length : undefined;
      const description = typeof resolved.description === "string" ? resolved.description : undefined;
      const tags = schemaTags(resolved, {
        output: context.io === "output",
        ...(tupleLength === undefined ? {} : { tupleLength }),
      });
      // Constraints written as `allOf` members (`allOf: [{ type: "string" }, { minLength: 3 }]`) count too.
      if (Array.isArray(resolved.allOf)) {
        for (const member of resolved.allOf.map((m) => dereference(m, context))) {
          if (!isObject(member)) continue;
          const memberTags = schemaTags(member, { output: context.io === "output" });
          tags.push(...memberTags.filter((tag) => !tags.includes(tag)));
        }
      }
      return description === undefined ? { name, optional, type, tags } : { name, optional, type, description, tags };
    },
    { name, optional, type: UNKNOWN, tags: [] },
  );
}

function convertObject(schema: JsonSchemaObject, context: Context): TypeNode {
  const properties = isObject(schema.properties) ? schema.properties : undefined;
  const required = new Set(
    Array.isArray(schema.required) ? schema.required.filter((r): r is string => typeof r === "string") : [],
  );
  const members: PropertyNode[] = [];
  for (const [name, propertySchema] of Object.entries(properties ?? {})) {
    members.push(convertProperty(name, propertySchema, !required.has(name), context));
  }
  for (const name of required) {
    if (properties === undefined || !Object.hasOwn(properties, name)) {
      members.push({ name, optional: false, type: UNKNOWN, tags: [] });
    }
  }

  const indexTypes: TypeNode[] = [];
  const additional = schema.additionalProperties;
  if (additional === true || isObject(additional)) indexTypes.push(convert(additional, context));
  if (isObject(schema.patternProperties)) {
    for (const patternSchema of Object.values(schema.patternProperties))
      indexTypes.push(convert(patternSchema, context));
  }
  const open = additional === undefined && schema.patternProperties === undefined;
  if (indexTypes.length === 0 && open && properties === undefined && members.length === 0) indexTypes.push(UNKNOWN);
  if (indexTypes.length === 0) return { kind: "object", properties: members };

  let index = union(indexTypes);
  if (index.kind === "keyword" && index.name === "never") return { kind: "object", properties: members };
  if (members.length > 0 && !(index.kind === "keyword" && index.name === "unknown")) {
    // An index signature must admit every named property's type.
    const covering = [index, ...members.map((m) => m.type)];
    if (members.some((m) => m.optional)) covering.push(UNDEFINED);
    index = union(covering);
    if (nodeKey(index).length > INDEX_UNION_MAX_KEY) index = UNKNOWN;
  }
  return { kind: "object", properties: members, index };
}

function convertArray(schema: JsonSchemaObject, context: Context): TypeNode {
  const prefix = Array.isArray(schema.prefixItems)
    ? schema.prefixItems
    : Array.isArray(schema.items)
      ? schema.items
      : undefined;
  if (prefix === undefined) {
    const items = schema.items === undefined ? UNKNOWN : convert(schema.items, context);
    return { kind: "array", items };
  }
  const maxItems = typeof schema.maxItems === "number" ? schema.maxItems : undefined;
  const minItems = typeof schema.minItems === "number" ? schema.minItems : undefined;
  const elements = prefix.slice(0, maxItems ?? prefix.length).map((item) => convert(item, context));
  const restSchema = Array.isArray(schema.prefixItems) ? schema.items : schema.additionalItems;
  const rest =
    (restSchema === true || isObject(restSchema)) && (maxItems === undefined || maxItems > elements.length)
      ? convert(restSchema, context)
      : undefined;
  const requiredCount = Math.max(0, Math.min(elements.length, minItems ?? elements.length));
  return rest === undefined || (rest.kind === "keyword" && rest.name === "never")
    ? { kind: "tuple", elements, required: requiredCount }
    : { kind: "tuple", elements, required: requiredCount, rest };
}

/** An object schema that can be merged with others: no combinators, no type other than object. */
function isMergeableObject(schema: unknown): schema is JsonSchemaObject {
  if (!isObject(schema)) return false;
  if (["allOf", "anyOf", "oneOf", "enum", "const", "$ref", "not", "items", "prefixItems"].some((k) => k in schema)) {
    return false;
  }
  return schema.type === undefined || schema.type === "object";
}

/** Merges two schemas that both apply: properties meet, `required` adds up, the later one's other keywords win. */
function mergeSchemas(base: JsonSchemaObject, extra: JsonSchemaObject): JsonSchemaObject {
  const merged: JsonSchemaObject = { ...base, ...extra };
  if (base.description !== undefined) merged.description = base.description;
  if (isObject(base.properties) || isObject(extra.properties)) {
    const properties: JsonSchemaObject = { ...(isObject(base.properties) ? base.properties : {}) };
    for (const [name, schema] of Object.entries(isObject(extra.properties) ? extra.properties : {})) {
      properties[name] = Object.hasOwn(properties, name) ? { allOf: [properties[name], schema] } : schema;
    }
    merged.properties = properties;
  }
  if (Array.isArray(base.required) || Array.isArray(extra.required)) {
    merged.required = [
      ...new Set([
        ...(Array.isArray(base.required) ? base.required : []),
        ...(Array.isArray(extra.required) ? extra.required : []),
      ]),
    ];
  }
  if (base.additionalProperties === false || extra.additionalProperties === false) merged.additionalProperties = false;
  if (extra.type === undefined && base.type !== undefined) merged.type = base.type;
  return merged;
}

/**
 * `members.reduce(mergeSchemas, base)` in time linear in their properties: the properties and required names are
 * gathered in place, where merging one member at a time copied them all each time (2,000 members took 1.3 s).
 */
function mergeAll(base: JsonSchemaObject, members: JsonSchemaObject[]): JsonSchemaObject {
  const merged: JsonSchemaObject = { ...base };
  let properties: JsonSchemaObject | undefined = isObject(base.properties) ? { ...base.properties } : undefined;
  let required: Set<unknown> | undefined = Array.isArray(base.required) ? new Set(base.required) : undefined;
  let closed = base.additionalProperties === false;
  for (const extra of members) {
    const { description, type } = merged;
    Object.assign(merged, extra);
    if (description !== undefined) merged.description = description;
    if (extra.type === undefined && type !== undefined) merged.type = type;
    if (properties !== undefined || isObject(extra.properties)) {
      properties ??= {};
      for (const [name, schema] of Object.entries(isObject(extra.properties) ? extra.properties : {})) {
        properties[name] = Object.hasOwn(properties, name) ? { allOf: [properties[name], schema] } : schema;
      }
    }
    if (Array.isArray(extra.required)) {
      required ??= new Set();
      for (const name of extra.required) required.add(name);
    }
    closed ||= extra.additionalProperties === false;
  }
  if (properties !== undefined) merged.properties = properties;
  if (required !== undefined) merged.required = [...required];
  if (closed) merged.additionalProperties = false;
  return merged;
}

function convertAllOf(schema: JsonSchemaObject, allOf: unknown[], context: Context): TypeNode {
  const base = omit(schema, ["allOf"]);
  const members = allOf.map((member) => dereference(member, context));
  if (members.includes(false)) return NEVER;
  const known = members.filter((member) => member !== true && member !== undefined);
  if (known.every(isMergeableObject) && (isMergeableObject(base) || !hasTypeInfo(base))) {
    return convertResolved(mergeAll(base, known), context);
  }
  const parts = allOf.map((member) => convert(member, context));
  if (hasTypeInfo(base)) parts.unshift(convertResolved(base, context));
  return intersection(parts);
}

function convertVariants(base: JsonSchemaObject, variants: unknown[], context: Context): TypeNode {
  if (!hasTypeInfo(base)) return union(variants.map((variant) => convert(variant, context)));
  const baseNode = isObject(base.properties) || Array.isArray(base.required) ? convertResolved(base, context) : UNKNOWN;
  return union(
    variants.map((variant) => {
      if (isObject(variant) && typeof variant.$ref !== "string")
        return convertResolved(mergeSchemas(base, variant), context);
      if (variant === true) return convertResolved(base, context);
      return intersection([baseNode, convert(variant, context)]);
    }),
  );
}

/** Converts a JSON Schema (or zod schema) to the intermediate type form. */
export function schemaToNode(schema: unknown, io: "input" | "output" = "input"): TypeNode {
  const json = toJsonSchema(schema, io);
  const context: Context = { root: json, io, refs: [], objects: new Set(), expansions: 0, nesting: 0, nodes: 0 };
  return withResolved(
    json,
    context,
    (resolved) => {
      // The document itself is on the stack: `{"$ref": "#"}` inside it is recursion.
      context.refs.push({ root: json, ref: "#" });
      try {
        return convertResolved(resolved, context);
      } finally {
        context.refs.pop();
      }
    },
    UNKNOWN,
  );
}

/**
 * Prints a type within `maxChars`: first in full, then without tags, then without descriptions, then with fewer
 * object levels, and as `unknown` when nothing fits.
 */
export function fitType(node: TypeNode, options: SchemaToTypeOptions = {}): string {
  const maxChars = options.maxChars ?? Number.POSITIVE_INFINITY;
  const indent = options.indent ?? "";
  const tags = options.tags ?? FULL.tags;
  const descriptions = options.descriptions ?? FULL.descriptions;
  const attempts: PrintOptions[] = [{ tags, descriptions, maxLevels: Number.POSITIVE_INFINITY }];
  if (tags) attempts.push({ tags: false, descriptions, maxLevels: Number.POSITIVE_INFINITY });
  if (descriptions) attempts.push({ tags: false, descriptions: false, maxLevels: Number.POSITIVE_INFINITY });
  for (let levels = objectDepth(node) - 1; levels >= 0; levels--) {
    attempts.push({ tags: false, descriptions: false, maxLevels: levels });
  }
  for (const attempt of attempts) {
    if (printType(node, attempt).length <= maxChars) return printType(node, attempt, indent);
  }
  return "unknown";
}

/**
 * The TypeScript type of a JSON Schema (or zod 4 schema): descriptions as `//` comments above properties,
 * constraints as tags, within `options.maxChars` (default `DEFAULT_INPUT_SCHEMA_MAX_CHARS`).
 */
export function schemaToType(schema: unknown, options: SchemaToTypeOptions = {}): string {
  return fitType(schemaToNode(schema, options.io ?? "input"), {
    ...options,
    maxChars: options.maxChars ?? DEFAULT_INPUT_SCHEMA_MAX_CHARS,
  });
}
