/**
 * `airlock-codemode/code-mode-workflows`: programs as phases of a durable workflow. Each phase is a workflow step
 * that a person approves by digest before it runs (the digest binds the program's own digest, so what was approved
 * is exactly what runs), and each execution leaves an immutable audit record of the calls it made: their receipts,
 * never their data, and never the program's own error text.
 *
 * A phase is a tool: id `code.<first 32 hex of the program digest>`, version the digest, the strongest effect of the
 * program's tools (none < read < write < host; a program without tools has none), a cost of its dearest tool times
 * `maxToolCalls` (reserved up front; the run is charged what the program's calls cost), and the capabilities
 * `code:execute`, `code:audit:v2`, `code:audit-scope:<scope hash>` and `code:program:<digest>`, which the runtime must
 * be granted with `tool:<phase tool id>`.
 */
import type { z } from "zod";
import { CALL_SETTLE_GRACE_MS } from "../code-mode/calls.ts";
import { isCodeMode } from "../code-mode/evidence.ts";
import type { CodeMode } from "../code-mode/executor.ts";
import { ADAPTER_STOP_GRACE_MS } from "../code-mode/executor.ts";
import { type AnyCodeProgram, isCodeProgram } from "../code-mode/program.ts";
import { domainDigest, type JsonObject, tryCopyJson } from "../json/index.ts";
import { type AnyTool, defineTool, MAX_TOOL_TIMEOUT_MS, type ToolEffect } from "../tools/define.ts";
import { AirlockError, configError } from "../tools/errors.ts";
import { reportCallCost } from "../tools/invoke.ts";
import { type Binding, defineWorkflow, isStepId, type WorkflowDefinition } from "./definition.ts";
import type { NewRecord, StoredRecord } from "./records.ts";
import { type ExecutionReceipt, RECEIPT_EXECUTIONS } from "./run-state.ts";

/** Calls a durable phase may make: each is one receipt of its audit record. */
export const MAX_PHASE_TOOL_CALLS = 64;
/** Phases of one durable workflow. */
export const MAX_PHASES = 128;
/** Bytes of one audit record. */
export const MAX_AUDIT_RECORD_BYTES = 64 * 1024;

export const AUDIT_KIND = "code-audit";
const AUDIT_DEFINITION = domainDigest("airlock:code-audit:v2", { format: 2 });
const OUTCOMES = ["succeeded", "failed", "blocked", "cancelled", "outcome_unknown"] as const;

export interface DurableCodeAuditEntry {
  readonly format: 2;
  readonly runId: string;
  readonly phaseId: string;
  /** `<runId>/step:<phaseId>:sandbox` */
  readonly executionId: string;
  readonly programDigest: string;
  readonly outcome: (typeof OUTCOMES)[number];
  readonly evidence: readonly { readonly runId: string; readonly receipt: ExecutionReceipt }[];
  readonly usage: {
    readonly toolCalls: number;
    readonly unknownCalls: number;
    readonly knownCostMicros: number;
    readonly unknownCostMicros: number;
    readonly maximumCostMicros: number;
  };
}

export interface DurableCodeAudit {
  /** The record of a phase's execution, or `undefined` (never ran, or another scope's). */
  inspect(runId: string, phaseId: string): Promise<DurableCodeAuditEntry | undefined>;
}

/** What an audit needs of a store: immutable records. Every workflow store has these. */
export interface AuditRecordStore {
  create(record: NewRecord): Promise<{ record: StoredRecord; created: boolean }>;
  read(scope: string, id: string): Promise<StoredRecord | undefined>;
}

export interface DurableCodeAuditOptions {
  store: AuditRecordStore;
  scope: { readonly principalId: string; readonly projectId: string };
}

export interface DurableCodePhase {
  id: string;
  program: AnyCodeProgram;
  input: Binding;
  dependsOn?: readonly string[];
}

export interface DurableCodeWorkflowOptions<I extends z.ZodType, O extends z.ZodType> {
  id: string;
  version: string;
  input: I;
  output: O;
  codeMode: CodeMode;
  audit: DurableCodeAudit;
  phases: readonly DurableCodePhase[];
  result: Binding;
}

const EFFECT_RANK: Record<ToolEffect, number> = { none: 0, read: 1, write: 2, host: 3 };
const audits = new WeakMap<object, { store: AuditRecordStore; scopeHash: string }>();

/** Own enumerable data properties only, exactly `fields` (`optional` may be absent): definitions are plain data. */
function plainData(value: unknown, what: string, fields: readonly string[], optional: readonly string[] = []) {
  if (typeof value !== "object" || value === null || Object.getPrototypeOf(value) !== Object.prototype) {
    throw configError(`${what} must be a plain object`);
  }
  const descriptors = Object.getOwnPropertyDescriptors(value);
  const result: Record<string, unknown> = {};
  for (const key of Reflect.ownKeys(descriptors)) {
    const descriptor = descriptors[key as string];
    if (typeof key !== "string" || !fields.includes(key)) {
      throw configError(`${what} has no field ${String(key)} (it takes ${fields.join(", ")})`);
    }
    if (descriptor === undefined || !("value" in descriptor) || !descriptor.enumerable) {
      throw configError(`${what}.${key} must be a plain data property, not a getter`);
    }
    result[key] = descriptor.value;
  }
  for (const key of fields) {
    if (!optional.includes(key) && result[key] === undefined) throw configError(`${what} needs ${key}`);
  }
  return result;
}

const corrupt = () => new AirlockError("STORAGE_UNAVAILABLE", "a stored code audit record does not check out");

const isCount = (value: unknown): value is number =>
  typeof value === "number" && Number.isSafeInteger(value) && value >= 0;

/** Checks an audit entry (as written, or as read back) against the run and phase it must belong to. */
function checkEntry(value: unknown, expected: { runId: string; phaseId: string }): DurableCodeAuditEntry {
  const copied = tryCopyJson(value, { maxBytes: MAX_AUDIT_RECORD_BYTES }, { freeze: true });
  if (!copied.ok) throw corrupt();
  const entry = copied.json.value as Record<string, unknown>;
  const executionId = `${expected.runId}/step:${expected.phaseId}:sandbox`;
  if (
    typeof entry !== "object" ||
    entry === null ||
    Array.isArray(entry) ||
    Object.keys(entry).length !== 8 ||
    entry.format !== 2 ||
    entry.runId !== expected.runId ||
    entry.phaseId !== expected.phaseId ||
    entry.executionId !== executionId ||
    typeof entry.programDigest !== "string" ||
    !/^sha256:[a-f0-9]{64}$/.test(entry.programDigest) ||
    !OUTCOMES.includes(entry.outcome as (typeof OUTCOMES)[number]) ||
    !Array.isArray(entry.evidence) ||
    entry.evidence.length > MAX_PHASE_TOOL_CALLS
  ) {
    throw corrupt();
  }
  const usage = entry.usage as Record<string, unknown> | null;
  if (
    typeof usage !== "object" ||
    usage === null ||
    Object.keys(usage).length !== 5 ||
    !isCount(usage.toolCalls) ||
    !isCount(usage.unknownCalls) ||
    !isCount(usage.knownCostMicros) ||
    !isCount(usage.unknownCostMicros) ||
    !isCount(usage.maximumCostMicros) ||
    usage.toolCalls > MAX_PHASE_TOOL_CALLS ||
    usage.unknownCalls > usage.toolCalls ||
    usage.knownCostMicros + usage.unknownCostMicros > usage.maximumCostMicros ||
    entry.evidence.length !== usage.toolCalls ||
    (usage.unknownCalls > 0 && entry.outcome !== "outcome_unknown")
  ) {
    throw corrupt();
  }
  const calls = new Set<string>();
  let unknownReceipts = 0;
  for (const item of entry.evidence as unknown[]) {
    const record = item as { runId?: unknown; receipt?: Record<string, unknown> } | null;
    const receipt = record?.receipt;
    if (
      typeof record !== "object" ||
      record === null ||
      Object.keys(record).length !== 2 ||
      record.runId !== expected.runId ||
      typeof receipt !== "object" ||
      receipt === null ||
      Object.keys(receipt).length !== 4 ||
      typeof receipt.callId !== "string" ||
      !receipt.callId.startsWith(`${executionId}:`) ||
      calls.has(receipt.callId) ||
      typeof receipt.toolId !== "string" ||
      !RECEIPT_EXECUTIONS.includes(receipt.execution as ExecutionReceipt["execution"]) ||
      (receipt.disclosure !== "released" && receipt.disclosure !== "withheld")
    ) {
      throw corrupt();
    }
    calls.add(receipt.callId);
    if (receipt.execution === "unknown") unknownReceipts++;
  }
  if (unknownReceipts > usage.unknownCalls) throw corrupt();
  return entry as unknown as DurableCodeAuditEntry;
}

function auditId(scopeHash: string, runId: string, phaseId: string): string {
  return domainDigest("airlock:code-audit-id:v1", { scope: scopeHash, runId, phaseId });
}

function checkIdentity(record: StoredRecord, scopeHash: string, id: string): void {
  if (
    record.scope !== scopeHash ||
    record.id !== id ||
    record.kind !== AUDIT_KIND ||
    record.idempotencyKey !== id ||
    record.definitionHash !== AUDIT_DEFINITION ||
    !Number.isSafeInteger(record.version) ||
    record.version < 1
  ) {
    throw new AirlockError("STORAGE_UNAVAILABLE", "a stored code audit record has another identity than asked for");
  }
}

/** An immutable ledger of durable phases' executions, on a store, for one scope. */
export function createDurableCodeAudit(options: DurableCodeAuditOptions): DurableCodeAudit {
  const { store, scope } = plainData(options, "createDurableCodeAudit options", ["store", "scope"]) as {
    store: AuditRecordStore;
    scope: unknown;
  };
  if (typeof store?.create !== "function" || typeof store?.read !== "function") {
    throw configError("createDurableCodeAudit needs a store with create and read (a workflow store)");
  }
  const fields = plainData(scope, "the audit scope", ["principalId", "projectId"]);
  for (const key of ["principalId", "projectId"]) {
    const text = fields[key];
    if (typeof text !== "string" || text.trim().length === 0 || text.length > 256) {
      throw configError(`the audit scope's ${key} must be a non-empty string of at most 256 characters`);
    }
  }
  const scopeHash = domainDigest("airlock:scope:v1", { principalId: fields.principalId, projectId: fields.projectId });
  const audit: DurableCodeAudit = Object.freeze({
    async inspect(runId: string, phaseId: string) {
      if (typeof runId !== "string" || !/^[a-f0-9]{64}$/.test(runId)) {
        throw new AirlockError("INVALID_INPUT", "a run id is 64 hex digits");
      }
      if (!isStepId(phaseId)) throw new AirlockError("INVALID_INPUT", "a phase id is a step id");
      const id = auditId(scopeHash, runId, phaseId);
      const record = await store.read(scopeHash, id);
      if (record === undefined) return undefined;
      checkIdentity(record, scopeHash, id);
      return checkEntry(record.state, { runId, phaseId });
    },
  });
  audits.set(audit, { store, scopeHash });
  return audit;
}

async function recordAudit(
  registration: { store: AuditRecordStore; scopeHash: string },
  entry: DurableCodeAuditEntry,
): Promise<void> {
  const checked = checkEntry(entry, entry);
  const id = auditId(registration.scopeHash, entry.runId, entry.phaseId);
  const { record, created } = await registration.store.create({
    scope: registration.scopeHash,
    id,
    kind: AUDIT_KIND,
    idempotencyKey: id,
    definitionHash: AUDIT_DEFINITION,
    state: checked as unknown as JsonObject,
    events: [
      {
        type: "code.phase.evidence",
        data: {
          phaseId: entry.phaseId,
          programDigest: entry.programDigest,
          outcome: entry.outcome,
          receipts: entry.evidence.length,
          toolCalls: entry.usage.toolCalls,
          unknownCalls: entry.usage.unknownCalls,
        },
      },
    ],
  });
  checkIdentity(record, registration.scopeHash, id);
  // A phase runs once; an existing record means storage or the runtime broke that promise.
  if (!created) throw new AirlockError("INTEGRITY_VIOLATION", "a durable phase already has an audit record");
}

function phaseTool(mode: CodeMode, audit: DurableCodeAudit, phaseId: string, program: AnyCodeProgram): AnyTool {
  if (!isCodeProgram(program)) throw configError(`phase '${phaseId}' program must be made by defineCodeProgram`);
  const registration = audits.get(audit);
  if (registration === undefined) throw configError("use an audit made by createDurableCodeAudit");
  if (program.tools.some((tool) => tool.approval !== "never")) {
    throw configError(`phase '${phaseId}' is approved as a whole: its program's tools may not ask for approval again`);
  }
  if (program.limits.maxToolCalls > MAX_PHASE_TOOL_CALLS) {
    throw new AirlockError(
      "LIMIT_EXCEEDED",
      `a durable phase may make at most ${MAX_PHASE_TOOL_CALLS} tool calls (maxToolCalls), one receipt each`,
    );
  }
  const dearest = program.tools.reduce((max, tool) => Math.max(max, tool.costMicros), 0);
  const costMicros = dearest * program.limits.maxToolCalls;
  if (!Number.isSafeInteger(costMicros)) {
    throw new AirlockError("LIMIT_EXCEEDED", "the phase's maximum cost is past what can be counted exactly");
  }
  const effects = program.tools.reduce<ToolEffect>(
    (strongest, tool) => (EFFECT_RANK[tool.effects] > EFFECT_RANK[strongest] ? tool.effects : strongest),
    "none",
  );
  const hex = program.digest.slice("sha256:".length);
  return defineTool({
    id: `code.${hex.slice(0, 32)}`,
    version: program.digest,
    description: `Approved code-mode phase: ${program.id}`,
    input: program.input,
    output: program.output,
    effects,
    capabilities: [
      "code:execute",
      "code:audit:v2",
      `code:audit-scope:${registration.scopeHash}`,
      `code:program:${program.digest}`,
    ],
    costMicros,
    // The program's own wall time bounds it; the executor's graces come on top, so the phase is never cut first.
    timeoutMillis: Math.min(
      program.limits.wallTimeMillis + ADAPTER_STOP_GRACE_MS + CALL_SETTLE_GRACE_MS,
      MAX_TOOL_TIMEOUT_MS,
    ),
    execute: async (input, context) => {
      if (domainDigest("airlock:scope:v1", context.scope) !== registration.scopeHash) {
        throw new AirlockError("PERMISSION_DENIED", "the phase's audit belongs to another scope");
      }
      const executionId = `${context.callId}:sandbox`;
      const outcome = await mode.execute(program, input, {
        runId: context.runId,
        executionId,
        scope: context.scope,
        signal: context.signal,
      });
      // The phase reserved its program's most; it is charged what the program's calls cost, the rest given back.
      reportCallCost(context, {
        spentMicros: outcome.usage.knownCostMicros,
        unknownMicros: outcome.usage.unknownCostMicros,
      });
      await recordAudit(registration, {
        format: 2,
        runId: context.runId,
        phaseId,
        executionId,
        programDigest: program.digest,
        outcome: outcome.status,
        evidence: outcome.evidence,
        usage: { ...outcome.usage },
      });
      if (outcome.status === "succeeded") return outcome.output;
      // The nested error stays in the audit's outcome; nothing of it reaches the workflow.
      throw new AirlockError(outcome.error.code, "the durable phase did not succeed");
    },
  });
}

/** A workflow whose steps are programs, each approved by a person before it runs and audited after. */
export function defineDurableCodeWorkflow<I extends z.ZodType, O extends z.ZodType>(
  options: DurableCodeWorkflowOptions<I, O>,
): WorkflowDefinition<I, O> {
  const fields = plainData(options, "defineDurableCodeWorkflow options", [
    "id",
    "version",
    "input",
    "output",
    "codeMode",
    "audit",
    "phases",
    "result",
  ]);
  const mode = fields.codeMode as CodeMode;
  if (!isCodeMode(mode)) throw configError("codeMode must be made by createCodeMode");
  const audit = fields.audit as DurableCodeAudit;
  if (!audits.has(audit)) throw configError("audit must be made by createDurableCodeAudit");
  const phases = fields.phases;
  if (!Array.isArray(phases) || phases.length < 1 || phases.length > MAX_PHASES) {
    throw configError(`a durable code workflow needs 1-${MAX_PHASES} phases`);
  }
  const nodes = phases.map((item, index) => {
    const phase = plainData(item, `phase ${index}`, ["id", "program", "input", "dependsOn"], ["dependsOn"]);
    if (!isStepId(phase.id)) throw configError(`phase ${index} id must be a step id`);
    return {
      kind: "tool" as const,
      id: phase.id,
      tool: phaseTool(mode, audit, phase.id, phase.program as AnyCodeProgram),
      input: phase.input as Binding,
      ...(phase.dependsOn === undefined ? {} : { dependsOn: phase.dependsOn as readonly string[] }),
      approval: true,
    };
  });
  return defineWorkflow({
    id: fields.id as string,
    version: fields.version as string,
    input: fields.input as I,
    output: fields.output as O,
    nodes,
    result: fields.result as Binding,
  });
}
