import { loadZod } from "../tools/z.ts";

/** The part of zod 4 that converts schemas; loaded on first use, so plain JSON Schema never loads zod. */
interface ZodModule {
  toJSONSchema(schema: unknown, params?: Record<string, unknown>): unknown;
  object(shape: Record<string, unknown>): unknown;
}

/** zod where it can be loaded (Node, Bun, with zod installed), else null. */
function ownZod(): ZodModule | null {
  try {
    return loadZod() as unknown as ZodModule;
  } catch {
    return null;
  }
}

/** True for a zod 4 schema (classic or mini), recognised by its `_zod` internals without loading zod. */
export function isZodSchema(value: unknown): boolean {
  if (typeof value !== "object" || value === null) return false;
  const internals = (value as { _zod?: unknown })._zod;
  return typeof internals === "object" && internals !== null && "def" in internals;
}

/** True for a zod raw shape such as the MCP SDK takes: a non-empty plain object whose values are all zod schemas. */
function isZodRawShape(value: unknown): value is Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value) || isZodSchema(value)) return false;
  const values = Object.values(value);
  return values.length > 0 && values.every(isZodSchema);
}

interface StandardJsonSchema {
  "~standard"?: { jsonSchema?: { input?: (o: object) => unknown; output?: (o: object) => unknown } };
}

/**
 * Turns a zod 4 schema (or zod raw shape) into JSON Schema with zod's own `z.toJSONSchema`; anything else is
 * returned as it is. A schema zod cannot convert becomes `true` (any value).
 */
export function toJsonSchema(schema: unknown, io: "input" | "output" = "input"): unknown {
  const shape = isZodRawShape(schema);
  if (!shape && !isZodSchema(schema)) return schema;
  const zod = ownZod();
  try {
    if (zod !== null) {
      const zodSchema = shape ? zod.object(schema) : schema;
      return zod.toJSONSchema(zodSchema, { io, unrepresentable: "any", cycles: "ref", reused: "inline" });
    }
    // Without our own zod, a zod that implements Standard JSON Schema converts itself.
    const convert = (schema as StandardJsonSchema)["~standard"]?.jsonSchema?.[io];
    if (convert !== undefined) return convert({ target: "draft-2020-12" });
  } catch {
    // Falls through: an unconvertible schema describes any value.
  }
  return true;
}
