/** Checks of configuration values; each failure is an `INVALID_CONFIG` AirlockError that names the field. */
import type { z } from "zod";
import { configError } from "./errors.ts";
import { loadZod } from "./z.ts";

/** Characters of an id, version, permission, capability or role. */
export const MAX_NAME_CHARS = 256;
/** Characters of a description or intent. */
export const MAX_DESCRIPTION_CHARS = 16 * 1024;

const NAME = /^[A-Za-z0-9][A-Za-z0-9_.:/@+-]*$/;
const ID = /^[A-Za-z][A-Za-z0-9_.:/@+-]*$/;

export function checkName(value: unknown, field: string): string {
  if (typeof value !== "string" || value.length === 0 || value.length > MAX_NAME_CHARS || !NAME.test(value)) {
    throw configError(
      `${field} must be 1-${MAX_NAME_CHARS} characters of letters, digits and _.:/@+- starting with a letter or digit`,
    );
  }
  return value;
}

/** An id (of a tool, guard, program or adapter): a name that starts with a letter, as Mayura's ids do. */
export function checkId(value: unknown, field: string): string {
  if (typeof value !== "string" || value.length === 0 || value.length > MAX_NAME_CHARS || !ID.test(value)) {
    throw configError(
      `${field} must be 1-${MAX_NAME_CHARS} characters of letters, digits and _.:/@+- starting with a letter`,
    );
  }
  return value;
}

export function checkText(value: unknown, field: string, max = MAX_DESCRIPTION_CHARS): string {
  if (typeof value !== "string" || value.length > max) {
    throw configError(`${field} must be a string of at most ${max} characters`);
  }
  return value;
}

export function checkNames(value: unknown, field: string, required: boolean): readonly string[] {
  if (value === undefined && !required) return Object.freeze([]);
  if (!Array.isArray(value)) throw configError(`${field} must be an array of strings`);
  const seen = new Set<string>();
  for (const item of value) {
    checkName(item, `every entry of ${field}`);
    if (seen.has(item)) throw configError(`${field} may not list the same entry twice`);
    seen.add(item);
  }
  return Object.freeze([...value] as string[]);
}

/** A zod 4 schema: classic or mini, recognised by its internals and its async parser. */
export function isSchema(value: unknown): value is z.ZodType {
  if (typeof value !== "object" || value === null) return false;
  const internals = (value as { _zod?: unknown })._zod;
  return (
    typeof internals === "object" &&
    internals !== null &&
    "def" in internals &&
    typeof (value as { "~standard"?: { validate?: unknown } })["~standard"]?.validate === "function"
  );
}

export function checkSchema(value: unknown, field: string): z.ZodType {
  if (!isSchema(value)) throw configError(`${field} must be a zod schema`);
  return value;
}

/**
 * Validates a value with a schema through the Standard Schema interface (sync or async schemas alike). Returns the
 * schema's output, or `undefined` as the failure marker's partner: `{ ok: false }`. A schema that throws fails.
 */
export async function parseWithSchema(
  schema: z.ZodType,
  value: unknown,
): Promise<{ ok: true; value: unknown } | { ok: false }> {
  try {
    const result = await schema["~standard"].validate(value);
    if (result.issues !== undefined) return { ok: false };
    return { ok: true, value: result.value };
  } catch {
    return { ok: false };
  }
}

/**
 * JSON Schema of a zod schema for digests; a schema zod cannot describe contributes `true`. zod is loaded here, on
 * the first schema, by which time the application that wrote it has loaded it already.
 */
export function schemaDescription(schema: z.ZodType, io: "input" | "output"): unknown {
  const zod = loadZod("a zod schema");
  try {
    return zod.toJSONSchema(schema, { io, unrepresentable: "any", cycles: "ref", reused: "inline" });
  } catch {
    return true;
  }
}
