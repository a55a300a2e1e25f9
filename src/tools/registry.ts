/**
 * Per-caller registries: the host registers its tools once, and for each request builds the set a signed-in caller
 * may use with `registry.for({ roles, permissions })`. A tool is in a caller's set when the caller holds one of its
 * roles (a tool without roles admits every role), every permission it declares, and every permission `invokeTool`
 * requires for it (`tool:<id>`, `effect:<effect>`, its capabilities). A program run for that caller only ever reaches
 * that set; calls go through `invokeTool` with the caller's permissions and the registry's `onCall` hook.
 */
import type { Budget } from "./budget.ts";
import { type AnyTool, isTool, requiredPermissions, type Scope } from "./define.ts";
import { configError, failure, type Outcome } from "./errors.ts";
import { invokeTool, type OnCallHook } from "./invoke.ts";
import { checkNames } from "./validate.ts";

/** Who is calling, as the host established it (from a session or token, never from a program). */
export interface Caller {
  readonly roles: readonly string[];
  readonly permissions: readonly string[];
}

export interface CallerInvokeOptions {
  runId: string;
  callId: string;
  scope: Scope;
  signal?: AbortSignal;
  budget: Budget;
  maxInputBytes?: number;
  maxOutputBytes?: number;
}

/** The tools one caller may use. */
export interface CallerTools {
  readonly caller: Caller;
  readonly tools: readonly AnyTool[];
  /** True when the tool (or a tool of that id) is in this caller's set. */
  has(tool: AnyTool | string): boolean;
  get(id: string): AnyTool | undefined;
  /**
   * Calls a tool of this caller's set through `invokeTool` with the caller's permissions. An id the registry does not
   * know is NOT_FOUND; a tool outside the caller's set is PERMISSION_DENIED, and neither reaches the tool.
   */
  invoke(tool: AnyTool | string, input: unknown, options: CallerInvokeOptions): Promise<Outcome<unknown>>;
}

export interface ToolRegistry {
  readonly tools: readonly AnyTool[];
  for(caller: Caller): CallerTools;
}

export interface ToolRegistryOptions {
  /** Sees every call made through the registry; may refuse it (see `OnCallHook`). */
  onCall?: OnCallHook;
}

const callerSets = new WeakSet<object>();

/** True only for caller sets made by `registry.for()`. */
export function isCallerTools(value: unknown): value is CallerTools {
  return typeof value === "object" && value !== null && callerSets.has(value);
}

export function createToolRegistry(tools: readonly AnyTool[], options: ToolRegistryOptions = {}): ToolRegistry {
  if (!Array.isArray(tools)) throw configError("createToolRegistry needs an array of tools");
  const byId = new Map<string, AnyTool>();
  for (const tool of tools) {
    if (!isTool(tool)) throw configError("a registry accepts only tools made by defineTool");
    if (byId.has(tool.id)) throw configError("a registry may not hold two tools with the same id");
    byId.set(tool.id, tool);
  }
  const onCall = options.onCall;
  if (onCall !== undefined && typeof onCall !== "function") throw configError("onCall must be a function");
  const all = Object.freeze([...byId.values()]);

  const forCaller = (caller: Caller): CallerTools => {
    if (typeof caller !== "object" || caller === null) throw configError("registry.for needs { roles, permissions }");
    const roles = checkNames(caller.roles, "caller roles", true);
    const permissions = checkNames(caller.permissions, "caller permissions", true);
    const granted = new Set(permissions);
    const visible = all.filter(
      (tool) =>
        (tool.roles.length === 0 || tool.roles.some((role) => roles.includes(role))) &&
        tool.permissions.every((p) => granted.has(p)) &&
        requiredPermissions(tool).every((p) => granted.has(p)),
    );
    const set = new Map(visible.map((tool) => [tool.id, tool] as const));
    const frozenCaller: Caller = Object.freeze({ roles, permissions });
    const has = (tool: AnyTool | string) =>
      typeof tool === "string" ? set.has(tool) : isTool(tool) && set.get(tool.id) === tool;
    const result: CallerTools = Object.freeze({
      caller: frozenCaller,
      tools: Object.freeze(visible),
      has,
      get: (id: string) => set.get(id),
      invoke: async (tool: AnyTool | string, input: unknown, invokeOptions: CallerInvokeOptions) => {
        const id = typeof tool === "string" ? tool : isTool(tool) ? tool.id : undefined;
        const registered = id === undefined ? undefined : byId.get(id);
        if (registered === undefined || (typeof tool !== "string" && registered !== tool)) {
          return failure("NOT_FOUND", "the registry holds no such tool");
        }
        if (!has(registered)) return failure("PERMISSION_DENIED", "the tool is not in this caller's set");
        if (typeof invokeOptions !== "object" || invokeOptions === null) {
          return failure("INVALID_CONFIG", "invoke needs options { runId, callId, scope, budget }");
        }
        return invokeTool(registered, input, {
          runId: invokeOptions.runId,
          callId: invokeOptions.callId,
          scope: invokeOptions.scope,
          signal: invokeOptions.signal,
          budget: invokeOptions.budget,
          maxInputBytes: invokeOptions.maxInputBytes,
          maxOutputBytes: invokeOptions.maxOutputBytes,
          permissions: { allow: permissions },
          onCall,
        });
      },
    });
    callerSets.add(result);
    return result;
  };

  return Object.freeze({ tools: all, for: forCaller });
}
