/**
 * Workflow definitions: `defineWorkflow` captures a finite acyclic graph of tool and join nodes without running it.
 * A definition is frozen and carries a digest over everything that decides what its steps do (tools by id, version
 * and digest, effects, costs, approvals, bindings), so that a stored run can only be driven by the definition it was
 * submitted with.
 */
import type { z } from "zod";
import { type JsonValue, jsonDigest, MAX_JSON_BYTES, tryCopyJson } from "../json/index.ts";
import { optionKeys, refuseUnknownOptions } from "../platform/options.ts";
import { type AnyTool, isTool } from "../tools/define.ts";
import { AirlockError, CONFIG_OPTION_ERRORS, configError } from "../tools/errors.ts";
import { checkName, checkSchema, schemaDescription } from "../tools/validate.ts";

/** Nodes of one workflow. */
export const MAX_WORKFLOW_NODES = 128;
/** Property names in one binding path. */
export const MAX_BINDING_PATH = 32;
/** Bytes of a literal binding's value. */
export const MAX_LITERAL_BYTES = 64 * 1024;

/** Where a node's input (or the workflow's result) comes from. */
export type Binding =
  | { readonly kind: "literal"; readonly value: JsonValue }
  | { readonly kind: "input"; readonly path: readonly string[] }
  | { readonly kind: "step"; readonly stepId: string; readonly path: readonly string[] };

export type WorkflowNode =
  | {
      readonly kind: "tool";
      readonly id: string;
      readonly tool: AnyTool;
      readonly input: Binding;
      readonly dependsOn?: readonly string[];
      /** A person must approve this step's exact input (by digest) before it runs. */
      readonly approval?: boolean;
    }
  | { readonly kind: "join"; readonly id: string; readonly dependsOn: readonly string[] };

export interface WorkflowOptions<I extends z.ZodType, O extends z.ZodType> {
  id: string;
  version: string;
  input: I;
  output: O;
  nodes: readonly WorkflowNode[];
  result: Binding;
}

export type DefinedNode =
  | {
      readonly kind: "tool";
      readonly id: string;
      readonly tool: AnyTool;
      readonly input: Binding;
      readonly dependsOn: readonly string[];
      readonly approval: boolean;
    }
  | { readonly kind: "join"; readonly id: string; readonly dependsOn: readonly string[] };

export interface WorkflowDefinition<I extends z.ZodType = z.ZodType, O extends z.ZodType = z.ZodType> {
  readonly kind: "airlock.workflow";
  readonly id: string;
  readonly version: string;
  /** `sha256:` and the hex SHA-256 of the canonical JSON of the graph, its bindings and schemas. */
  readonly digest: string;
  readonly input: I;
  readonly output: O;
  readonly nodes: readonly DefinedNode[];
  readonly result: Binding;
}

// biome-ignore lint/suspicious/noExplicitAny: a workflow of any schemas.
export type AnyWorkflow = WorkflowDefinition<any, any>;

const WORKFLOW_KEYS = optionKeys<WorkflowOptions<z.ZodType, z.ZodType>>({
  id: true,
  version: true,
  input: true,
  output: true,
  nodes: true,
  result: true,
});
const TOOL_NODE_KEYS = ["kind", "id", "tool", "input", "dependsOn", "approval"];
const JOIN_NODE_KEYS = ["kind", "id", "dependsOn"];
/** Step ids become object keys and parts of call ids: a letter, then letters, digits and `._-`. */
const STEP_ID = /^[A-Za-z][A-Za-z0-9._-]{0,127}$/;
const UNSAFE_KEYS = new Set(["__proto__", "constructor", "prototype"]);

const workflows = new WeakSet<object>();

/** True only for definitions made by `defineWorkflow` (copies and look-alikes are not). */
export function isWorkflow(value: unknown): value is AnyWorkflow {
  return typeof value === "object" && value !== null && workflows.has(value);
}

export function isStepId(value: unknown): value is string {
  return typeof value === "string" && STEP_ID.test(value) && !UNSAFE_KEYS.has(value);
}

function checkStepId(value: unknown, field: string): string {
  if (!isStepId(value)) {
    throw configError(
      `${field} must be 1-128 characters: a letter, then letters, digits and ._- (not a prototype key)`,
    );
  }
  return value;
}

function checkPath(value: unknown, field: string): readonly string[] {
  if (!Array.isArray(value) || value.length > MAX_BINDING_PATH) {
    throw configError(`${field} must be an array of at most ${MAX_BINDING_PATH} property names`);
  }
  for (const key of value) {
    if (typeof key !== "string" || key.length === 0 || key.length > 256 || UNSAFE_KEYS.has(key)) {
      throw configError(`${field} may hold only non-empty property names that are not prototype keys`);
    }
  }
  return Object.freeze([...value] as string[]);
}

/** Checks a binding; `steps` are the ids it may refer to. */
export function checkBinding(value: unknown, field: string, steps: ReadonlySet<string>): Binding {
  if (typeof value !== "object" || value === null) throw configError(`${field} must be a binding object`);
  const binding = value as { kind?: unknown; value?: unknown; path?: unknown; stepId?: unknown };
  switch (binding.kind) {
    case "literal": {
      refuseUnknownOptions(value, field, ["kind", "value"], CONFIG_OPTION_ERRORS, "field");
      const copied = tryCopyJson(binding.value, { maxBytes: MAX_LITERAL_BYTES }, { freeze: true });
      if (!copied.ok) throw configError(`${field}.value must be JSON of at most ${MAX_LITERAL_BYTES} bytes`);
      return Object.freeze({ kind: "literal" as const, value: copied.json.value });
    }
    case "input": {
      refuseUnknownOptions(value, field, ["kind", "path"], CONFIG_OPTION_ERRORS, "field");
      return Object.freeze({ kind: "input" as const, path: checkPath(binding.path, `${field}.path`) });
    }
    case "step": {
      refuseUnknownOptions(value, field, ["kind", "stepId", "path"], CONFIG_OPTION_ERRORS, "field");
      const stepId = checkStepId(binding.stepId, `${field}.stepId`);
      if (!steps.has(stepId)) throw configError(`${field} refers to the unknown step '${stepId}'`);
      return Object.freeze({ kind: "step" as const, stepId, path: checkPath(binding.path, `${field}.path`) });
    }
    default:
      throw configError(`${field}.kind must be 'literal', 'input' or 'step'`);
  }
}

function checkDependencies(value: unknown, field: string, ids: ReadonlySet<string>, self: string): readonly string[] {
  if (value === undefined) return Object.freeze([]);
  if (!Array.isArray(value)) throw configError(`${field} must be an array of step ids`);
  const seen = new Set<string>();
  for (const id of value) {
    if (typeof id !== "string" || !ids.has(id)) throw configError(`${field} names an unknown step`);
    if (id === self) throw configError(`${field} may not name the step itself`);
    if (seen.has(id)) throw configError(`${field} names the same step twice`);
    seen.add(id);
  }
  return Object.freeze([...seen]);
}

export function defineWorkflow<I extends z.ZodType, O extends z.ZodType>(
  options: WorkflowOptions<I, O>,
): WorkflowDefinition<I, O> {
  if (typeof options !== "object" || options === null) throw configError("defineWorkflow needs an options object");
  refuseUnknownOptions(options, "defineWorkflow", WORKFLOW_KEYS, CONFIG_OPTION_ERRORS);
  const id = checkName(options.id, "workflow id");
  const version = checkName(options.version, "workflow version");
  const input = checkSchema(options.input, "workflow input") as I;
  const output = checkSchema(options.output, "workflow output") as O;
  const raw = options.nodes;
  if (!Array.isArray(raw) || raw.length < 1 || raw.length > MAX_WORKFLOW_NODES) {
    throw configError(`a workflow needs 1-${MAX_WORKFLOW_NODES} nodes`);
  }
  const ids = new Set<string>();
  for (const node of raw as unknown[]) {
    const nodeId = checkStepId((node as { id?: unknown } | null)?.id, "every node id");
    if (ids.has(nodeId)) throw configError(`two nodes have the id '${nodeId}'`);
    ids.add(nodeId);
  }
  const nodes = (raw as unknown[]).map((value): DefinedNode => {
    const node = value as Record<string, unknown>;
    const field = `node '${node.id as string}'`;
    if (node.kind === "join") {
      refuseUnknownOptions(node, field, JOIN_NODE_KEYS, CONFIG_OPTION_ERRORS, "field");
      const dependsOn = checkDependencies(node.dependsOn, `${field} dependsOn`, ids, node.id as string);
      if (dependsOn.length === 0) throw configError(`${field} is a join and must depend on at least one step`);
      return Object.freeze({ kind: "join" as const, id: node.id as string, dependsOn });
    }
    if (node.kind !== "tool") throw configError(`${field} kind must be 'tool' or 'join'`);
    refuseUnknownOptions(node, field, TOOL_NODE_KEYS, CONFIG_OPTION_ERRORS, "field");
    if (!isTool(node.tool)) throw configError(`${field} tool must be made by defineTool`);
    if (node.approval !== undefined && typeof node.approval !== "boolean") {
      throw configError(`${field} approval must be a boolean`);
    }
    const dependsOn = checkDependencies(node.dependsOn, `${field} dependsOn`, ids, node.id as string);
    const binding = checkBinding(node.input, `${field} input`, ids);
    if (binding.kind === "step" && !dependsOn.includes(binding.stepId)) {
      throw configError(`${field} reads step '${binding.stepId}', which it must list in dependsOn`);
    }
    return Object.freeze({
      kind: "tool" as const,
      id: node.id as string,
      tool: node.tool,
      input: binding,
      dependsOn,
      approval: node.approval ?? false,
    });
  });
  // Depth-first search for a cycle: a step on the current path met again.
  const byId = new Map(nodes.map((node) => [node.id, node]));
  const state = new Map<string, "open" | "done">();
  const visit = (nodeId: string): void => {
    const mark = state.get(nodeId);
    if (mark === "done") return;
    if (mark === "open") throw configError(`the workflow's dependencies form a cycle through '${nodeId}'`);
    state.set(nodeId, "open");
    for (const dependency of byId.get(nodeId)?.dependsOn ?? []) visit(dependency);
    state.set(nodeId, "done");
  };
  for (const nodeId of ids) visit(nodeId);
  const result = checkBinding(options.result, "workflow result", ids);
  const digest = jsonDigest(
    {
      kind: "airlock.workflow/1",
      id,
      version,
      input: schemaDescription(input, "input"),
      output: schemaDescription(output, "output"),
      nodes: nodes.map((node) =>
        node.kind === "join"
          ? { kind: node.kind, id: node.id, dependsOn: node.dependsOn }
          : {
              kind: node.kind,
              id: node.id,
              dependsOn: node.dependsOn,
              approval: node.approval,
              input: node.input,
              tool: { id: node.tool.id, version: node.tool.version, digest: node.tool.digest },
            },
      ),
      result,
    },
    { maxBytes: MAX_JSON_BYTES },
  );
  const definition: WorkflowDefinition<I, O> = Object.freeze({
    kind: "airlock.workflow" as const,
    id,
    version,
    digest,
    input,
    output,
    nodes: Object.freeze(nodes),
    result,
  });
  workflows.add(definition);
  return definition;
}

/** Reads a binding from a run's admitted input and step outputs; a path that does not resolve is INVALID_INPUT. */
export function resolveBinding(
  binding: Binding,
  input: JsonValue,
  outputs: Readonly<Record<string, JsonValue>>,
): JsonValue {
  if (binding.kind === "literal") return binding.value;
  let value: JsonValue | undefined = binding.kind === "input" ? input : outputs[binding.stepId];
  for (const key of binding.path) {
    if (value === null || typeof value !== "object" || !Object.hasOwn(value, key)) {
      throw new AirlockError("INVALID_INPUT", "a binding's path does not resolve in the run's data");
    }
    value = (value as unknown as Record<string, JsonValue>)[key];
  }
  if (value === undefined)
    throw new AirlockError("INVALID_INPUT", "a binding's path does not resolve in the run's data");
  return value;
}
