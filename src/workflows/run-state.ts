/**
 * A workflow run as stored: its steps, their jobs (leases with fences) and the run's budget, all in one record so that
 * one row lock orders every change to a run. This file holds the shapes, the check a record read back must pass
 * (anything else is STORAGE_UNAVAILABLE, never trusted), and the public snapshot.
 */

import type { ExecutionReceipt, ReceiptExecution } from "../code-mode/evidence.ts";
import { deepFreezeJson, type JsonObject, type JsonValue } from "../json/index.ts";
import type { Scope } from "../tools/define.ts";
import { storageError } from "./records.ts";

export type { ExecutionReceipt, ReceiptDisclosure, ReceiptExecution } from "../code-mode/evidence.ts";

export const RUN_KIND = "workflow-run";

export type RunStatus =
  | "running"
  | "waiting"
  | "paused"
  | "succeeded"
  | "failed"
  | "blocked"
  | "cancelled"
  | "outcome_unknown";
export const RUN_STATUSES: readonly RunStatus[] = [
  "running",
  "waiting",
  "paused",
  "succeeded",
  "failed",
  "blocked",
  "cancelled",
  "outcome_unknown",
];
export const TERMINAL_RUN_STATUSES: ReadonlySet<string> = new Set([
  "succeeded",
  "failed",
  "blocked",
  "cancelled",
  "outcome_unknown",
]);

export type StepStatus =
  | "pending"
  | "waiting"
  | "approved"
  | "dispatching"
  | "succeeded"
  | "failed"
  | "blocked"
  | "unknown"
  | "skipped";
export const STEP_STATUSES: readonly StepStatus[] = [
  "pending",
  "waiting",
  "approved",
  "dispatching",
  "succeeded",
  "failed",
  "blocked",
  "unknown",
  "skipped",
];
/** Steps that have not been handed to a job yet. */
export const OPEN_STEP_STATUSES: ReadonlySet<string> = new Set(["pending", "waiting", "approved"]);
/** Steps whose dependants can never run. */
export const DEAD_STEP_STATUSES: ReadonlySet<string> = new Set(["failed", "blocked", "unknown", "skipped"]);

/**
 * `queued`: prepared, its cost reserved, no worker yet. `leased`: a worker holds it until `leaseUntil`, and may start
 * it. `started`: persisted as dispatched; from here it is never run again. `done`: settled by its worker.
 * `released`: never started and given up (its reservation returned). `outcome_unknown`: started, and its worker lost
 * it (lease expired, run cancelled) before it settled.
 */
export type JobState = "queued" | "leased" | "started" | "done" | "released" | "outcome_unknown";
const JOB_STATES: readonly JobState[] = ["queued", "leased", "started", "done", "released", "outcome_unknown"];

export const RECEIPT_EXECUTIONS: readonly ReceiptExecution[] = ["not_started", "succeeded", "failed", "unknown"];

export interface Approval {
  /** 64 hex: SHA-256 over the run, the step, the tool and its version, the exact input, the policy and the expiry. */
  readonly digest: string;
  readonly expiresAt: number;
  /** The verified person who approved, once one did; only their id is stored. */
  readonly humanId: string | null;
}

export interface Job {
  readonly state: JobState;
  /** Raised by every claim: a worker holding an older fence has lost the job. */
  readonly fence: number;
  readonly workerId: string | null;
  readonly leaseUntil: number | null;
  readonly startedAt: number | null;
  readonly cancelRequested: boolean;
}

export interface StoredStep {
  readonly kind: "tool" | "join";
  readonly status: StepStatus;
  readonly callId: string | null;
  /** The admitted input: the one approved, the one started. */
  readonly input: JsonValue;
  readonly output: JsonValue;
  readonly receipt: ExecutionReceipt | null;
  readonly approval: Approval | null;
  /** Cost this step holds on the run's budget now: its reservation, or the part of it whose outcome is unknown. */
  readonly costReserved: number;
  /** Cost this step spent. */
  readonly costSpent: number;
  readonly job: Job | null;
}

/** What the store needs to know of a node to move its step: the definition itself never reaches storage. */
export interface ManifestNode {
  readonly id: string;
  readonly kind: "tool" | "join";
  readonly dependsOn: readonly string[];
  readonly toolId: string | null;
  readonly toolVersion: string | null;
  readonly costMicros: number;
  readonly approval: boolean;
}

export interface RunState {
  readonly format: 1;
  readonly kind: typeof RUN_KIND;
  /** Hex digest of the policy (scope, grants, version, limits) the run was submitted under. */
  readonly policy: string;
  readonly scope: Scope;
  readonly workflow: { readonly id: string; readonly version: string; readonly digest: string };
  readonly nodes: readonly ManifestNode[];
  readonly input: JsonValue;
  readonly status: RunStatus;
  /** The status a paused run goes back to. */
  readonly pausedFrom: RunStatus | null;
  readonly steps: Readonly<Record<string, StoredStep>>;
  readonly output: JsonValue;
  readonly spentMicros: number;
  readonly reservedMicros: number;
  readonly maxCostMicros: number;
  readonly approvalTtlMs: number;
}

export interface StepSnapshot {
  readonly kind: "tool" | "join";
  readonly status: StepStatus;
  readonly callId: string | null;
  readonly output: JsonValue;
  readonly receipt: ExecutionReceipt | null;
  readonly approval: Approval | null;
  readonly costReserved: number;
}

export interface WorkflowSnapshot {
  readonly id: string;
  readonly version: number;
  readonly status: RunStatus;
  readonly steps: Readonly<Record<string, StepSnapshot>>;
  readonly output: JsonValue;
  readonly budget: { readonly spentMicros: number; readonly reservedMicros: number; readonly maxCostMicros: number };
}

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value);
const isCount = (value: unknown): value is number =>
  typeof value === "number" && Number.isSafeInteger(value) && value >= 0;
const isTime = (value: unknown): value is number => typeof value === "number" && Number.isFinite(value) && value >= 0;

function checkReceipt(value: unknown): boolean {
  if (value === null) return true;
  if (!isObject(value)) return false;
  return (
    typeof value.callId === "string" &&
    typeof value.toolId === "string" &&
    RECEIPT_EXECUTIONS.includes(value.execution as ReceiptExecution) &&
    (value.disclosure === "released" || value.disclosure === "withheld")
  );
}

function checkJob(value: unknown): boolean {
  if (value === null) return true;
  if (!isObject(value)) return false;
  return (
    JOB_STATES.includes(value.state as JobState) &&
    isCount(value.fence) &&
    (value.workerId === null || typeof value.workerId === "string") &&
    (value.leaseUntil === null || isTime(value.leaseUntil)) &&
    (value.startedAt === null || isTime(value.startedAt)) &&
    typeof value.cancelRequested === "boolean"
  );
}

/**
 * The state of a run record, checked: its shape, and the invariants every command keeps (the budget is the sum of its
 * steps, no step holds or spends beyond its tool's cost, only a started job has a receipt of an effect). A record that
 * fails was not written by these commands, or was changed behind their back.
 */
export function runStateOf(state: JsonObject): RunState {
  const value = state as Record<string, unknown>;
  const fail = () => storageError("a stored workflow run does not check out; it was not written by this runtime");
  if (
    value.format !== 1 ||
    value.kind !== RUN_KIND ||
    typeof value.policy !== "string" ||
    !isObject(value.scope) ||
    !isObject(value.workflow) ||
    !Array.isArray(value.nodes) ||
    !RUN_STATUSES.includes(value.status as RunStatus) ||
    !(value.pausedFrom === null || RUN_STATUSES.includes(value.pausedFrom as RunStatus)) ||
    !isObject(value.steps) ||
    !isCount(value.spentMicros) ||
    !isCount(value.reservedMicros) ||
    !isCount(value.maxCostMicros) ||
    !isCount(value.approvalTtlMs) ||
    !("input" in value) ||
    !("output" in value)
  ) {
    throw fail();
  }
  const steps = value.steps as Record<string, unknown>;
  let reserved = 0;
  let spent = 0;
  const nodes = value.nodes as unknown[];
  if (Object.keys(steps).length !== nodes.length) throw fail();
  for (const node of nodes) {
    if (!isObject(node) || typeof node.id !== "string" || !isCount(node.costMicros) || !Array.isArray(node.dependsOn))
      throw fail();
    const step = steps[node.id];
    if (!isObject(step) || step.kind !== node.kind || !STEP_STATUSES.includes(step.status as StepStatus)) throw fail();
    if (!isCount(step.costReserved) || !isCount(step.costSpent) || !checkReceipt(step.receipt) || !checkJob(step.job))
      throw fail();
    if (step.costReserved + step.costSpent > (node.costMicros as number)) throw fail();
    const job = step.job as Job | null;
    const receipt = step.receipt as ExecutionReceipt | null;
    // An effect is only ever recorded for a job that was persisted as started.
    if (receipt !== null && receipt.execution !== "not_started" && (job === null || job.startedAt === null))
      throw fail();
    if (step.status === "succeeded" && node.kind === "tool" && (receipt === null || receipt.execution !== "succeeded"))
      throw fail();
    if (step.status === "dispatching" && job === null) throw fail();
    if (step.approval !== null) {
      const approval = step.approval as Record<string, unknown>;
      if (
        !isObject(approval) ||
        typeof approval.digest !== "string" ||
        !/^[a-f0-9]{64}$/.test(approval.digest) ||
        !isTime(approval.expiresAt) ||
        !(approval.humanId === null || typeof approval.humanId === "string")
      )
        throw fail();
    }
    reserved += step.costReserved;
    spent += step.costSpent;
  }
  if (reserved !== value.reservedMicros || spent !== value.spentMicros) throw fail();
  if (spent + reserved > (value.maxCostMicros as number)) throw fail();
  if (
    value.status === "succeeded" &&
    nodes.some((node) => (steps[(node as ManifestNode).id] as StoredStep).status !== "succeeded")
  )
    throw fail();
  return state as unknown as RunState;
}

/** The public, deep-frozen view of a run. */
export function snapshotOf(id: string, version: number, run: RunState): WorkflowSnapshot {
  const steps: Record<string, StepSnapshot> = {};
  for (const node of run.nodes) {
    const step = run.steps[node.id] as StoredStep;
    steps[node.id] = {
      kind: step.kind,
      status: step.status,
      callId: step.callId,
      output: structuredClone(step.output),
      receipt: step.receipt === null ? null : { ...step.receipt },
      approval: step.approval === null ? null : { ...step.approval },
      costReserved: step.costReserved,
    };
  }
  return deepFreezeJson({
    id,
    version,
    status: run.status,
    steps,
    output: structuredClone(run.output),
    budget: { spentMicros: run.spentMicros, reservedMicros: run.reservedMicros, maxCostMicros: run.maxCostMicros },
  } as unknown as JsonObject) as unknown as WorkflowSnapshot;
}
