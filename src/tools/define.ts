/** Typed tools: `defineTool` validates a definition once and returns a frozen tool with a digest. */
import type { z } from "zod";
import { type JsonValue, jsonDigest, MAX_JSON_BYTES } from "../json/index.ts";
import { checkInteger, optionKeys, refuseUnknownOptions } from "../platform/options.ts";
import { CONFIG_OPTION_ERRORS, configError } from "./errors.ts";
import {
  checkId,
  checkName,
  checkNames,
  checkSchema,
  checkText,
  MAX_NAME_CHARS,
  schemaDescription,
} from "./validate.ts";

/**
 * What a tool does to the world: nothing (a pure computation), reads, writes, or acts on the host itself. Every effect
 * but `none` needs the permission `effect:<effect>`. A `write` or `host` tool that fails may have acted before it
 * failed, so its failure is `outcome_unknown`; a `none` or `read` tool's failure changes nothing.
 */
export type ToolEffect = "none" | "read" | "write" | "host";
export const TOOL_EFFECTS: readonly ToolEffect[] = Object.freeze(["none", "read", "write", "host"]);

/** Whether a call of a tool with these effects can have changed anything outside when it failed. */
export function changesNothing(effects: ToolEffect): boolean {
  return effects === "none" || effects === "read";
}

/** Default time a tool may run before it is stopped (`TIMEOUT`, or `OUTCOME_UNKNOWN` for write and host tools). */
export const DEFAULT_TOOL_TIMEOUT_MS = 30_000;
/** Longest `timeoutMillis` a tool may declare. */
export const MAX_TOOL_TIMEOUT_MS = 24 * 60 * 60 * 1000;
/** Largest `costMicros` of one call. */
export const MAX_COST_MICROS = Number.MAX_SAFE_INTEGER;

/**
 * The trusted scope of a call: whose data a tool may touch. The host passes it; a program never can. Tools learn
 * the principal, tenant or project only from here, never from their input.
 */
export interface Scope {
  readonly principalId: string;
  readonly [key: string]: JsonValue | undefined;
}

export interface ToolContext {
  readonly runId: string;
  readonly callId: string;
  /** A deep-frozen copy of the scope the host passed. */
  readonly scope: Scope;
  /** Aborted when the call is cancelled or times out; honour it. */
  readonly signal: AbortSignal;
}

export type GuardDecision = boolean | { readonly allow: boolean };

/**
 * Whether a person must approve a call before it runs, in a code mode with `approvals`: `never` (the default),
 * `always`, or a function of the validated input that says true when this call needs one.
 */
export type ToolApproval<I = unknown> = "never" | "always" | ((input: I) => boolean);

/**
 * A policy check that runs before a tool (after its input was validated and its permissions checked). `false` or
 * `{ allow: false }` blocks the call (`GUARD_BLOCKED`); a guard that throws or does not answer in time makes it
 * `GUARD_UNAVAILABLE`.
 */
export interface ToolGuard<I = unknown> {
  readonly id: string;
  check(input: I, context: ToolContext): GuardDecision | Promise<GuardDecision>;
}

export interface ToolDefinition<I extends z.ZodType, O extends z.ZodType> {
  /** `tool:<id>` is the permission that grants it. */
  id: string;
  version: string;
  description: string;
  input: I;
  output: O;
  effects: ToolEffect;
  /** Further permissions a caller must hold, exactly as written. */
  capabilities: readonly string[];
  /** Cost of one call, reserved on the budget before the tool runs. */
  costMicros: number;
  execute(input: z.output<I>, context: ToolContext): Promise<z.input<O>> | z.input<O>;
  guards?: readonly ToolGuard<z.output<I>>[];
  /** Roles that may see the tool in a caller-scoped registry; none means any role. */
  roles?: readonly string[];
  /** Permissions a caller must hold to see the tool in a caller-scoped registry. */
  permissions?: readonly string[];
  /** Default `DEFAULT_TOOL_TIMEOUT_MS`. */
  timeoutMillis?: number;
  /** Default `never`. See `ToolApproval`. */
  approval?: ToolApproval<z.output<I>>;
}

export interface Tool<I extends z.ZodType = z.ZodType, O extends z.ZodType = z.ZodType> {
  readonly kind: "airlock.tool";
  readonly id: string;
  readonly version: string;
  readonly description: string;
  readonly input: I;
  readonly output: O;
  readonly effects: ToolEffect;
  readonly capabilities: readonly string[];
  readonly costMicros: number;
  readonly guards: readonly ToolGuard<z.output<I>>[];
  readonly roles: readonly string[];
  readonly permissions: readonly string[];
  readonly timeoutMillis: number;
  // biome-ignore lint/suspicious/noExplicitAny: any input, so that `defineTool({ ...tool, input })` derives a tool.
  readonly approval: ToolApproval<any>;
  /**
   * SHA-256 over the canonical JSON of everything above and the guards' ids (not their code, nor the handler's, nor
   * the approval function's).
   */
  readonly digest: string;
}

/**
 * A definition's fields, and a tool's own (recomputed), so that `defineTool({ ...tool, id, execute })` derives a tool
 * (a tool does not carry its handler: pass it again).
 */
const TOOL_DEFINITION_KEYS = [
  ...optionKeys<ToolDefinition<z.ZodType, z.ZodType>>({
    id: true,
    version: true,
    description: true,
    input: true,
    output: true,
    effects: true,
    capabilities: true,
    costMicros: true,
    execute: true,
    guards: true,
    roles: true,
    permissions: true,
    timeoutMillis: true,
    approval: true,
  }),
  ...optionKeys<Omit<Tool, keyof ToolDefinition<z.ZodType, z.ZodType>>>({ kind: true, digest: true }),
];

// biome-ignore lint/suspicious/noExplicitAny: a tool of any schemas; its handler is only ever called with validated input.
export type AnyTool = Tool<any, any>;

type Handler = (input: unknown, context: ToolContext) => unknown;

/**
 * Each tool's handler, kept off the tool: whoever holds a tool (a program's definition, a registry, a log) can read
 * its metadata but cannot run it except through `invokeTool`, under its permissions, guards and budget.
 */
const handlers = new WeakMap<object, Handler>();

/** True only for tools made by `defineTool` (copies, spreads and look-alikes are not). */
export function isTool(value: unknown): value is AnyTool {
  return typeof value === "object" && value !== null && handlers.has(value);
}

/** The handler of a tool made by `defineTool`, for the broker only. */
export function handlerOf(tool: AnyTool): Handler {
  const handler = handlers.get(tool);
  if (handler === undefined) throw configError("the tool was not made by defineTool");
  return handler;
}

/**
 * The permissions `invokeTool` requires for a tool: `tool:<id>`, `effect:<effect>` (none for a pure tool, whose
 * effects are `none`) and every capability.
 */
export function requiredPermissions(tool: AnyTool): readonly string[] {
  const effect = tool.effects === "none" ? [] : [`effect:${tool.effects}`];
  return [`tool:${tool.id}`, ...effect, ...tool.capabilities];
}

export function defineTool<I extends z.ZodType, O extends z.ZodType>(definition: ToolDefinition<I, O>): Tool<I, O> {
  if (typeof definition !== "object" || definition === null) throw configError("defineTool needs a definition object");
  refuseUnknownOptions(definition, "a tool definition", TOOL_DEFINITION_KEYS, CONFIG_OPTION_ERRORS, "field");
  const id = checkId(definition.id, "tool id");
  const version = checkName(definition.version, "tool version");
  const description = checkText(definition.description, "tool description");
  const input = checkSchema(definition.input, "tool input") as I;
  const output = checkSchema(definition.output, "tool output") as O;
  if (!TOOL_EFFECTS.includes(definition.effects)) {
    throw configError("tool effects must be 'none', 'read', 'write' or 'host'");
  }
  const capabilities = checkNames(definition.capabilities, "tool capabilities", true);
  const costMicros = checkInteger(definition.costMicros, "tool costMicros", 0, MAX_COST_MICROS, CONFIG_OPTION_ERRORS);
  if (typeof definition.execute !== "function") throw configError("tool execute must be a function");
  const guards = checkGuards(definition.guards);
  const roles = checkNames(definition.roles, "tool roles", false);
  const permissions = checkNames(definition.permissions, "tool permissions", false);
  const timeoutMillis =
    definition.timeoutMillis === undefined
      ? DEFAULT_TOOL_TIMEOUT_MS
      : checkInteger(definition.timeoutMillis, "tool timeoutMillis", 1, MAX_TOOL_TIMEOUT_MS, CONFIG_OPTION_ERRORS);
  const approval = definition.approval ?? "never";
  if (approval !== "never" && approval !== "always" && typeof approval !== "function") {
    throw configError("tool approval must be 'never', 'always' or a function of the input");
  }
  const digest = jsonDigest(
    {
      kind: "airlock.tool/1",
      id,
      version,
      description,
      effects: definition.effects,
      capabilities: [...capabilities].sort(),
      costMicros,
      roles: [...roles].sort(),
      permissions: [...permissions].sort(),
      timeoutMillis,
      guards: guards.map((g) => g.id),
      // A tool that never asks keeps the digest it had before approvals existed.
      ...(approval === "never" ? {} : { approval: typeof approval === "function" ? "input" : approval }),
      input: schemaDescription(input, "input"),
      output: schemaDescription(output, "output"),
    },
    { maxBytes: MAX_JSON_BYTES },
  );
  const execute = definition.execute;
  const tool: Tool<I, O> = Object.freeze({
    kind: "airlock.tool" as const,
    id,
    version,
    description,
    input,
    output,
    effects: definition.effects,
    capabilities,
    costMicros,
    guards,
    roles,
    permissions,
    timeoutMillis,
    approval,
    digest,
  });
  handlers.set(tool, (value, context) => execute(value as z.output<I>, context));
  return tool;
}

function checkGuards<I>(value: unknown): readonly ToolGuard<I>[] {
  if (value === undefined) return Object.freeze([]);
  if (!Array.isArray(value)) throw configError("tool guards must be an array");
  const ids = new Set<string>();
  const guards: ToolGuard<I>[] = [];
  for (const guard of value as unknown[]) {
    if (typeof guard !== "object" || guard === null || typeof (guard as ToolGuard).check !== "function") {
      throw configError("every tool guard must be { id, check(input, context) }");
    }
    const id = checkId((guard as ToolGuard).id, "guard id");
    if (ids.has(id)) throw configError("tool guards must have distinct ids");
    ids.add(id);
    const check = (guard as ToolGuard<I>).check;
    guards.push(Object.freeze({ id, check: (input: I, context: ToolContext) => check.call(guard, input, context) }));
  }
  return Object.freeze(guards);
}

export { MAX_NAME_CHARS };
