/**
 * `airlock-codemode/workflows`: durable workflows whose steps are tool calls, approved by a person where required,
 * leased to one worker at a time, and never replayed after a crash. Stores: `airlock-codemode/workflows/sqlite`
 * (embedded) and `airlock-codemode/workflows/postgres` (many workers).
 */
export {
  type AnyWorkflow,
  type Binding,
  defineWorkflow,
  isWorkflow,
  MAX_BINDING_PATH,
  MAX_LITERAL_BYTES,
  MAX_WORKFLOW_NODES,
  type WorkflowDefinition,
  type WorkflowNode,
  type WorkflowOptions,
} from "./definition.ts";
export {
  MAX_EVENTS_PER_READ,
  MAX_LIST_RECORDS,
  MAX_RECORD_BYTES,
  type Mutation,
  type NewEvent,
  type NewRecord,
  type RecordListQuery,
  type StoredEvent,
  type StoredRecord,
} from "./records.ts";
export type {
  Approval,
  ExecutionReceipt,
  JobState,
  ReceiptDisclosure,
  ReceiptExecution,
  RunStatus,
  StepSnapshot,
  StepStatus,
  WorkflowSnapshot,
} from "./run-state.ts";
export {
  createScheduledWorkflowRuntime,
  DEFAULT_APPROVAL_TTL_MS,
  DEFAULT_LEASE_MS,
  DEFAULT_MAX_CONCURRENT_JOBS,
  DEFAULT_MAX_CONCURRENT_RUNS,
  DEFAULT_MAX_OUTPUT_BYTES,
  DEFAULT_MAX_PENDING_STORAGE_OPERATIONS,
  DEFAULT_STORAGE_TIMEOUT_MS,
  type ExecutionRef,
  type ExternalEffectReconciliationRequest,
  MAX_IDEMPOTENCY_KEY_CHARS,
  MAX_PENDING_STORAGE_OPERATIONS,
  MAX_WORKFLOW_OUTPUT_BYTES,
  SCHEDULED_PROFILE,
  type ScheduledWorkflowRuntime,
  type ScheduledWorkflowRuntimeOptions,
  VERIFY_TIMEOUT_MS,
  type VerifiedExternalEffect,
  type VerifiedHuman,
  type WorkflowDrainReport,
} from "./runtime.ts";
export type { WorkflowStore } from "./store.ts";
