/** `airlock-codemode/code-mode`: programs with digests, the executor, and sandbox adapters. */

export { MAX_SNAPSHOT_BYTES } from "../engine/limits.ts";
export {
  defineSandboxAdapter,
  isSandboxAdapter,
  type ProgramErrorInfo,
  type SandboxAdapter,
  type SandboxAdapterDefinition,
  type SandboxDeterministicRun,
  type SandboxExecuteRequest,
  type SandboxFailureReason,
  type SandboxProgram,
  type SandboxQualification,
  type SandboxResult,
  type SandboxSnapshot,
  type SandboxToolsBridge,
  type SequencedCallResult,
  type ToolCallResult,
} from "./adapter.ts";
export {
  type CodeApprovalsOptions,
  DEFAULT_CALL_APPROVAL_TTL_MS,
  MAX_CALL_APPROVAL_TTL_MS,
} from "./approvals/call-approvals.ts";
export type { CallApproval } from "./approvals/call-journal.ts";
export { APPROVAL_VERIFY_TIMEOUT_MS, type ApprovalDecision, type ApprovingHuman } from "./approvals/decisions.ts";
export { SNAPSHOT_MIN_CALLS } from "./approvals/journal-snapshots.ts";
export {
  type CodeModeInvokeTool,
  type CodeToolCallContext,
  DEFAULT_MAX_TOOL_RESULT_BYTES,
  MAX_CALL_ERROR_MESSAGE_CHARS,
} from "./calls.ts";
export {
  type ExecutionEvidence,
  type ExecutionReceipt,
  isCodeMode,
  type ReceiptDisclosure,
  type ReceiptExecution,
} from "./evidence.ts";
export { EXECUTION_ID_MEMORY } from "./execution-ids.ts";
export {
  type ApprovingCodeMode,
  type CodeExecuteOptions,
  type CodeMode,
  type CodeWaitingOutcome,
  type CreateCodeModeOptions,
  createCodeMode,
  type ResumableExecutionOutcome,
} from "./executor.ts";
export {
  type CodeExecutionOutcome,
  type CodeUsage,
  MAX_PROGRAM_ERROR_MESSAGE_CHARS,
  MAX_PROGRAM_ERROR_NAME_CHARS,
} from "./outcome.ts";
export {
  type AnyCodeProgram,
  CODE_PROGRAM_LIMIT_RANGES,
  CODE_PROGRAM_LIMITS,
  type CodeLanguage,
  type CodeProgram,
  type CodeProgramDefinition,
  type CodeProgramLimits,
  defineCodeProgram,
  isCodeProgram,
  MAX_BOUNDARY_BYTES,
  MAX_SOURCE_CHARS,
} from "./program.ts";
