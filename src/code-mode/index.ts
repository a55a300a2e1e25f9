/** `airlock-codemode/code-mode`: programs with digests, the executor, and sandbox adapters. */
export {
  defineSandboxAdapter,
  isSandboxAdapter,
  type ProgramErrorInfo,
  SANDBOX_FAILURE_REASONS,
  type SandboxAdapter,
  type SandboxAdapterDefinition,
  type SandboxExecuteRequest,
  type SandboxFailureReason,
  type SandboxProgram,
  type SandboxQualification,
  type SandboxResult,
  type SandboxToolsBridge,
  type ToolCallResult,
} from "./adapter.ts";
export {
  CALL_SETTLE_GRACE_MS,
  type CodeModeInvokeTool,
  type CodeToolCallContext,
  DEFAULT_MAX_TOOL_RESULT_BYTES,
  MAX_CALL_ERROR_MESSAGE_CHARS,
} from "./calls.ts";
export { EXECUTION_ID_MEMORY } from "./execution-ids.ts";
export {
  ADAPTER_STOP_GRACE_MS,
  AVAILABILITY_TIMEOUT_MS,
  type CodeExecuteOptions,
  type CodeMode,
  type CreateCodeModeOptions,
  createCodeMode,
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
  type CodeLanguage,
  type CodeProgram,
  type CodeProgramDefinition,
  type CodeProgramLimits,
  defineCodeProgram,
  isCodeProgram,
  MAX_BOUNDARY_BYTES,
  MAX_SOURCE_CHARS,
} from "./program.ts";
