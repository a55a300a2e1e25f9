/**
 * Bounded JSON, the bottom layer: every value that crosses a boundary (a program's input and output, a tool's input
 * and output, a scope, the material of a digest) is copied, checked and measured here.
 *
 * A JSON value here is `null`, a boolean, a finite number, a string, an array, or a plain object (prototype
 * `Object.prototype` or `null`) whose own enumerable string keys hold JSON values. Nothing else is accepted: no
 * `undefined` (except as an object property, which is dropped as `JSON.stringify` drops it), functions, symbols,
 * BigInts, class instances, getters (they are never invoked), holes in arrays, cycles, or `__proto__` keys.
 *
 * Limits: at most `MAX_JSON_DEPTH` nested arrays/objects, at most `MAX_JSON_VALUES` values (every scalar, array and
 * object counts one), and at most `maxBytes` bytes of UTF-8 in the value's compact JSON text. A value that breaks
 * one is refused with `LIMIT_EXCEEDED`; one that is not JSON with `INVALID_JSON`. Messages name the rule, never the
 * value.
 */
import { utf8Length as platformUtf8Length, sha256Hex } from "../platform/platform.ts";

/** Arrays and objects nested inside each other: a top-level object is level 1. */
export const MAX_JSON_DEPTH = 32;
/** Values in one JSON value: every scalar, array and object counts one. */
export const MAX_JSON_VALUES = 100_000;
/** Default byte cap where a caller names none: 16 MiB of UTF-8. */
export const MAX_JSON_BYTES = 16 * 1024 * 1024;

export type JsonPrimitive = null | boolean | number | string;
export type JsonValue = JsonPrimitive | JsonValue[] | { [key: string]: JsonValue };
export type JsonObject = { [key: string]: JsonValue };

export interface JsonLimits {
  /** UTF-8 bytes of the compact JSON text. */
  maxBytes: number;
  /** Default `MAX_JSON_DEPTH`; can only be lowered. */
  maxDepth?: number;
  /** Default `MAX_JSON_VALUES`; can only be lowered. */
  maxValues?: number;
}

export type JsonErrorCode = "INVALID_JSON" | "LIMIT_EXCEEDED";

/** A value that is not JSON or breaks a limit. `rule` names what was broken; `message` never contains the value. */
export class JsonBoundsError extends Error {
  override readonly name = "JsonBoundsError";
  constructor(
    readonly code: JsonErrorCode,
    readonly rule: JsonRule,
    message: string,
  ) {
    super(message);
  }
}

export type JsonRule =
  | "depth"
  | "values"
  | "bytes"
  | "type"
  | "number"
  | "proto_key"
  | "cycle"
  | "accessor"
  | "hole"
  | "syntax"
  | "unreadable";

export interface CopiedJson<T extends JsonValue = JsonValue> {
  /** A fresh copy sharing nothing with the original; deep-frozen when asked. */
  value: T;
  /** Canonical text: keys sorted by UTF-16 code units, no whitespace, numbers and strings as `JSON.stringify` writes them. */
  canonical: string;
  /** UTF-8 bytes of `canonical` (the same as of the compact `JSON.stringify` text). */
  bytes: number;
}

interface Walk {
  maxBytes: number;
  maxDepth: number;
  maxValues: number;
  values: number;
  bytes: number;
  freeze: boolean;
  ancestors: Set<object>;
}

const OBJECT_PROTOTYPE = Object.prototype;
const ARRAY_PROTOTYPE = Array.prototype;

function limitsOf(limits: JsonLimits, freeze: boolean): Walk {
  const { maxBytes } = limits;
  if (typeof maxBytes !== "number" || !Number.isSafeInteger(maxBytes) || maxBytes < 1) {
    throw new RangeError("maxBytes must be a positive integer");
  }
  const maxDepth = Math.min(limits.maxDepth ?? MAX_JSON_DEPTH, MAX_JSON_DEPTH);
  const maxValues = Math.min(limits.maxValues ?? MAX_JSON_VALUES, MAX_JSON_VALUES);
  return { maxBytes, maxDepth, maxValues, values: 0, bytes: 0, freeze, ancestors: new Set() };
}

function tooDeep(walk: Walk): JsonBoundsError {
  return new JsonBoundsError("LIMIT_EXCEEDED", "depth", `JSON may nest at most ${walk.maxDepth} levels deep`);
}

function tooLarge(walk: Walk): JsonBoundsError {
  return new JsonBoundsError(
    "LIMIT_EXCEEDED",
    "bytes",
    `the JSON text is larger than the limit of ${walk.maxBytes} bytes`,
  );
}

function count(walk: Walk, bytes: number): void {
  walk.values += 1;
  if (walk.values > walk.maxValues) {
    throw new JsonBoundsError("LIMIT_EXCEEDED", "values", `JSON may hold at most ${walk.maxValues} values`);
  }
  walk.bytes += bytes;
  if (walk.bytes > walk.maxBytes) throw tooLarge(walk);
}

/** UTF-8 bytes of a string of JSON text that holds no lone surrogates (as `JSON.stringify` output never does). */
function utf8Length(text: string): number {
  return platformUtf8Length(text);
}

function notJson(rule: JsonRule, message: string): JsonBoundsError {
  return new JsonBoundsError("INVALID_JSON", rule, message);
}

function walkValue(value: unknown, depth: number, walk: Walk): [JsonValue, string] {
  switch (typeof value) {
    case "string": {
      // Every character takes at least one byte, so an overlong string is refused before it is encoded.
      if (value.length + 2 > walk.maxBytes - walk.bytes) throw tooLarge(walk);
      const text = JSON.stringify(value);
      count(walk, utf8Length(text));
      return [value, text];
    }
    case "number": {
      if (!Number.isFinite(value)) throw notJson("number", "JSON numbers must be finite");
      const normal = value === 0 ? 0 : value;
      const text = JSON.stringify(normal);
      count(walk, text.length);
      return [normal, text];
    }
    case "boolean":
      count(walk, value ? 4 : 5);
      return [value, value ? "true" : "false"];
    case "object":
      if (value === null) {
        count(walk, 4);
        return [null, "null"];
      }
      return walkContainer(value, depth + 1, walk);
    default:
      throw notJson("type", `a value of type ${typeof value} is not JSON`);
  }
}

function walkContainer(value: object, depth: number, walk: Walk): [JsonValue, string] {
  if (walk.ancestors.has(value)) throw notJson("cycle", "a JSON value may not contain itself");
  if (depth > walk.maxDepth) throw tooDeep(walk);
  const proto = Object.getPrototypeOf(value);
  const isArray = Array.isArray(value);
  if (isArray ? proto !== ARRAY_PROTOTYPE : proto !== OBJECT_PROTOTYPE && proto !== null) {
    throw notJson("type", "only plain objects and arrays are JSON");
  }
  walk.ancestors.add(value);
  // The brackets and one separator per member are counted as the members are.
  count(walk, 2);
  let result: [JsonValue, string];
  if (isArray) {
    const length = (value as unknown[]).length;
    if (length > walk.maxValues)
      throw new JsonBoundsError("LIMIT_EXCEEDED", "values", `JSON may hold at most ${walk.maxValues} values`);
    const copy: JsonValue[] = [];
    const parts: string[] = [];
    for (let i = 0; i < length; i++) {
      const desc = Object.getOwnPropertyDescriptor(value, i);
      if (desc === undefined) throw notJson("hole", "JSON arrays may not have holes");
      if (!("value" in desc)) throw notJson("accessor", "JSON values may not have getters");
      if (i > 0) {
        walk.bytes += 1;
        if (walk.bytes > walk.maxBytes) throw tooLarge(walk);
      }
      const [item, text] = walkValue(desc.value, depth, walk);
      copy.push(item);
      parts.push(text);
    }
    if (walk.freeze) Object.freeze(copy);
    result = [copy, `[${parts.join(",")}]`];
  } else {
    const keys = Object.keys(value).sort();
    const copy: JsonObject = {};
    const parts: string[] = [];
    for (const key of keys) {
      if (key === "__proto__") throw notJson("proto_key", "JSON objects may not have a __proto__ key");
      const desc = Object.getOwnPropertyDescriptor(value, key);
      if (desc === undefined) continue;
      if (!("value" in desc)) throw notJson("accessor", "JSON values may not have getters");
      if (desc.value === undefined) continue;
      const keyText = JSON.stringify(key);
      if (keyText.length > walk.maxBytes - walk.bytes) throw tooLarge(walk);
      walk.bytes += utf8Length(keyText) + 1 + (parts.length > 0 ? 1 : 0);
      if (walk.bytes > walk.maxBytes) throw tooLarge(walk);
      const [item, text] = walkValue(desc.value, depth, walk);
      copy[key] = item;
      parts.push(`${keyText}:${text}`);
    }
    if (walk.freeze) Object.freeze(copy);
    result = [copy, `{${parts.join(",")}}`];
  }
  walk.ancestors.delete(value);
  return result;
}

/**
 * Copies a JSON value within limits and measures it. Throws `JsonBoundsError` for a value that is not JSON or
 * breaks a limit; any other failure while reading the value (a proxy that throws) is reported as `INVALID_JSON`.
 */
export function copyJson<T extends JsonValue = JsonValue>(
  value: unknown,
  limits: JsonLimits,
  options: { freeze?: boolean } = {},
): CopiedJson<T> {
  const walk = limitsOf(limits, options.freeze === true);
  try {
    const [copy, canonical] = walkValue(value, 0, walk);
    return { value: copy as T, canonical, bytes: walk.bytes };
  } catch (error) {
    if (error instanceof JsonBoundsError) throw error;
    if (error instanceof RangeError && /call stack/i.test(error.message)) throw tooDeep(walk);
    throw notJson("unreadable", "the value could not be read as JSON");
  }
}

/** Like `copyJson`, but returns the error instead of throwing it. */
export function tryCopyJson<T extends JsonValue = JsonValue>(
  value: unknown,
  limits: JsonLimits,
  options: { freeze?: boolean } = {},
): { ok: true; json: CopiedJson<T> } | { ok: false; error: JsonBoundsError } {
  try {
    return { ok: true, json: copyJson<T>(value, limits, options) };
  } catch (error) {
    return { ok: false, error: error as JsonBoundsError };
  }
}

/**
 * Checks the nesting of JSON text without parsing it, so that no parser ever recurses deeper than the limit.
 * Brackets inside strings do not count.
 */
function checkTextDepth(text: string, maxDepth: number): void {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++;
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x5b || c === 0x7b) {
      depth++;
      if (depth > maxDepth) {
        throw new JsonBoundsError("LIMIT_EXCEEDED", "depth", `JSON may nest at most ${maxDepth} levels deep`);
      }
    } else if (c === 0x5d || c === 0x7d) depth--;
  }
}

/** Parses JSON text within limits: its size and depth are checked before it is parsed, its values after. */
export function parseJson<T extends JsonValue = JsonValue>(
  text: string,
  limits: JsonLimits,
  options: { freeze?: boolean } = {},
): CopiedJson<T> {
  const walk = limitsOf(limits, false);
  if (typeof text !== "string") throw notJson("type", "JSON text must be a string");
  if (text.length > walk.maxBytes || utf8Length(text) > walk.maxBytes) throw tooLarge(walk);
  checkTextDepth(text, walk.maxDepth);
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw notJson("syntax", "the text is not valid JSON");
  }
  return copyJson<T>(parsed, limits, options);
}

/** Canonical JSON text of a value (see `CopiedJson.canonical`); throws `JsonBoundsError` as `copyJson` does. */
export function canonicalJson(value: unknown, limits: JsonLimits = { maxBytes: MAX_JSON_BYTES }): string {
  return copyJson(value, limits).canonical;
}

/** `sha256:` and the hex SHA-256 of a text's UTF-8 bytes. */
export function sha256(text: string): string {
  return `sha256:${sha256Hex(text)}`;
}

/** The SHA-256 digest of a value's canonical JSON text: equal values have equal digests whatever their key order. */
export function jsonDigest(value: unknown, limits: JsonLimits = { maxBytes: MAX_JSON_BYTES }): string {
  return sha256(canonicalJson(value, limits));
}

/** The bare hex SHA-256 of `{ domain, value }` in canonical form: ids and digests that stores and approvals compare. */
export function domainDigest(domain: string, value: unknown): string {
  return sha256Hex(canonicalJson({ domain, value }, { maxBytes: MAX_JSON_BYTES }));
}

/**
 * `domainDigest(domain, copied.value)` of a value `copyJson` made, from its canonical text: the same digest without
 * walking the value again (`{ domain, value }` in canonical form is these two members in this order).
 */
export function domainDigestOfCopy(domain: string, copied: CopiedJson): string {
  return sha256Hex(`{"domain":${JSON.stringify(domain)},"value":${copied.canonical}}`);
}

/** Deep-freezes a value that `copyJson` made (plain data only). */
export function deepFreezeJson<T extends JsonValue>(value: T): T {
  if (value !== null && typeof value === "object" && !Object.isFrozen(value)) {
    for (const item of Object.values(value)) deepFreezeJson(item as JsonValue);
    Object.freeze(value);
  }
  return value;
}
