import { oneLine } from "./comments.ts";
import type { JsonSchemaObject } from "./types.ts";

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
    if (typeof value === "number" && Number.isFinite(value)) {
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
      const json = JSON.stringify(schema.default);
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
