/**
 * The public store object, the same for SQLite and PostgreSQL: the record API (create, read, mutate, events, list)
 * that audits and call journals use, and `store.workflows`, the commands that move a workflow run. Each command is
 * one transaction on the run's record (see records.ts); its rules are here, once, for both stores.
 *
 * A step's life: pending -> (approval: waiting -> approved) -> dispatching (a job: queued -> leased -> started) ->
 * succeeded | failed | blocked | unknown. A job is `started` in storage before its tool is dispatched, so a worker
 * that dies after that point leaves `outcome_unknown`, never a second dispatch.
 */
import { canonicalJson, domainDigest, type JsonObject, type JsonValue, MAX_JSON_BYTES } from "../json/index.ts";
import { AirlockError, type ErrorCode } from "../tools/errors.ts";
import {
  MAX_EVENTS_PER_READ,
  type Mutation,
  type NewEvent,
  type NewRecord,
  type RecordEngine,
  type RecordListQuery,
  type StoredEvent,
  type StoredRecord,
} from "./records.ts";
import {
  DEAD_STEP_STATUSES,
  type ExecutionReceipt,
  type Job,
  type ManifestNode,
  OPEN_STEP_STATUSES,
  RUN_KIND,
  type RunState,
  type RunStatus,
  runStateOf,
  type StoredStep,
  TERMINAL_RUN_STATUSES,
} from "./run-state.ts";

/** Why a store command refused: the runtime acts on these, callers see CONFLICT. */
export type ConflictReason = "review_expired" | "stale_claim" | "conflict";

export class WorkflowConflict extends AirlockError {
  constructor(
    readonly reason: ConflictReason,
    message: string,
  ) {
    super("CONFLICT", message);
  }
}

export function isConflict(error: unknown, reason?: ConflictReason): error is WorkflowConflict {
  return error instanceof WorkflowConflict && (reason === undefined || error.reason === reason);
}

/** Every workflow command names its run and the policy it acts under. */
export interface RunAccess {
  readonly scope: string;
  readonly id: string;
  readonly policy: string;
}

export interface Claim {
  readonly nodeId: string;
  readonly fence: number;
  readonly workerId: string;
  readonly leaseUntil: number;
}

export interface Settlement {
  readonly knownCostMicros: number;
  readonly unknownCostMicros: number;
}

/** Who settled an unknown effect after the fact (see the runtime's `reconcile`). */
export interface ReconciliationSource {
  readonly kind: "external_reconciliation";
  readonly authorityId: string;
  readonly attestationHash: string;
}

export type StepOutcome = "succeeded" | "failed" | "blocked";

export interface WorkflowCommands {
  initialize(): Promise<void>;
  submit(command: {
    scope: string;
    id: string;
    idempotencyKey: string;
    definitionHash: string;
    state: RunState;
  }): Promise<{ record: StoredRecord; created: boolean }>;
  inspect(access: RunAccess): Promise<StoredRecord>;
  requestApproval(command: RunAccess & { nodeId: string; input: JsonValue }): Promise<StoredRecord>;
  approve(command: RunAccess & { nodeId: string; digest: string; humanId: string }): Promise<StoredRecord>;
  /** A person refused the step: it ends blocked without running. */
  reject(command: RunAccess & { nodeId: string; digest: string; humanId: string }): Promise<StoredRecord>;
  prepare(command: RunAccess & { nodeId: string; input: JsonValue }): Promise<StoredRecord>;
  /**
   * Leases up to `limit` free jobs to `workerId`. It waits for another worker's change of the run (one short
   * transaction) rather than skipping it: a skipped claim would miss a step that change left free.
   */
  claim(command: RunAccess & { workerId: string; limit: number; leaseMs: number }): Promise<Claim[]>;
  renew(command: RunAccess & { claim: Claim; leaseMs: number }): Promise<Claim>;
  /** Persists the job as started; `refused` when the step may not run after all (its approval lapsed). */
  start(
    command: RunAccess & { claim: Claim; input: JsonValue },
  ): Promise<{ status: "started" | "refused"; record: StoredRecord }>;
  recordReceipt(
    command: RunAccess & {
      nodeId: string;
      fence: number;
      receipt: ExecutionReceipt;
      settlement: Settlement;
      source?: ReconciliationSource;
    },
  ): Promise<StoredRecord>;
  complete(command: RunAccess & { claim: Claim; outcome: StepOutcome; output: JsonValue }): Promise<StoredRecord>;
  abandon(command: RunAccess & { claim: Claim; outcome: "failed" | "blocked" }): Promise<StoredRecord>;
  failNode(command: RunAccess & { nodeId: string; outcome: "failed" | "blocked" }): Promise<StoredRecord>;
  advance(access: RunAccess): Promise<StoredRecord>;
  finalize(
    command: RunAccess & ({ validation: "passed"; output: JsonValue } | { validation: "failed" }),
  ): Promise<StoredRecord>;
  cancel(access: RunAccess): Promise<StoredRecord>;
  pause(access: RunAccess): Promise<StoredRecord>;
  resume(access: RunAccess): Promise<StoredRecord>;
  /** Expired leases: a job never started goes back to the queue (its reservation kept); a started one is unknown. */
  recover(access: RunAccess): Promise<StoredRecord>;
}

export interface WorkflowStore {
  readonly kind: "airlock.workflow-store";
  initialize(): Promise<void>;
  close(): Promise<void>;
  create(record: NewRecord): Promise<{ record: StoredRecord; created: boolean }>;
  read(scope: string, id: string): Promise<StoredRecord | undefined>;
  mutate(scope: string, id: string, change: Mutation): Promise<{ record: StoredRecord; changed: boolean } | undefined>;
  events(scope: string, id: string, after?: number): Promise<StoredEvent[]>;
  list(query: RecordListQuery): Promise<StoredRecord[]>;
  readonly workflows: WorkflowCommands;
}

/** The editable copy of a run that a command changes. */
type Writable<T> = { -readonly [K in keyof T]: T[K] };
type DraftStep = Writable<Omit<StoredStep, "job">> & { job: Writable<Job> | null };
type Draft = Writable<Omit<RunState, "steps">> & { steps: Record<string, DraftStep> };

const sameJson = (a: JsonValue, b: JsonValue) =>
  canonicalJson(a, { maxBytes: MAX_JSON_BYTES }) === canonicalJson(b, { maxBytes: MAX_JSON_BYTES });

function nodeOf(run: Draft, nodeId: string): ManifestNode {
  const node = run.nodes.find((item) => item.id === nodeId);
  if (node === undefined) throw new WorkflowConflict("conflict", "the run has no step of that id");
  return node;
}

function stepOf(run: Draft, nodeId: string): DraftStep {
  nodeOf(run, nodeId);
  return run.steps[nodeId] as DraftStep;
}

function ownsLease(job: Job | null, claim: Claim, now: number): job is Job {
  return (
    job !== null &&
    job.fence === claim.fence &&
    job.workerId === claim.workerId &&
    job.leaseUntil !== null &&
    job.leaseUntil > now &&
    !job.cancelRequested
  );
}

function releaseReservation(run: Draft, step: DraftStep): void {
  run.reservedMicros -= step.costReserved;
  step.costReserved = 0;
}

/** Ends a step that never started: nothing happened, and its receipt says so. */
function endUnstarted(
  step: DraftStep,
  node: ManifestNode,
  outcome: "failed" | "blocked",
  events: NewEvent[],
  reason: string,
): void {
  step.status = outcome;
  step.receipt = {
    callId: step.callId ?? "",
    toolId: node.toolId ?? "",
    execution: "not_started",
    disclosure: "withheld",
  };
  events.push({ type: `step.${outcome}`, data: { nodeId: node.id, reason } });
}

const isHalted = (status: RunStatus) => TERMINAL_RUN_STATUSES.has(status) || status === "paused";

/**
 * Brings the run's derived facts up to date: dependants of a dead step are skipped, joins whose inputs all succeeded
 * succeed, and the run's status follows its steps.
 */
function recompute(run: Draft, events: NewEvent[]): void {
  if (isHalted(run.status)) return;
  let changed = true;
  while (changed) {
    changed = false;
    for (const node of run.nodes) {
      const step = run.steps[node.id] as DraftStep;
      if (!OPEN_STEP_STATUSES.has(step.status) || step.job !== null) continue;
      const deps = node.dependsOn.map((dep) => run.steps[dep] as DraftStep);
      if (deps.some((dep) => DEAD_STEP_STATUSES.has(dep.status))) {
        step.status = "skipped";
        events.push({ type: "step.skipped", data: { nodeId: node.id } });
        changed = true;
      } else if (node.kind === "join" && deps.every((dep) => dep.status === "succeeded")) {
        step.status = "succeeded";
        step.output = deps.map((dep) => dep.output);
        events.push({ type: "step.succeeded", data: { nodeId: node.id } });
        changed = true;
      }
    }
  }
  // Work already admitted on other branches still runs: its approvals and reservations were given for it.
  const steps = Object.values(run.steps) as DraftStep[];
  const active = steps.some((step) => step.job !== null && ["queued", "leased", "started"].includes(step.job.state));
  let status: RunStatus = "running";
  if (!active) {
    if (steps.some((step) => step.status === "unknown")) status = "outcome_unknown";
    else if (steps.some((step) => step.status === "failed")) status = "failed";
    else if (steps.some((step) => step.status === "blocked")) status = "blocked";
    else if (steps.some((step) => step.status === "waiting")) status = "waiting";
  }
  if (status !== run.status) {
    run.status = status;
    events.push({ type: "run.status", data: { status } });
  }
}

export function makeWorkflowStore(engine: RecordEngine): WorkflowStore {
  const read = async (access: RunAccess): Promise<StoredRecord> => {
    const record = await engine.read(access.scope, access.id);
    return checkAccess(record, access);
  };

  /** Runs one workflow command as a transaction on its run. `change` edits a draft; returning false changes nothing. */
  const command = async (
    access: RunAccess,
    change: (run: Draft, now: number, events: NewEvent[]) => boolean | undefined,
  ): Promise<StoredRecord> => {
    const result = await engine.mutate(access.scope, access.id, (record, now) => {
      checkAccess(record, access);
      const run = structuredClone(record.state) as unknown as Draft;
      const events: NewEvent[] = [];
      if (change(run, now, events) === false) return null;
      recompute(run, events);
      runStateOf(run as unknown as JsonObject);
      return { state: run as unknown as JsonObject, events };
    });
    if (result === undefined) throw new AirlockError("NOT_FOUND", "no workflow run of that id in this scope");
    return result.record;
  };

  const workflows: WorkflowCommands = {
    initialize: () => engine.initialize(),

    async submit(submission) {
      const state = submission.state as unknown as JsonObject;
      runStateOf(state);
      const result = await engine.create({
        scope: submission.scope,
        id: submission.id,
        kind: RUN_KIND,
        idempotencyKey: submission.idempotencyKey,
        definitionHash: submission.definitionHash,
        state,
        events: [{ type: "run.submitted", data: { workflowId: submission.state.workflow.id } }],
      });
      if (!result.created) {
        const existing = checkAccess(result.record, {
          scope: submission.scope,
          id: submission.id,
          policy: submission.state.policy,
        });
        const run = runStateOf(existing.state);
        if (existing.definitionHash !== submission.definitionHash || !sameJson(run.input, submission.state.input)) {
          throw new WorkflowConflict(
            "conflict",
            "a run with this idempotency key exists with another definition or input",
          );
        }
      }
      return result;
    },

    inspect: read,

    requestApproval: (cmd) =>
      command(cmd, (run, now, events) => {
        const node = nodeOf(run, cmd.nodeId);
        const step = stepOf(run, cmd.nodeId);
        if (!node.approval || !OPEN_STEP_STATUSES.has(step.status) || step.job !== null) return false;
        const live = step.approval !== null && step.approval.expiresAt > now;
        if (live && step.status !== "pending" && sameJson(step.input, cmd.input)) return false;
        const expiresAt = now + run.approvalTtlMs;
        const digest = domainDigest("airlock:approval:v1", {
          runId: cmd.id,
          nodeId: cmd.nodeId,
          tool: node.toolId,
          toolVersion: node.toolVersion,
          input: cmd.input,
          policy: run.policy,
          expiresAt,
        });
        step.status = "waiting";
        step.input = cmd.input;
        step.approval = { digest, expiresAt, humanId: null };
        events.push({ type: "step.approval_requested", data: { nodeId: cmd.nodeId, digest, expiresAt } });
        return true;
      }),

    approve: (cmd) =>
      command(cmd, (run, now, events) => {
        const step = stepOf(run, cmd.nodeId);
        const approval = step.approval;
        if (approval === null || approval.digest !== cmd.digest) {
          throw new WorkflowConflict("conflict", "the digest is not the pending approval of that step");
        }
        if (step.status === "approved" && approval.humanId !== null) return false;
        if (step.status !== "waiting") {
          throw new WorkflowConflict("conflict", "that step is not waiting for an approval");
        }
        if (approval.expiresAt <= now) {
          throw new WorkflowConflict("review_expired", "the approval request expired; the run asks again");
        }
        step.status = "approved";
        step.approval = { ...approval, humanId: cmd.humanId };
        events.push({ type: "step.approved", data: { nodeId: cmd.nodeId, humanId: cmd.humanId } });
        return true;
      }),

    reject: (cmd) =>
      command(cmd, (run, _now, events) => {
        const node = nodeOf(run, cmd.nodeId);
        const step = stepOf(run, cmd.nodeId);
        if (step.status !== "waiting" || step.approval === null || step.approval.digest !== cmd.digest) {
          throw new WorkflowConflict("conflict", "the digest is not the pending approval of that step");
        }
        step.approval = { ...step.approval, humanId: cmd.humanId };
        endUnstarted(step, node, "blocked", events, "rejected");
        return true;
      }),

    prepare: (cmd) =>
      command(cmd, (run, now, events) => {
        if (isHalted(run.status)) return false;
        const node = nodeOf(run, cmd.nodeId);
        const step = stepOf(run, cmd.nodeId);
        if (node.kind !== "tool" || !OPEN_STEP_STATUSES.has(step.status) || step.job !== null) return false;
        if (node.dependsOn.some((dep) => run.steps[dep]?.status !== "succeeded")) return false;
        if (node.approval) {
          if (step.status !== "approved" || step.approval === null) return false;
          if (step.approval.expiresAt <= now) {
            throw new WorkflowConflict("review_expired", "the approval expired before the step was prepared");
          }
        } else {
          step.input = cmd.input;
        }
        if (run.spentMicros + run.reservedMicros + node.costMicros > run.maxCostMicros) {
          endUnstarted(step, node, "blocked", events, "budget");
          return true;
        }
        step.costReserved = node.costMicros;
        run.reservedMicros += node.costMicros;
        step.status = "dispatching";
        step.job = {
          state: "queued",
          fence: 0,
          workerId: null,
          leaseUntil: null,
          startedAt: null,
          cancelRequested: false,
        };
        events.push({ type: "job.prepared", data: { nodeId: cmd.nodeId, costMicros: node.costMicros } });
        return true;
      }),

    async claim(cmd) {
      const claims: Claim[] = [];
      await command(cmd, (run, now, events) => {
        claims.length = 0;
        if (isHalted(run.status)) return false;
        for (const node of run.nodes) {
          if (claims.length >= cmd.limit) break;
          const job = run.steps[node.id]?.job;
          if (job === null || job === undefined) continue;
          const free = job.state === "queued" || (job.state === "leased" && (job.leaseUntil ?? 0) <= now);
          if (!free || job.startedAt !== null) continue;
          job.state = "leased";
          job.fence += 1;
          job.workerId = cmd.workerId;
          job.leaseUntil = now + cmd.leaseMs;
          claims.push({ nodeId: node.id, fence: job.fence, workerId: cmd.workerId, leaseUntil: job.leaseUntil });
          events.push({ type: "job.claimed", data: { nodeId: node.id, fence: job.fence, workerId: cmd.workerId } });
        }
        return claims.length > 0;
      });
      return claims;
    },

    async renew(cmd) {
      let renewed: Claim | undefined;
      await command(cmd, (run, now) => {
        const job = stepOf(run, cmd.claim.nodeId).job;
        if (!ownsLease(job, cmd.claim, now) || (job.state !== "leased" && job.state !== "started")) {
          throw new WorkflowConflict("stale_claim", "the lease was lost");
        }
        job.leaseUntil = now + cmd.leaseMs;
        renewed = { ...cmd.claim, leaseUntil: job.leaseUntil };
        return true;
      });
      return renewed as Claim;
    },

    async start(cmd) {
      let status: "started" | "refused" = "refused";
      const record = await command(cmd, (run, now, events) => {
        const node = nodeOf(run, cmd.claim.nodeId);
        const step = stepOf(run, cmd.claim.nodeId);
        const job = step.job;
        if (isHalted(run.status) || !ownsLease(job, cmd.claim, now) || job.state !== "leased") {
          throw new WorkflowConflict("stale_claim", "the claim does not grant a fresh dispatch");
        }
        if (!sameJson(step.input, cmd.input)) {
          throw new WorkflowConflict("conflict", "the input differs from the step's admitted input");
        }
        if (node.approval && (step.approval === null || step.approval.expiresAt <= now)) {
          job.state = "released";
          releaseReservation(run, step);
          endUnstarted(step, node, "blocked", events, "approval_expired");
          return true;
        }
        job.state = "started";
        job.startedAt = now;
        status = "started";
        events.push({ type: "job.started", data: { nodeId: node.id, fence: job.fence } });
        return true;
      });
      return { status, record };
    },

    recordReceipt: (cmd) =>
      command(cmd, (run, now, events) => {
        const node = nodeOf(run, cmd.nodeId);
        const step = stepOf(run, cmd.nodeId);
        const job = step.job;
        if (job === null || job.fence !== cmd.fence || job.startedAt === null) {
          throw new WorkflowConflict("stale_claim", "no started job of that fence to record a receipt for");
        }
        const { knownCostMicros: known, unknownCostMicros: unknown } = cmd.settlement;
        const settled = step.receipt !== null && step.receipt.execution !== "unknown" && step.costReserved === 0;
        if (cmd.source !== undefined) {
          if (job.state !== "outcome_unknown") {
            throw new WorkflowConflict("conflict", "only a job whose outcome is unknown can be reconciled");
          }
          if (settled) {
            // Settled already: a repeat changes nothing, a contradiction is kept as evidence only.
            if (step.receipt?.execution === cmd.receipt.execution) return false;
            events.push({
              type: "effect.reconciliation_conflict",
              data: { nodeId: node.id, execution: cmd.receipt.execution, authorityId: cmd.source.authorityId },
            });
            return true;
          }
          // The attested cost is the call's in all: what its receipt charged already (a code phase's calls that
          // ran) counts toward it and is never given back.
          const charge = Math.max(0, known - step.costSpent);
          run.reservedMicros -= step.costReserved;
          step.costReserved = 0;
          step.costSpent += charge;
          run.spentMicros += charge;
          step.receipt = { ...cmd.receipt, disclosure: "withheld" };
          events.push({
            type: "effect.reconciled",
            data: { nodeId: node.id, execution: cmd.receipt.execution, knownCostMicros: known, ...cmd.source },
          });
          return true;
        }
        if (
          settled ||
          (step.receipt !== null && step.receipt.execution === "unknown" && cmd.receipt.execution === "unknown")
        )
          return false;
        if (job.state !== "started" && job.state !== "outcome_unknown") {
          throw new WorkflowConflict("stale_claim", "the job has settled already");
        }
        if (known + unknown > step.costReserved) {
          throw new WorkflowConflict("conflict", "the settlement is more than the step reserved");
        }
        run.reservedMicros -= step.costReserved - unknown;
        step.costReserved = unknown;
        step.costSpent += known;
        run.spentMicros += known;
        step.receipt = { ...cmd.receipt, disclosure: "withheld" };
        events.push({
          type: "effect.receipt",
          data: {
            nodeId: node.id,
            fence: job.fence,
            execution: cmd.receipt.execution,
            knownCostMicros: known,
            unknownCostMicros: unknown,
          },
        });
        const lost = job.state === "started" && (job.leaseUntil ?? 0) <= now;
        if (cmd.receipt.execution === "unknown" || unknown > 0 || lost) {
          if (job.state === "started") {
            job.state = "outcome_unknown";
            events.push({ type: "job.lost", data: { nodeId: node.id, fence: job.fence } });
          }
          if (step.status === "dispatching") step.status = "unknown";
        }
        return true;
      }),

    complete: (cmd) =>
      command(cmd, (run, now, events) => {
        const step = stepOf(run, cmd.claim.nodeId);
        const job = step.job;
        if (
          !ownsLease(job, cmd.claim, now) ||
          job.state !== "started" ||
          step.receipt === null ||
          step.receipt.execution === "unknown"
        ) {
          throw new WorkflowConflict("stale_claim", "the claim no longer owns a started job with a receipt");
        }
        job.state = "done";
        job.leaseUntil = null;
        step.status = cmd.outcome;
        if (cmd.outcome === "succeeded") {
          step.output = cmd.output;
          step.receipt = { ...step.receipt, disclosure: "released" };
        }
        events.push({ type: `step.${cmd.outcome}`, data: { nodeId: cmd.claim.nodeId } });
        return true;
      }),

    abandon: (cmd) =>
      command(cmd, (run, now, events) => {
        const node = nodeOf(run, cmd.claim.nodeId);
        const step = stepOf(run, cmd.claim.nodeId);
        const job = step.job;
        if (!ownsLease(job, cmd.claim, now) || job.state !== "leased" || job.startedAt !== null) {
          throw new WorkflowConflict("stale_claim", "the claim no longer owns an unstarted job");
        }
        job.state = "released";
        releaseReservation(run, step);
        endUnstarted(step, node, cmd.outcome, events, "not_dispatched");
        return true;
      }),

    failNode: (cmd) =>
      command(cmd, (run, _now, events) => {
        const step = stepOf(run, cmd.nodeId);
        if (isHalted(run.status) || !OPEN_STEP_STATUSES.has(step.status) || step.job !== null) return false;
        step.status = cmd.outcome;
        events.push({ type: `step.${cmd.outcome}`, data: { nodeId: cmd.nodeId, started: false } });
        return true;
      }),

    advance: (access) =>
      command(access, (run) => {
        const before = JSON.stringify(run);
        recompute(run, []);
        return JSON.stringify(run) !== before;
      }),

    finalize: (cmd) =>
      command(cmd, (run, _now, events) => {
        if (isHalted(run.status)) return false;
        if (!Object.values(run.steps).every((step) => step.status === "succeeded")) {
          throw new WorkflowConflict("conflict", "a run finalizes only when every step succeeded");
        }
        if (cmd.validation === "passed") {
          run.status = "succeeded";
          run.output = cmd.output;
        } else {
          run.status = "failed";
        }
        events.push({ type: "run.status", data: { status: run.status } });
        return true;
      }),

    cancel: (access) =>
      command(access, (run, _now, events) => {
        if (TERMINAL_RUN_STATUSES.has(run.status)) return false;
        for (const node of run.nodes) {
          const step = run.steps[node.id] as DraftStep;
          const job = step.job;
          if (job === null) {
            if (OPEN_STEP_STATUSES.has(step.status)) step.status = "skipped";
          } else if (job.state === "queued" || job.state === "leased") {
            job.state = "released";
            releaseReservation(run, step);
            step.status = "skipped";
          } else if (job.state === "started") {
            // Its tool may still be running: its cost stays held until a late receipt says what happened.
            job.state = "outcome_unknown";
            job.cancelRequested = true;
            step.status = "unknown";
          }
        }
        run.status = "cancelled";
        events.push({ type: "run.status", data: { status: "cancelled" } });
        return true;
      }),

    pause: (access) =>
      command(access, (run, _now, events) => {
        if (isHalted(run.status)) return false;
        const busy = Object.values(run.steps).some(
          (step) => step.job !== null && (step.job.state === "leased" || step.job.state === "started"),
        );
        if (busy) throw new WorkflowConflict("conflict", "a run with a claimed or running step cannot pause");
        run.pausedFrom = run.status;
        run.status = "paused";
        events.push({ type: "run.status", data: { status: "paused" } });
        return true;
      }),

    resume: (access) =>
      command(access, (run, _now, events) => {
        if (run.status !== "paused") throw new WorkflowConflict("conflict", "only a paused run can be resumed");
        run.status = run.pausedFrom ?? "running";
        run.pausedFrom = null;
        events.push({ type: "run.status", data: { status: run.status } });
        return true;
      }),

    recover: (access) =>
      command(access, (run, now, events) => {
        let changed = false;
        for (const node of run.nodes) {
          const step = run.steps[node.id] as DraftStep;
          const job = step.job;
          if (job === null || job.leaseUntil === null || job.leaseUntil > now) continue;
          if (job.state === "leased" && job.startedAt === null) {
            job.state = "queued";
            job.workerId = null;
            job.leaseUntil = null;
            events.push({ type: "job.requeued", data: { nodeId: node.id, fence: job.fence } });
            changed = true;
          } else if (job.state === "started") {
            job.state = "outcome_unknown";
            step.status = "unknown";
            events.push({ type: "job.lost", data: { nodeId: node.id, fence: job.fence } });
            changed = true;
          }
        }
        return changed;
      }),
  };

  return Object.freeze({
    kind: "airlock.workflow-store" as const,
    initialize: () => engine.initialize(),
    close: () => engine.close(),
    create: (record: NewRecord) => engine.create(record),
    read: (scope: string, id: string) => engine.read(scope, id),
    mutate: (scope: string, id: string, change: Mutation) => engine.mutate(scope, id, change),
    events: (scope: string, id: string, after = 0) => engine.events(scope, id, after, MAX_EVENTS_PER_READ),
    list: (query: RecordListQuery) => engine.list(query),
    workflows: Object.freeze(workflows),
  });
}

function checkAccess(record: StoredRecord | undefined, access: RunAccess): StoredRecord {
  if (record === undefined || record.kind !== RUN_KIND) {
    throw new AirlockError("NOT_FOUND", "no workflow run of that id in this scope");
  }
  if (record.scope !== access.scope || record.id !== access.id) {
    throw new AirlockError("STORAGE_UNAVAILABLE", "the store returned another record than the one asked for");
  }
  const run = runStateOf(record.state);
  if (run.policy !== access.policy) {
    throw new WorkflowConflict("conflict", "the run was submitted under another policy (scope, grants or version)");
  }
  return record;
}

export function errorCodeOf(error: unknown): ErrorCode | undefined {
  return error instanceof AirlockError ? error.code : undefined;
}
