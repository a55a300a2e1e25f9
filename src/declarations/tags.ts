import { oneLine } from "./comments.ts";
import type { JsonSchemaObject } from "./declaration-types.ts";

/** Longest JSON of a `@default` value before it is shortened. */
const DEFAULT_VALUE_MAX_CHARS = 80;

/** Keywords whose number value becomes a tag of the same name. */
const NUMBER_TAGS = [
  "minimum",
  "maximum",
  "exclusiveMinimum",
  "exclusiveMaximum",
  "multipleOf",
  "minLength",
  "maxLength",
  "minItems",
  "maxItems",
  "minProperties",
  "maxProperties",
] as const;

/** Keywords whose string value becomes a tag of the same name. */
const STRING_TAGS = ["format", "pattern", "contentEncoding", "contentMediaType"] as const;

function types(schema: JsonSchemaObject): string[] {
  if (typeof schema.type === "string") return [schema.type];
  if (Array.isArray(schema.type)) return schema.type.filter((t): t is string => typeof t === "string");
  return [];
}

/** zod writes the safe-integer range as bounds of every `int()`; they tell the model nothing. */
function isSafeIntegerBound(key: string, value: number): boolean {
  return (
    (key === "maximum" && value === Number.MAX_SAFE_INTEGER) || (key === "minimum" && value === Number.MIN_SAFE_INTEGER)
  );
}

function shorten(text: string): string {
  return text.length <= DEFAULT_VALUE_MAX_CHARS ? text : `${text.slice(0, DEFAULT_VALUE_MAX_CHARS - 1)}…`;
}

/**
 * The JSON of a `@default` value, written only as far as the tag shows it (`max` characters), so that a cyclic, very
 * deep or huge value costs no more than a small one; a BigInt is written as its digits. Every nested value writes at
 * least one character, so the length bound also bounds the depth.
 */
function previewJson(value: unknown, max: number): string | undefined {
  if (value === undefined || typeof value === "function" || typeof value === "symbol") return undefined;
  let out = "";
  const write = (input: unknown): void => {
    // As in JSON.stringify, an object's toJSON stands for it (a Date writes its ISO string).
    const toJSON = (input as { toJSON?: unknown } | null)?.toJSON;
    const v: unknown = typeof toJSON === "function" ? toJSON.call(input) : input;
    if (typeof v === "bigint") out += String(v);
    else if (v === null || typeof v !== "object") out += JSON.stringify(v) ?? "null";
    else if (Array.isArray(v)) {
      out += "[";
      for (let i = 0; i < v.length && out.length <= max; i++) {
        if (i > 0) out += ",";
        write(v[i]);
      }
      out += "]";
    } else {
      out += "{";
      let first = true;
      for (const key of Object.keys(v)) {
        if (out.length > max) break;
        const item = (v as Record<string, unknown>)[key];
        if (item === undefined || typeof item === "function" || typeof item === "symbol") continue;
        out += `${first ? "" : ","}${JSON.stringify(key)}:`;
        first = false;
        write(item);
      }
      out += "}";
    }
  };
  write(value);
  return out;
}

export interface TagContext {
  /** The schema renders as a tuple of this many elements with no rest: its item-count bounds say nothing new. */
  tupleLength?: number;
  /** Output schemas describe values already made: their defaults tell nothing. */
  output?: boolean;
}

/**
 * The constraints of a schema that its TypeScript type cannot express, as tags: `@integer`, `@minimum 1`,
 * `@pattern ^a+$`, `@default 20`, … Item constraints of an array of scalars follow with an `items.` prefix.
 */
export function schemaTags(schema: JsonSchemaObject, context: TagContext = {}, prefix = ""): string[] {
  const tags: string[] = [];
  const typeList = types(schema);
  if (typeList.includes("integer") && !typeList.includes("number")) tags.push(`@${prefix}integer`);
  for (const key of NUMBER_TAGS) {
    const value = schema[key];
    if (typeof value === "bigint") {
      tags.push(`@${prefix}${key} ${value}`);
    } else if (typeof value === "number" && Number.isFinite(value)) {
      if (isSafeIntegerBound(key, value)) continue;
      if (context.tupleLength !== undefined && (key === "minItems" || key === "maxItems")) continue;
      tags.push(`@${prefix}${key} ${value}`);
    } else if (value === true && (key === "exclusiveMinimum" || key === "exclusiveMaximum")) {
      // draft-04: a boolean that makes `minimum`/`maximum` exclusive.
      const bound = schema[key === "exclusiveMinimum" ? "minimum" : "maximum"];
      if (typeof bound === "number") tags.push(`@${prefix}${key} ${bound}`);
    }
  }
  for (const key of STRING_TAGS) {
    const value = schema[key];
    if (typeof value === "string" && value !== "") tags.push(`@${prefix}${key} ${oneLine(value)}`);
  }
  if (schema.uniqueItems === true) tags.push(`@${prefix}uniqueItems`);
  if (prefix === "") {
    if (schema.default !== undefined && context.output !== true) {
      const json = previewJson(schema.default, DEFAULT_VALUE_MAX_CHARS);
      if (json !== undefined) tags.push(`@default ${shorten(oneLine(json))}`);
    }
    if (schema.deprecated === true) tags.push("@deprecated");
    if (schema.readOnly === true) tags.push("@readOnly");
    const items = schema.items;
    if (typeof items === "object" && items !== null && !Array.isArray(items)) {
      const itemTypes = types(items as JsonSchemaObject);
      if (!itemTypes.includes("object") && !itemTypes.includes("array")) {
        tags.push(...schemaTags(items as JsonSchemaObject, {}, "items."));
      }
    }
  }
  return tags;
}
