/**
 * The scheduled workflow runtime: a worker that drives runs stored in a workflow store. Any number of workers, in any
 * number of processes, may drive the same run; the store decides who holds which step (leases with fences), so a step
 * runs at most once. Every decision a step depends on (its grants, its approval, its budget, that it started) is a
 * committed store command before the tool is dispatched; nothing is replayed after a crash.
 */
import type { z } from "zod";
import { verifyApprover } from "../code-mode/approvals/decisions.ts";
import { domainDigest, type JsonValue, tryCopyJson } from "../json/index.ts";
import { integerOption, optionKeys, refuseUnknownOptions } from "../platform/options.ts";
import { Budget } from "../tools/budget.ts";
import { changesNothing, requiredPermissions, type Scope, type ToolEffect } from "../tools/define.ts";
import { AirlockError, CONFIG_OPTION_ERRORS, configError, type Outcome } from "../tools/errors.ts";
import { copyScope, costOfOutcome, invokeTool } from "../tools/invoke.ts";
import { parseWithSchema } from "../tools/validate.ts";
import { type AnyWorkflow, isStepId, isWorkflow, resolveBinding } from "./definition.ts";
import type { StoredEvent, StoredRecord } from "./records.ts";
import {
  type ExecutionReceipt,
  OPEN_STEP_STATUSES,
  type ReceiptExecution,
  type RunState,
  runStateOf,
  type StoredStep,
  snapshotOf,
  TERMINAL_RUN_STATUSES,
  type WorkflowSnapshot,
} from "./run-state.ts";
import { type Claim, isConflict, type RunAccess, type StepOutcome, type WorkflowCommands } from "./store.ts";

export const DEFAULT_LEASE_MS = 3_000;
export const DEFAULT_MAX_CONCURRENT_JOBS = 4;
export const DEFAULT_MAX_CONCURRENT_RUNS = 16;
export const DEFAULT_STORAGE_TIMEOUT_MS = 10_000;
/** How long a person has to approve a step before the request lapses (the run then asks again). */
export const DEFAULT_APPROVAL_TTL_MS = 60 * 60 * 1000;
export const DEFAULT_MAX_OUTPUT_BYTES = 64 * 1024;
/** Largest `maxOutputBytes`: every step output of a run lives in its one record. */
export const MAX_WORKFLOW_OUTPUT_BYTES = 64 * 1024;
/** Time a `verifyExecution` callback has by default, and at most (`reconciliationTimeoutMs`). */
export const VERIFY_TIMEOUT_MS = 30_000;
/**
 * Store calls one worker may have waiting for an answer, those it gave up on after `storageTimeoutMs` included, by
 * default; the default grows to `maxConcurrentRuns + 2 * maxConcurrentJobs` (each driven run waits for one call,
 * each running step for one more and its lease's renewal) when that is more.
 */
export const DEFAULT_MAX_PENDING_STORAGE_OPERATIONS = 64;
/** Largest `maxPendingStorageOperations`. */
export const MAX_PENDING_STORAGE_OPERATIONS = 1_024;
/** What `runtime.profile` says: Mayura's name for this runtime's contract. */
export const SCHEDULED_PROFILE = "scheduled-v1";
/** Characters of an idempotency key. */
export const MAX_IDEMPOTENCY_KEY_CHARS = 128;

export interface VerifiedHuman {
  readonly id: string;
  readonly projectId: string;
  readonly canApprove: boolean;
}

export interface ExternalEffectReconciliationRequest {
  readonly runId: string;
  readonly definitionHash: string;
  readonly nodeId: string;
  readonly fence: number;
  readonly callId: string;
  readonly toolId: string;
  readonly toolVersion: string;
  readonly maximumCostMicros: number;
  readonly scope: Scope;
}

export interface VerifiedExternalEffect {
  readonly authorityId: string;
  readonly attestationId: string;
  readonly execution: "not_started" | "succeeded" | "failed";
  readonly knownCostMicros: number;
}

/** What a runtime needs of a store: its workflow commands and its event list. */
export interface ScheduledWorkflowStore {
  readonly workflows: WorkflowCommands;
  events(scope: string, id: string, after?: number): Promise<StoredEvent[]>;
}

export interface ScheduledWorkflowRuntimeOptions {
  store: ScheduledWorkflowStore;
  /** This worker's name in leases: 1-128 of letters, digits and `._/-`. */
  workerId: string;
  /** Trusted: whose runs these are. `principalId` and `projectId` are required. */
  scope: Scope & { readonly projectId: string };
  /** Exact grants the steps' tools need (`tool:<id>`, `effect:<effect>`, capabilities). */
  permissions: { readonly allow: readonly string[] };
  /** Part of the policy a run is bound to: changing it makes old runs and approvals CONFLICT. */
  policyVersion: string;
  /** The budget of one run. */
  maxCostMicros: number;
  /** Checks a person's credential for `approve`; only the returned id is stored. */
  verifyHuman?: (credential: unknown) => VerifiedHuman | Promise<VerifiedHuman>;
  /** An authority that says what became of an effect whose outcome is unknown (see `reconcile`). */
  verifyExecution?: (
    request: ExternalEffectReconciliationRequest,
    credential: unknown,
  ) => VerifiedExternalEffect | Promise<VerifiedExternalEffect>;
  /** Default `DEFAULT_LEASE_MS` (1,000-300,000); renewed every third of it while a step runs. */
  leaseMs?: number;
  /** Steps this worker runs at once; default `DEFAULT_MAX_CONCURRENT_JOBS` (1-32). */
  maxConcurrentJobs?: number;
  /** Runs this worker drives at once; default `DEFAULT_MAX_CONCURRENT_RUNS` (1-128). */
  maxConcurrentRuns?: number;
  /** Time one store call may take before it fails with STORAGE_UNAVAILABLE; default 10 s (1-30,000 ms). */
  storageTimeoutMs?: number;
  /**
   * Store calls this worker may have unanswered at once, those given up on after `storageTimeoutMs` until they
   * answer; past it a call fails at once with STORAGE_UNAVAILABLE. Default `DEFAULT_MAX_PENDING_STORAGE_OPERATIONS`
   * (or `maxConcurrentRuns + 2 * maxConcurrentJobs` when that is more), at least that sum, at most 1,024.
   */
  maxPendingStorageOperations?: number;
  /** Time `verifyExecution` has to answer in `reconcile`; default and most `VERIFY_TIMEOUT_MS` (1-30,000 ms). */
  reconciliationTimeoutMs?: number;
  /** Default `DEFAULT_APPROVAL_TTL_MS`. */
  approvalTtlMs?: number;
  /** Bytes of the run's input, each step's input and output, and the result; default and most 64 KiB. */
  maxOutputBytes?: number;
}

const OPTION_KEYS = optionKeys<ScheduledWorkflowRuntimeOptions>({
  store: true,
  workerId: true,
  scope: true,
  permissions: true,
  policyVersion: true,
  maxCostMicros: true,
  verifyHuman: true,
  verifyExecution: true,
  leaseMs: true,
  maxConcurrentJobs: true,
  maxConcurrentRuns: true,
  storageTimeoutMs: true,
  maxPendingStorageOperations: true,
  reconciliationTimeoutMs: true,
  approvalTtlMs: true,
  maxOutputBytes: true,
});

export interface WorkflowDrainReport {
  /** True when every step this worker had started settled before the deadline. */
  readonly settled: boolean;
  readonly pendingJobs: number;
}

/** A run's identity, as Mayura's `reference` gives it: data to keep or compare, not a capability. */
export interface ExecutionRef {
  readonly kind: "scheduled-workflow";
  readonly runId: string;
  readonly definitionHash: string;
  readonly policyHash: string;
}

export interface ScheduledWorkflowRuntime {
  /** `"scheduled-v1"`: the contract of this runtime, as Mayura names it. */
  readonly profile: typeof SCHEDULED_PROFILE;
  submit<I extends z.ZodType, O extends z.ZodType>(
    definition: AnyWorkflow & { input: I; output: O },
    command: { readonly input: z.input<I>; readonly idempotencyKey: string },
  ): Promise<WorkflowSnapshot>;
  inspect(id: string): Promise<WorkflowSnapshot>;
  /** The run's identity: its id, the digest of its definition and the digest of the policy it is bound to. */
  reference(id: string): Promise<ExecutionRef>;
  events(id: string, after?: number): Promise<StoredEvent[]>;
  /** Drives the run until nothing more can happen now: it settled, or it waits for a person or another worker. */
  runUntilSettled(definition: AnyWorkflow, id: string): Promise<WorkflowSnapshot>;
  approve(command: {
    readonly id: string;
    readonly nodeId: string;
    readonly digest: string;
    readonly credential: unknown;
  }): Promise<WorkflowSnapshot>;
  /** Refuses a waiting step: it is blocked without running, and so is the run. Checked as `approve` is. */
  reject(command: {
    readonly id: string;
    readonly nodeId: string;
    readonly digest: string;
    readonly credential: unknown;
  }): Promise<WorkflowSnapshot>;
  /** Settles the cost of a step whose outcome is unknown, as `verifyExecution` attests; the run stays outcome_unknown. */
  reconcile(
    definition: AnyWorkflow,
    command: { readonly id: string; readonly nodeId: string; readonly credential: unknown },
  ): Promise<WorkflowSnapshot>;
  cancel(id: string): Promise<WorkflowSnapshot>;
  pause(id: string): Promise<WorkflowSnapshot>;
  resume(id: string): Promise<WorkflowSnapshot>;
  /** Takes back expired leases: a step that never started is queued again, a started one becomes unknown. */
  recoverExpired(id: string): Promise<WorkflowSnapshot>;
  /** Stops this worker (not the runs): no new work; steps in flight still record what they did. */
  close(): Promise<void>;
  /** Claims no new work and waits up to `timeoutMs` for steps in flight, then closes. */
  drain(options?: { timeoutMs?: number }): Promise<WorkflowDrainReport>;
}

const WORKER_ID = /^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$/;
const HEX64 = /^[a-f0-9]{64}$/;

/** An integer option from `min` to `max`, `fallback` when it is not given (INVALID_CONFIG naming it otherwise). */
function integer(value: unknown, fallback: number, field: string, min: number, max: number): number {
  return integerOption(value, field, min, max, CONFIG_OPTION_ERRORS) ?? fallback;
}

/** A bounded JSON copy, or an AirlockError with `code` naming what the value is. */
function boundedJson(value: unknown, maxBytes: number, code: "INVALID_INPUT" | "INVALID_OUTPUT"): JsonValue {
  const copied = tryCopyJson(value, { maxBytes }, { freeze: true });
  if (!copied.ok) throw new AirlockError(code, `the value is not JSON within ${maxBytes} bytes`);
  return copied.json.value;
}

/** What a dispatched call's outcome says about its effect. A write or host tool that threw may have acted. */
function executionOf(
  outcome: Outcome<unknown>,
  effects: ToolEffect,
): { execution: ReceiptExecution; released: boolean } {
  if (outcome.status === "succeeded") return { execution: "succeeded", released: true };
  const code = outcome.error.code;
  if (code === "OUTCOME_UNKNOWN") return { execution: "unknown", released: false };
  // The tool answered, and its answer was refused (schema, size): the effect happened.
  if (code === "INVALID_OUTPUT" || code === "LIMIT_EXCEEDED") return { execution: "succeeded", released: false };
  if (code === "TOOL_FAILED" && !changesNothing(effects)) return { execution: "unknown", released: false };
  return { execution: "failed", released: false };
}

export function createScheduledWorkflowRuntime(options: ScheduledWorkflowRuntimeOptions): ScheduledWorkflowRuntime {
  if (typeof options !== "object" || options === null)
    throw configError("createScheduledWorkflowRuntime needs options");
  refuseUnknownOptions(options, "createScheduledWorkflowRuntime", OPTION_KEYS, CONFIG_OPTION_ERRORS);
  const store = options.store;
  const commands = store?.workflows;
  if (typeof commands !== "object" || commands === null || typeof store.events !== "function") {
    throw new AirlockError(
      "UNSUPPORTED_PROFILE",
      "the store has no workflow commands; use createSqliteStore or createPostgresStore",
    );
  }
  const copied = copyScope(options.scope);
  const projectId = copied?.projectId;
  if (copied === undefined || typeof projectId !== "string" || projectId.length === 0 || projectId.length > 256) {
    throw configError("scope must be a JSON object with non-empty string principalId and projectId");
  }
  const scope: Scope = copied;
  const workerId = options.workerId;
  if (typeof workerId !== "string" || !WORKER_ID.test(workerId)) {
    throw configError("workerId must be 1-128 characters of letters, digits and ._/- starting with a letter or digit");
  }
  const allow = options.permissions?.allow;
  if (!Array.isArray(allow) || !allow.every((p) => typeof p === "string")) {
    throw configError("permissions.allow must be an array of strings");
  }
  const granted = new Set(allow);
  if (
    typeof options.policyVersion !== "string" ||
    options.policyVersion.length === 0 ||
    options.policyVersion.length > 256
  ) {
    throw configError("policyVersion must be a string of 1-256 characters");
  }
  if (options.maxCostMicros === undefined) throw configError("maxCostMicros is required: the budget of one run");
  const maxCostMicros = integer(options.maxCostMicros, 0, "maxCostMicros", 0, Number.MAX_SAFE_INTEGER);
  const leaseMs = integer(options.leaseMs, DEFAULT_LEASE_MS, "leaseMs", 1_000, 300_000);
  const maxConcurrentJobs = integer(options.maxConcurrentJobs, DEFAULT_MAX_CONCURRENT_JOBS, "maxConcurrentJobs", 1, 32);
  const maxConcurrentRuns = integer(
    options.maxConcurrentRuns,
    DEFAULT_MAX_CONCURRENT_RUNS,
    "maxConcurrentRuns",
    1,
    128,
  );
  const storageTimeoutMs = integer(options.storageTimeoutMs, DEFAULT_STORAGE_TIMEOUT_MS, "storageTimeoutMs", 1, 30_000);
  // The worker's own calls must fit: one per driven run, and two per running step (its commands and its renewal).
  const ownCalls = maxConcurrentRuns + 2 * maxConcurrentJobs;
  const maxPendingStorageOperations = integer(
    options.maxPendingStorageOperations,
    Math.max(DEFAULT_MAX_PENDING_STORAGE_OPERATIONS, ownCalls),
    "maxPendingStorageOperations",
    ownCalls,
    MAX_PENDING_STORAGE_OPERATIONS,
  );
  const reconciliationTimeoutMs = integer(
    options.reconciliationTimeoutMs,
    VERIFY_TIMEOUT_MS,
    "reconciliationTimeoutMs",
    1,
    VERIFY_TIMEOUT_MS,
  );
  const approvalTtlMs = integer(options.approvalTtlMs, DEFAULT_APPROVAL_TTL_MS, "approvalTtlMs", 1, 30 * 24 * 3600_000);
  const maxOutputBytes = integer(
    options.maxOutputBytes,
    DEFAULT_MAX_OUTPUT_BYTES,
    "maxOutputBytes",
    1,
    MAX_WORKFLOW_OUTPUT_BYTES,
  );
  const { verifyHuman, verifyExecution } = options;
  if (verifyHuman !== undefined && typeof verifyHuman !== "function")
    throw configError("verifyHuman must be a function");
  if (verifyExecution !== undefined && typeof verifyExecution !== "function") {
    throw configError("verifyExecution must be a function");
  }

  const scopeHash = domainDigest("airlock:scope:v1", scope);
  const policy = domainDigest("airlock:policy:v1", {
    scope,
    permissions: [...granted].sort(),
    policyVersion: options.policyVersion,
    maxCostMicros,
    maxOutputBytes,
    approvalTtlMs,
  });
  const permissions = Object.freeze({ allow: Object.freeze([...granted]) });
  const access = (id: unknown): RunAccess => {
    if (typeof id !== "string" || !HEX64.test(id)) throw new AirlockError("INVALID_INPUT", "a run id is 64 hex digits");
    return { scope: scopeHash, id, policy };
  };

  let closed = false;
  let draining = false;
  let slots = 0;
  const drivers = new Map<string, { digest: string; operation: Promise<WorkflowSnapshot> }>();
  const inFlight = new Set<Promise<void>>();
  const open = () => {
    if (closed || draining) throw new AirlockError("CANCELLED", "this workflow worker is closed");
  };

  let pendingStorage = 0;
  /**
   * A store call bounded by `storageTimeoutMs`; a timeout never means the change did not happen. A call given up on
   * keeps its place among `maxPendingStorageOperations` until it answers.
   */
  const storage = <T>(operation: () => Promise<T>): Promise<T> => {
    if (pendingStorage >= maxPendingStorageOperations) {
      return Promise.reject(
        new AirlockError(
          "STORAGE_UNAVAILABLE",
          `this worker has ${maxPendingStorageOperations} store calls unanswered (maxPendingStorageOperations)`,
        ),
      );
    }
    pendingStorage++;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new AirlockError("STORAGE_UNAVAILABLE", `the store did not answer within ${storageTimeoutMs} ms`)),
        storageTimeoutMs,
      );
    });
    let pending: Promise<T>;
    try {
      pending = Promise.resolve(operation());
    } catch (error) {
      pending = Promise.reject(error);
    }
    const answered = () => {
      pendingStorage--;
    };
    pending.then(answered, answered);
    return Promise.race([pending, timeout]).finally(() => clearTimeout(timer));
  };

  const bounded = async <T>(callback: () => T | Promise<T>, ms: number): Promise<T> => {
    let timer: ReturnType<typeof setTimeout> | undefined;
    try {
      return await Promise.race([
        Promise.resolve().then(callback),
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error("timed out")), ms);
        }),
      ]);
    } finally {
      clearTimeout(timer);
    }
  };

  const stateOf = (record: StoredRecord): RunState => runStateOf(record.state);
  const snapshot = (record: StoredRecord) => snapshotOf(record.id, record.version, stateOf(record));
  const load = (id: string) => storage(() => commands.inspect(access(id)));

  const matches = (definition: AnyWorkflow, record: StoredRecord) => {
    if (record.definitionHash !== definition.digest) {
      throw new AirlockError("CONFLICT", "the run was submitted with another workflow definition");
    }
  };

  const checkDefinition = (definition: unknown): AnyWorkflow => {
    if (!isWorkflow(definition)) throw configError("pass a workflow made by defineWorkflow");
    return definition;
  };

  const initialState = (definition: AnyWorkflow, id: string, input: JsonValue): RunState => {
    const steps: Record<string, StoredStep> = {};
    for (const node of definition.nodes) {
      steps[node.id] = {
        kind: node.kind,
        status: "pending",
        callId: node.kind === "tool" ? `${id}/step:${node.id}` : null,
        input: null,
        output: null,
        receipt: null,
        approval: null,
        costReserved: 0,
        costSpent: 0,
        job: null,
      };
    }
    return {
      format: 1,
      kind: "workflow-run",
      policy,
      scope,
      workflow: { id: definition.id, version: definition.version, digest: definition.digest },
      nodes: definition.nodes.map((node) => ({
        id: node.id,
        kind: node.kind,
        dependsOn: [...node.dependsOn],
        toolId: node.kind === "tool" ? node.tool.id : null,
        toolVersion: node.kind === "tool" ? node.tool.version : null,
        costMicros: node.kind === "tool" ? node.tool.costMicros : 0,
        approval: node.kind === "tool" ? node.approval : false,
      })),
      input,
      status: "running",
      pausedFrom: null,
      steps,
      output: null,
      spentMicros: 0,
      reservedMicros: 0,
      maxCostMicros,
      approvalTtlMs,
    };
  };

  const outputsOf = (run: RunState): Record<string, JsonValue> => {
    const outputs: Record<string, JsonValue> = {};
    for (const [nodeId, step] of Object.entries(run.steps))
      if (step.status === "succeeded") outputs[nodeId] = step.output;
    return outputs;
  };

  /** Runs one claimed step: persist its start, dispatch its tool once, record what happened, settle it. */
  async function executeClaim(definition: AnyWorkflow, id: string, claim: Claim, run: RunState): Promise<void> {
    const node = definition.nodes.find((item) => item.id === claim.nodeId);
    if (node === undefined || node.kind !== "tool") return;
    const base = access(id);
    const controller = new AbortController();
    let current = claim;
    let renewal: ReturnType<typeof setTimeout> | undefined;
    let finished = false;
    const scheduleRenewal = () => {
      if (finished) return;
      renewal = setTimeout(
        () => {
          storage(() => commands.renew({ ...base, claim: current, leaseMs }))
            .then((next) => {
              current = next;
              scheduleRenewal();
            })
            .catch(() => controller.abort());
        },
        Math.floor(leaseMs / 3),
      );
    };
    // Every command locks the run's row, so a renewal in flight cannot invalidate the completion that follows it.
    const stopRenewal = () => {
      finished = true;
      clearTimeout(renewal);
    };
    const input = (run.steps[node.id] as StoredStep).input;
    let dispatched = false;
    scheduleRenewal();
    try {
      const outcome = await invokeTool(node.tool, input, {
        runId: id,
        callId: `${id}/step:${node.id}`,
        scope,
        permissions,
        signal: controller.signal,
        budget: new Budget(node.tool.costMicros, 1),
        maxInputBytes: maxOutputBytes,
        maxOutputBytes,
        beforeDispatch: async () => {
          const started = await storage(() => commands.start({ ...base, claim: current, input }));
          if (started.status !== "started") throw new Error("refused");
          dispatched = true;
        },
      });
      if (!dispatched) {
        stopRenewal();
        const outcomeOfStep = outcome.status === "blocked" ? "blocked" : "failed";
        await storage(() => commands.abandon({ ...base, claim: current, outcome: outcomeOfStep })).catch(() => {});
        return;
      }
      const { execution, released } = executionOf(outcome, node.tool.effects);
      // As the broker settled the call (a code phase is charged what its program's calls cost, an unknown one keeps
      // the rest held); without its record, the whole reservation is spent, or held when the outcome is unknown.
      const cost =
        costOfOutcome(outcome) ??
        (execution === "unknown"
          ? { spentMicros: 0, unknownMicros: node.tool.costMicros }
          : { spentMicros: node.tool.costMicros, unknownMicros: 0 });
      const receipt: ExecutionReceipt = {
        callId: `${id}/step:${node.id}`,
        toolId: node.tool.id,
        execution,
        disclosure: "withheld",
      };
      // Evidence of what happened is recorded even if this worker is closing.
      const recorded = await storage(() =>
        commands.recordReceipt({
          ...base,
          nodeId: node.id,
          fence: claim.fence,
          receipt,
          settlement: { knownCostMicros: cost.spentMicros, unknownCostMicros: cost.unknownMicros },
        }),
      );
      // Unknown, or the lease lapsed (or the run was cancelled) meanwhile: the store has settled the step.
      const job = (stateOf(recorded).steps[node.id] as StoredStep).job;
      if (execution === "unknown" || job?.state !== "started" || job.fence !== claim.fence) return;
      stopRenewal();
      const stepOutcome: StepOutcome = released ? "succeeded" : outcome.status === "blocked" ? "blocked" : "failed";
      await storage(() =>
        commands.complete({
          ...base,
          claim: current,
          outcome: stepOutcome,
          output: released && outcome.status === "succeeded" ? (outcome.output as JsonValue) : null,
        }),
      );
    } catch (error) {
      // A lost lease is the store's to settle (recoverExpired); it never makes this worker dispatch again.
      if (!isConflict(error)) throw error;
    } finally {
      finished = true;
      clearTimeout(renewal);
    }
  }

  async function admit(definition: AnyWorkflow, id: string): Promise<void> {
    const base = access(id);
    for (const node of definition.nodes) {
      if (node.kind !== "tool") continue;
      const record = await load(id);
      const run = stateOf(record);
      if (TERMINAL_RUN_STATUSES.has(run.status) || run.status === "paused") return;
      const step = run.steps[node.id] as StoredStep;
      if (!OPEN_STEP_STATUSES.has(step.status) || step.job !== null) continue;
      if (node.dependsOn.some((dep) => run.steps[dep]?.status !== "succeeded")) continue;
      if (requiredPermissions(node.tool).some((permission) => !granted.has(permission))) {
        await storage(() => commands.failNode({ ...base, nodeId: node.id, outcome: "blocked" }));
        continue;
      }
      let input: JsonValue;
      try {
        const raw = resolveBinding(node.input, run.input, outputsOf(run));
        const parsed = await parseWithSchema(node.tool.input, raw);
        if (!parsed.ok) throw new AirlockError("INVALID_INPUT", "the step's input does not match its tool");
        input = boundedJson(parsed.value, maxOutputBytes, "INVALID_INPUT");
      } catch {
        await storage(() => commands.failNode({ ...base, nodeId: node.id, outcome: "failed" }));
        continue;
      }
      if (node.approval) {
        const asked = await storage(() => commands.requestApproval({ ...base, nodeId: node.id, input }));
        if ((stateOf(asked).steps[node.id] as StoredStep).status !== "approved") continue;
      }
      try {
        await storage(() => commands.prepare({ ...base, nodeId: node.id, input }));
      } catch (error) {
        if (!node.approval || !isConflict(error, "review_expired")) throw error;
        // The approval lapsed before the step was admitted: ask again with a fresh digest.
        await storage(() => commands.requestApproval({ ...base, nodeId: node.id, input }));
      }
    }
  }

  async function drive(definition: AnyWorkflow, id: string): Promise<WorkflowSnapshot> {
    const base = access(id);
    for (let wave = 0; wave < definition.nodes.length * 2 + 8; wave++) {
      open();
      const start = await load(id);
      matches(definition, start);
      const before = stateOf(start);
      if (TERMINAL_RUN_STATUSES.has(before.status) || before.status === "paused") return snapshot(start);
      await storage(() => commands.recover(base));
      await admit(definition, id);
      let claimed = 0;
      const available = maxConcurrentJobs - slots;
      if (available > 0 && !closed && !draining) {
        slots += available;
        let claims: Claim[] = [];
        try {
          claims = await storage(() => commands.claim({ ...base, workerId, limit: available, leaseMs }));
        } finally {
          slots -= available - claims.length;
        }
        claimed = claims.length;
        if (claims.length > 0) {
          const run = stateOf(await load(id));
          const jobs = claims.map((claim) => {
            const job = executeClaim(definition, id, claim, run).finally(() => {
              slots -= 1;
              inFlight.delete(job);
            });
            inFlight.add(job);
            return job;
          });
          const results = await Promise.allSettled(jobs);
          const failure = results.find((result) => result.status === "rejected");
          if (failure?.status === "rejected") throw failure.reason;
        }
      }
      let current = await storage(() => commands.advance(base));
      const run = stateOf(current);
      if (TERMINAL_RUN_STATUSES.has(run.status) || run.status === "paused") return snapshot(current);
      if (Object.values(run.steps).every((step) => step.status === "succeeded")) {
        let final: { validation: "passed"; output: JsonValue } | { validation: "failed" };
        try {
          const raw = resolveBinding(definition.result, run.input, outputsOf(run));
          const parsed = await parseWithSchema(definition.output, raw);
          if (!parsed.ok) throw new Error("invalid");
          final = { validation: "passed", output: boundedJson(parsed.value, maxOutputBytes, "INVALID_OUTPUT") };
        } catch {
          final = { validation: "failed" };
        }
        current = await storage(() => commands.finalize({ ...base, ...final }));
        return snapshot(current);
      }
      // A wave that claimed nothing and changed nothing: the run waits (for a person, a lease, another worker).
      if (claimed === 0 && current.version === start.version) return snapshot(current);
    }
    return snapshot(await load(id));
  }

  const verify = (credential: unknown) => verifyApprover(verifyHuman, credential, projectId);

  const runtime: ScheduledWorkflowRuntime = {
    profile: SCHEDULED_PROFILE,

    async submit(definition, command) {
      open();
      checkDefinition(definition);
      const key = command?.idempotencyKey;
      if (typeof key !== "string" || key.length === 0 || key.length > MAX_IDEMPOTENCY_KEY_CHARS) {
        throw new AirlockError(
          "INVALID_INPUT",
          `idempotencyKey must be a string of 1-${MAX_IDEMPOTENCY_KEY_CHARS} characters`,
        );
      }
      const raw = boundedJson(command.input, maxOutputBytes, "INVALID_INPUT");
      const parsed = await parseWithSchema(definition.input, raw);
      if (!parsed.ok) throw new AirlockError("INVALID_INPUT", "the input does not match the workflow's input schema");
      const input = boundedJson(parsed.value, maxOutputBytes, "INVALID_INPUT");
      const id = domainDigest("airlock:run-id:v1", { scope: scopeHash, idempotencyKey: key });
      const { record } = await storage(() =>
        commands.submit({
          scope: scopeHash,
          id,
          idempotencyKey: key,
          definitionHash: definition.digest,
          state: initialState(definition, id, input),
        }),
      );
      return snapshot(record);
    },

    async inspect(id) {
      open();
      return snapshot(await load(id));
    },

    async reference(id) {
      open();
      const record = await load(id);
      return Object.freeze({
        kind: "scheduled-workflow" as const,
        runId: record.id,
        definitionHash: record.definitionHash,
        policyHash: policy,
      });
    },

    async events(id, after = 0) {
      open();
      if (!Number.isSafeInteger(after) || after < 0) {
        throw new AirlockError("INVALID_INPUT", "after must be a non-negative integer");
      }
      await load(id);
      return storage(() => store.events(scopeHash, id, after));
    },

    runUntilSettled(definition, id) {
      try {
        open();
        checkDefinition(definition);
        access(id);
      } catch (error) {
        return Promise.reject(error);
      }
      const existing = drivers.get(id);
      if (existing !== undefined) {
        return existing.digest === definition.digest
          ? existing.operation
          : Promise.reject(new AirlockError("CONFLICT", "this worker drives the run with another definition"));
      }
      if (drivers.size >= maxConcurrentRuns) {
        return Promise.reject(new AirlockError("LIMIT_EXCEEDED", "this worker drives its maxConcurrentRuns already"));
      }
      const operation = drive(definition, id).finally(() => drivers.delete(id));
      drivers.set(id, { digest: definition.digest, operation });
      return operation;
    },

    async approve(command) {
      open();
      const { id, nodeId, digest, credential } = command ?? {};
      const base = access(id);
      if (!isStepId(nodeId) || typeof digest !== "string" || !HEX64.test(digest)) {
        throw new AirlockError("INVALID_INPUT", "approve needs a step id and the 64-hex digest of its approval");
      }
      const human = await verify(credential);
      open();
      return snapshot(await storage(() => commands.approve({ ...base, nodeId, digest, humanId: human.id })));
    },

    async reject(command) {
      open();
      const { id, nodeId, digest, credential } = command ?? {};
      const base = access(id);
      if (!isStepId(nodeId) || typeof digest !== "string" || !HEX64.test(digest)) {
        throw new AirlockError("INVALID_INPUT", "reject needs a step id and the 64-hex digest of its approval");
      }
      const human = await verify(credential);
      open();
      return snapshot(await storage(() => commands.reject({ ...base, nodeId, digest, humanId: human.id })));
    },

    async reconcile(definition, command) {
      open();
      checkDefinition(definition);
      const { id, nodeId, credential } = command ?? {};
      const base = access(id);
      if (!isStepId(nodeId)) throw new AirlockError("INVALID_INPUT", "reconcile needs a step id");
      if (verifyExecution === undefined) {
        throw new AirlockError("PERMISSION_DENIED", "this runtime has no verifyExecution to settle unknown effects");
      }
      const record = await load(id);
      matches(definition, record);
      const node = definition.nodes.find((item) => item.id === nodeId);
      const job = stateOf(record).steps[nodeId]?.job;
      if (
        node === undefined ||
        node.kind !== "tool" ||
        job === null ||
        job === undefined ||
        job.state !== "outcome_unknown"
      ) {
        throw new AirlockError("CONFLICT", "only a step whose outcome is unknown can be reconciled");
      }
      const request: ExternalEffectReconciliationRequest = Object.freeze({
        runId: id,
        definitionHash: definition.digest,
        nodeId,
        fence: job.fence,
        callId: `${id}/step:${nodeId}`,
        toolId: node.tool.id,
        toolVersion: node.tool.version,
        maximumCostMicros: node.tool.costMicros,
        scope,
      });
      let verdict: VerifiedExternalEffect;
      try {
        const value = await bounded(() => verifyExecution(request, credential), reconciliationTimeoutMs);
        const { authorityId, attestationId, execution, knownCostMicros } = value;
        if (
          typeof authorityId !== "string" ||
          !WORKER_ID.test(authorityId) ||
          typeof attestationId !== "string" ||
          attestationId.length === 0 ||
          attestationId.length > 256 ||
          !["not_started", "succeeded", "failed"].includes(execution) ||
          !Number.isSafeInteger(knownCostMicros) ||
          knownCostMicros < 0 ||
          knownCostMicros > node.tool.costMicros ||
          (execution === "not_started" && knownCostMicros !== 0)
        ) {
          throw new Error("malformed");
        }
        verdict = { authorityId, attestationId, execution, knownCostMicros };
      } catch {
        throw new AirlockError("PERMISSION_DENIED", "the verifier did not attest what became of the effect");
      }
      open();
      return snapshot(
        await storage(() =>
          commands.recordReceipt({
            ...base,
            nodeId,
            fence: job.fence,
            receipt: {
              callId: request.callId,
              toolId: node.tool.id,
              execution: verdict.execution,
              disclosure: "withheld",
            },
            settlement: { knownCostMicros: verdict.knownCostMicros, unknownCostMicros: 0 },
            source: {
              kind: "external_reconciliation",
              authorityId: verdict.authorityId,
              attestationHash: domainDigest("airlock:attestation:v1", verdict),
            },
          }),
        ),
      );
    },

    async cancel(id) {
      open();
      return snapshot(await storage(() => commands.cancel(access(id))));
    },
    async pause(id) {
      open();
      return snapshot(await storage(() => commands.pause(access(id))));
    },
    async resume(id) {
      open();
      return snapshot(await storage(() => commands.resume(access(id))));
    },
    async recoverExpired(id) {
      open();
      return snapshot(await storage(() => commands.recover(access(id))));
    },

    async close() {
      closed = true;
    },

    async drain(drainOptions = {}) {
      const timeoutMs = integer(drainOptions?.timeoutMs, 30_000, "timeoutMs", 0, 300_000);
      draining = true;
      let timer: ReturnType<typeof setTimeout> | undefined;
      const deadline = new Promise<"late">((resolve) => {
        timer = setTimeout(() => resolve("late"), timeoutMs);
      });
      const settled = await Promise.race([Promise.allSettled([...inFlight]).then(() => "settled" as const), deadline]);
      clearTimeout(timer);
      closed = true;
      return Object.freeze({ settled: settled === "settled", pendingJobs: inFlight.size });
    },
  };
  return Object.freeze(runtime);
}
