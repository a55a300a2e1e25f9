/**
 * The executor: `createCodeMode({ adapter, invokeTool })` runs programs on a sandbox adapter and sends every tool call
 * the program makes back through the host's broker. `execute()` never throws; it returns an outcome with a public
 * error code and usage, and only after every tool call it started has settled (or was given up as unknown).
 *
 * How an execution ends, in order of precedence:
 * 1. a tool call whose outcome is unknown makes it `outcome_unknown`, whatever the program returned;
 * 2. a stop the executor made: the caller's signal (CANCELLED), the wall clock (TIMEOUT), the response budget
 *    (LIMIT_EXCEEDED);
 * 3. the sandbox's answer: the program threw (TOOL_FAILED with `programError`), a CPU or memory limit
 *    (LIMIT_EXCEEDED), an output that is not JSON or does not match the output schema (INVALID_OUTPUT), ...
 */
import type { z } from "zod";
import { type JsonValue, parseJson, tryCopyJson } from "../json/index.ts";
import { optionKeys, unknownOption } from "../options.ts";
import type { AnyTool, Scope } from "../tools/define.ts";
import {
  AirlockError,
  configError,
  type ErrorCode,
  type FailureStatus,
  isErrorCode,
  type Outcome,
  type OutcomeError,
  statusOf,
} from "../tools/errors.ts";
import { copyScope, costOfOutcome, isId, MAX_ID_CHARS } from "../tools/invoke.ts";
import { type CallerTools, isCallerTools } from "../tools/registry.ts";
import { parseWithSchema } from "../tools/validate.ts";
import {
  isSandboxAdapter,
  type ProgramErrorInfo,
  SANDBOX_FAILURE_REASONS,
  type SandboxAdapter,
  type SandboxProgram,
  type SandboxResult,
  type SandboxToolsBridge,
  type ToolCallResult,
} from "./adapter.ts";
import {
  type ApprovalDecision,
  type AttemptOutcome,
  type CallApproval,
  type CodeApprovalsOptions,
  createCallApprovals,
  type WaitingOutcome,
} from "./approvals.ts";
import { brandCodeMode, type ExecutionEvidence, receiptOf, unknownReceipt } from "./evidence.ts";
import { type AnyCodeProgram, type CodeProgram, isCodeProgram } from "./program.ts";

/** Finished execution ids the executor remembers to refuse their reuse (CONFLICT). */
export const EXECUTION_ID_MEMORY = 100_000;
/** Characters of `programError.name` and `programError.message`. */
export const MAX_PROGRAM_ERROR_NAME_CHARS = 128;
export const MAX_PROGRAM_ERROR_MESSAGE_CHARS = 1_024;
/** Characters of a tool call's error message handed to the program. */
export const MAX_CALL_ERROR_MESSAGE_CHARS = 1_024;
/** Default total bytes of tool results one execution may receive (never more than the program's memoryBytes). */
export const DEFAULT_MAX_TOOL_RESULT_BYTES = 16 * 1024 * 1024;
/** Time the broker has to settle the calls of an execution after it ended, before they count as unknown. */
export const CALL_SETTLE_GRACE_MS = 2_000;
/** Time an adapter has to return after the executor stopped its execution, before the executor stops waiting. */
export const ADAPTER_STOP_GRACE_MS = 2_000;
/** Time an adapter's `isAvailable()` has to answer. */
export const AVAILABILITY_TIMEOUT_MS = 5_000;

export interface CodeToolCallContext {
  readonly runId: string;
  /** `<executionId>:<n>`, n counting the calls handed to the broker from 1. */
  readonly callId: string;
  readonly executionId: string;
  /** The trusted scope the host passed to `execute()`, deep-frozen. */
  readonly scope: Scope;
  /** Aborts when the call is cancelled or the execution ends; honour it. */
  readonly signal: AbortSignal;
  readonly programId: string;
  readonly programDigest: string;
  /** The caller's tool set, when `execute()` was given one. */
  readonly caller: CallerTools | undefined;
}

/** The host's broker: typically `invokeTool(tool, input, { ...context, permissions, budget })`. */
export type CodeModeInvokeTool = (
  tool: AnyTool,
  input: JsonValue,
  context: CodeToolCallContext,
) => Promise<Outcome<unknown>> | Outcome<unknown>;

export interface CreateCodeModeOptions<A extends SandboxAdapter = SandboxAdapter> {
  adapter: A;
  invokeTool: CodeModeInvokeTool;
  /** Accept an adapter declared `qualification: 'test'`. */
  allowTestAdapter?: boolean;
  /** Total bytes of tool results one execution may receive; default `DEFAULT_MAX_TOOL_RESULT_BYTES`. */
  maxToolResultBytes?: number;
  /** Lets programs pause at calls of tools with `approval` until a person decides (see approvals.ts). */
  approvals?: CodeApprovalsOptions;
}

export interface CodeExecuteOptions {
  runId: string;
  /** New for every execution: one that is running or among the last `EXECUTION_ID_MEMORY` finished is CONFLICT. */
  executionId: string;
  /** Trusted: whose data the tools touch. The program cannot see or change it. */
  scope: Scope;
  signal?: AbortSignal;
  /** The caller's tool set (`registry.for(caller)`): program tools outside it are PERMISSION_DENIED. */
  caller?: CallerTools;
}

const CREATE_CODE_MODE_KEYS = optionKeys<CreateCodeModeOptions>({
  adapter: true,
  invokeTool: true,
  allowTestAdapter: true,
  maxToolResultBytes: true,
  approvals: true,
});
const EXECUTE_KEYS = optionKeys<CodeExecuteOptions>({
  runId: true,
  executionId: true,
  scope: true,
  signal: true,
  caller: true,
});

export interface CodeUsage {
  /** Calls handed to the broker. */
  readonly toolCalls: number;
  /** Calls whose outcome is unknown. */
  readonly unknownCalls: number;
  /** Cost of calls whose tools ran and answered. */
  readonly knownCostMicros: number;
  /** Cost of calls whose outcome is unknown. */
  readonly unknownCostMicros: number;
  /** The program's maximum possible cost: `maxToolCalls` times its most expensive tool. */
  readonly maximumCostMicros: number;
}

export type CodeExecutionOutcome<T> =
  | {
      readonly status: "succeeded";
      readonly output: T;
      readonly usage: CodeUsage;
      /** A receipt for every call handed to the broker, in the order they were. */
      readonly evidence: readonly ExecutionEvidence[];
    }
  | {
      readonly status: FailureStatus;
      readonly error: OutcomeError;
      /** Set when the program itself threw: its own text, cut to 128 and 1,024 characters. Treat it as output. */
      readonly programError?: ProgramErrorInfo;
      readonly usage: CodeUsage;
      readonly evidence: readonly ExecutionEvidence[];
    };

/** The program reached a call a person must approve: `approve` or `reject` it, then `resume`. */
export interface CodeWaitingOutcome {
  readonly status: "waiting";
  readonly approval: CallApproval;
  readonly usage: CodeUsage;
  readonly evidence: readonly ExecutionEvidence[];
}

/** What an execution of a code mode with approvals ends with. */
export type ResumableExecutionOutcome<T> = CodeExecutionOutcome<T> | CodeWaitingOutcome;

export interface CodeMode<A extends SandboxAdapter = SandboxAdapter> {
  readonly adapter: A;
  execute<I extends z.ZodType, O extends z.ZodType>(
    program: CodeProgram<I, O>,
    input: unknown,
    options: CodeExecuteOptions,
  ): Promise<CodeExecutionOutcome<z.output<O>>>;
}

/** A code mode made with `approvals`: its executions may wait for a person. */
export interface ApprovingCodeMode<A extends SandboxAdapter = SandboxAdapter> {
  readonly adapter: A;
  execute<I extends z.ZodType, O extends z.ZodType>(
    program: CodeProgram<I, O>,
    input: unknown,
    options: CodeExecuteOptions,
  ): Promise<ResumableExecutionOutcome<z.output<O>>>;
  /** Approves the pending call of a waiting execution (PERMISSION_DENIED, CONFLICT for another digest). */
  approve(decision: ApprovalDecision): Promise<{ status: "approved" }>;
  /** Rejects it: the program gets that call's result `{ status: 'blocked', error: { code: 'GUARD_BLOCKED' } }`. */
  reject(decision: ApprovalDecision): Promise<{ status: "rejected" }>;
  /** Continues a decided execution (same runId, executionId, scope; any process on the same store). */
  resume<I extends z.ZodType, O extends z.ZodType>(
    program: CodeProgram<I, O>,
    input: unknown,
    options: CodeExecuteOptions,
  ): Promise<ResumableExecutionOutcome<z.output<O>>>;
}

/** Execution ids that are running or recently finished. */
class ExecutionIds {
  private readonly running = new Set<string>();
  private readonly finished = new Set<string>();
  private readonly ring: (string | undefined)[];
  private next = 0;

  constructor(private readonly size: number) {
    this.ring = new Array(size);
  }

  claim(id: string): boolean {
    if (this.running.has(id) || this.finished.has(id)) return false;
    this.running.add(id);
    return true;
  }

  finish(id: string): void {
    this.running.delete(id);
    const evicted = this.ring[this.next];
    if (evicted !== undefined) this.finished.delete(evicted);
    this.ring[this.next] = id;
    this.next = (this.next + 1) % this.size;
    this.finished.add(id);
  }
}

function clip(text: string, max: number): string {
  if (text.length <= max) return text;
  let cut = text.slice(0, max);
  const last = cut.charCodeAt(cut.length - 1);
  if (last >= 0xd800 && last <= 0xdbff) cut = cut.slice(0, -1);
  return cut;
}

function clipProgramError(value: unknown): ProgramErrorInfo | undefined {
  if (typeof value !== "object" || value === null) return undefined;
  const { name, message } = value as { name?: unknown; message?: unknown };
  return Object.freeze({
    name: clip(typeof name === "string" ? name : "Error", MAX_PROGRAM_ERROR_NAME_CHARS),
    message: clip(typeof message === "string" ? message : "", MAX_PROGRAM_ERROR_MESSAGE_CHARS),
  });
}

function delay(ms: number): { promise: Promise<void>; cancel(): void } {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const promise = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, ms);
  });
  return { promise, cancel: () => clearTimeout(timer) };
}

const callResult = (code: ErrorCode, message: string): ToolCallResult =>
  Object.freeze({ status: statusOf(code), error: Object.freeze({ code, message }) });

export function createCodeMode<A extends SandboxAdapter>(
  options: CreateCodeModeOptions<A> & { approvals: CodeApprovalsOptions },
): ApprovingCodeMode<A>;
export function createCodeMode<A extends SandboxAdapter>(options: CreateCodeModeOptions<A>): CodeMode<A>;
export function createCodeMode<A extends SandboxAdapter>(
  options: CreateCodeModeOptions<A>,
): CodeMode<A> | ApprovingCodeMode<A> {
  if (typeof options !== "object" || options === null) {
    throw configError("createCodeMode needs { adapter, invokeTool }");
  }
  const unknown = unknownOption(options, "createCodeMode", CREATE_CODE_MODE_KEYS);
  if (unknown !== undefined) throw configError(unknown);
  const { adapter, invokeTool, allowTestAdapter } = options;
  if (!isSandboxAdapter(adapter)) {
    throw configError(
      "createCodeMode accepts only adapters made by defineSandboxAdapter or Airlock's adapter factories",
    );
  }
  if (typeof invokeTool !== "function") throw configError("createCodeMode needs an invokeTool function");
  if (allowTestAdapter !== undefined && typeof allowTestAdapter !== "boolean") {
    throw configError("allowTestAdapter must be a boolean");
  }
  if (adapter.qualification === "test" && allowTestAdapter !== true) {
    throw new AirlockError(
      "UNSUPPORTED_PROFILE",
      "the adapter is qualified 'test' only; pass allowTestAdapter: true to use it for fixtures and experiments",
    );
  }
  const maxToolResultBytes = options.maxToolResultBytes ?? DEFAULT_MAX_TOOL_RESULT_BYTES;
  if (!Number.isSafeInteger(maxToolResultBytes) || maxToolResultBytes < 1) {
    throw configError("maxToolResultBytes must be a positive integer");
  }
  const ids = new ExecutionIds(EXECUTION_ID_MEMORY);
  const approvals = options.approvals === undefined ? undefined : createCallApprovals(options.approvals);

  /** `execute`, or with `resume` set, the continuation of a paused execution. */
  const launch = (
    program: AnyCodeProgram,
    input: unknown,
    executeOptions: CodeExecuteOptions,
    resume: boolean,
  ): Promise<ResumableExecutionOutcome<unknown>> => {
    const maximumCostMicros = isCodeProgram(program) ? program.maximumCostMicros : 0;
    const bare: CodeUsage = Object.freeze({
      toolCalls: 0,
      unknownCalls: 0,
      knownCostMicros: 0,
      unknownCostMicros: 0,
      maximumCostMicros,
    });
    const refuse = (code: ErrorCode, message: string) =>
      Promise.resolve(failed(code, message, undefined, bare) as CodeExecutionOutcome<unknown>);
    let claimed: string | undefined;
    try {
      if (!isCodeProgram(program))
        return refuse("INVALID_CONFIG", "execute accepts only programs made by defineCodeProgram");
      if (typeof executeOptions !== "object" || executeOptions === null) {
        return refuse("INVALID_CONFIG", "execute needs options { runId, executionId, scope }");
      }
      const unknownKey = unknownOption(executeOptions, "execute", EXECUTE_KEYS);
      if (unknownKey !== undefined) return refuse("INVALID_CONFIG", unknownKey);
      // Read once: the caller changing its object later (or a getter answering differently) changes nothing.
      const options: CodeExecuteOptions = { ...executeOptions };
      const { executionId } = options;
      // Call ids are `${executionId}:${n}` and must be ids too.
      const maxChars = MAX_ID_CHARS - 1 - String(program.limits.maxToolCalls).length;
      if (!isId(executionId) || executionId.length > maxChars) {
        return refuse(
          "INVALID_CONFIG",
          `executionId must be a string of 1-${maxChars} characters (its call ids, executionId:n, have at most ${MAX_ID_CHARS})`,
        );
      }
      const durable = program.tools.some((tool) => tool.approval !== "never");
      if (durable && approvals === undefined) {
        return refuse(
          "INVALID_CONFIG",
          "the program has tools that ask for approval: pass approvals to createCodeMode",
        );
      }
      if (resume && !durable) return refuse("INVALID_CONFIG", "only programs with approval tools can be resumed");
      // A resumed execution keeps its id; the journal in the store refuses a second one with it.
      if (!resume && !ids.claim(executionId)) {
        return refuse("CONFLICT", "the executionId is running or was used by a recent execution; use a new one");
      }
      if (!resume) claimed = executionId;
      // The input is copied before execute() returns: the caller changing it later changes nothing.
      const copied = tryCopyJson(input, { maxBytes: program.limits.maxInputBytes });
      if (durable && approvals !== undefined) {
        const scope = copyScope(options.scope);
        if (scope === undefined || !isId(options.runId) || executionId.length > maxChars - RESUME_SUFFIX_CHARS) {
          if (claimed !== undefined) ids.finish(claimed);
          return refuse(
            "INVALID_CONFIG",
            `a resumable execution needs a runId, a scope, and an executionId of at most ${maxChars - RESUME_SUFFIX_CHARS} characters`,
          );
        }
        if (!copied.ok) {
          if (claimed !== undefined) ids.finish(claimed);
          return refuse(copied.error.code, `the input was refused: ${copied.error.message}`);
        }
        const attempt = (attemptAdapter: SandboxAdapter, attemptId: string): Promise<AttemptOutcome> =>
          new Execution(
            program,
            attemptAdapter,
            invokeTool,
            { ...options, executionId: attemptId },
            maximumCostMicros,
            maxToolResultBytes,
          )
            .start(copied)
            .catch(() =>
              failed("OUTCOME_UNKNOWN", "the executor failed; the execution's effects are unknown", undefined, bare),
            ) as Promise<AttemptOutcome>;
        const context = { runId: options.runId, executionId, scope };
        const running = resume
          ? approvals.resume(program, copied.json, context, attempt, adapter)
          : approvals.execute(program, copied.json, context, attempt, adapter);
        return running
          .then((outcome) => withBareUsage(outcome, bare))
          .finally(() => {
            if (claimed !== undefined) ids.finish(claimed);
          });
      }
      const run = new Execution(program, adapter, invokeTool, options, maximumCostMicros, maxToolResultBytes);
      return run
        .start(copied)
        .catch(() =>
          failed("OUTCOME_UNKNOWN", "the executor failed; the execution's effects are unknown", undefined, bare),
        )
        .finally(() => ids.finish(executionId));
    } catch {
      if (claimed !== undefined) ids.finish(claimed);
      return refuse("INVALID_CONFIG", "execute could not read its arguments");
    }
  };

  const execute = (program: AnyCodeProgram, input: unknown, executeOptions: CodeExecuteOptions) =>
    launch(program, input, executeOptions, false);
  const resume = (program: AnyCodeProgram, input: unknown, executeOptions: CodeExecuteOptions) =>
    launch(program, input, executeOptions, true);
  const decide =
    <V extends "approved" | "rejected">(verdict: V) =>
    async (decision: ApprovalDecision): Promise<{ status: V }> => {
      if (approvals === undefined) throw configError("this code mode has no approvals");
      return (await approvals.decide(decision, verdict)) as { status: V };
    };
  return brandCodeMode(
    Object.freeze({ adapter, execute, resume, approve: decide("approved"), reject: decide("rejected") }) as
      | CodeMode<A>
      | ApprovingCodeMode<A>,
  );
}

const NO_EVIDENCE: readonly ExecutionEvidence[] = Object.freeze([]);
/** Characters a resumed attempt adds to its execution id (`/resume-<n>`). */
const RESUME_SUFFIX_CHARS = 16;

/** Outcomes of the approvals layer that never reached the executor carry the program's bare usage. */
function withBareUsage(outcome: AttemptOutcome | WaitingOutcome, bare: CodeUsage): ResumableExecutionOutcome<unknown> {
  const usage = "toolCalls" in outcome.usage ? outcome.usage : bare;
  return Object.freeze({ ...outcome, usage }) as ResumableExecutionOutcome<unknown>;
}

function failed(
  code: ErrorCode,
  message: string,
  programError: ProgramErrorInfo | undefined,
  usage: CodeUsage,
  evidence: readonly ExecutionEvidence[] = NO_EVIDENCE,
): CodeExecutionOutcome<never> {
  const error = Object.freeze({ code, message });
  return Object.freeze(
    programError === undefined
      ? { status: statusOf(code), error, usage, evidence }
      : { status: statusOf(code), error, programError, usage, evidence },
  );
}

/** One execution: the sandbox run, its tool calls, its stops. */
class Execution {
  private readonly controller = new AbortController();
  private stopCause: { code: ErrorCode; message: string } | undefined;
  private ended = false;
  private readonly giveUp: Promise<void>;
  private startGiveUp!: () => void;
  private giveUpTimer: ReturnType<typeof setTimeout> | undefined;
  private readonly calls = new Set<Promise<void>>();
  private attempts = 0;
  private inFlight = 0;
  private readonly waiting: (() => void)[] = [];
  private resultBytes = 0;
  private readonly resultBudget: number;
  private readonly toolsById: Map<string, AnyTool>;
  private scope!: Scope;
  private caller: CallerTools | undefined;
  private readonly usage = { toolCalls: 0, unknownCalls: 0, knownCostMicros: 0, unknownCostMicros: 0 };
  private readonly evidence: ExecutionEvidence[] = [];

  constructor(
    private readonly program: AnyCodeProgram,
    private readonly adapter: SandboxAdapter,
    private readonly invokeTool: CodeModeInvokeTool,
    private readonly options: CodeExecuteOptions,
    private readonly maximumCostMicros: number,
    maxToolResultBytes: number,
  ) {
    this.toolsById = new Map(program.tools.map((tool) => [tool.id, tool]));
    this.resultBudget = Math.min(maxToolResultBytes, program.limits.memoryBytes);
    this.giveUp = new Promise((resolve) => {
      this.startGiveUp = () => {
        this.giveUpTimer = setTimeout(resolve, CALL_SETTLE_GRACE_MS);
      };
    });
  }

  private snapshot(): CodeUsage {
    return Object.freeze({ ...this.usage, maximumCostMicros: this.maximumCostMicros });
  }

  private fail(code: ErrorCode, message: string, programError?: ProgramErrorInfo): CodeExecutionOutcome<never> {
    return failed(code, message, programError, this.snapshot(), Object.freeze([...this.evidence]));
  }

  /** Ends the run early with `code`; the first stop wins. */
  private stop(code: ErrorCode, message: string): void {
    if (this.stopCause !== undefined || this.ended) return;
    this.stopCause = { code, message };
    this.controller.abort();
  }

  async start(copied: ReturnType<typeof tryCopyJson>): Promise<CodeExecutionOutcome<unknown>> {
    const { program, options } = this;
    const { runId, signal, caller } = options;
    if (!isId(runId)) return this.fail("INVALID_CONFIG", `runId must be a string of 1-${MAX_ID_CHARS} characters`);
    const scope = copyScope(options.scope);
    if (scope === undefined) {
      return this.fail("INVALID_CONFIG", "scope must be a small JSON object with a non-empty string principalId");
    }
    this.scope = scope;
    if (signal !== undefined && !(signal instanceof AbortSignal)) {
      return this.fail("INVALID_CONFIG", "signal must be an AbortSignal");
    }
    if (caller !== undefined && !isCallerTools(caller)) {
      return this.fail("INVALID_CONFIG", "caller must be a tool set made by registry.for()");
    }
    this.caller = caller;

    // ---- input ----
    if (!copied.ok) {
      const { code, message } = copied.error;
      return this.fail(
        code,
        `the program input was refused (limit maxInputBytes ${program.limits.maxInputBytes}): ${message}`,
      );
    }
    const parsed = await parseWithSchema(program.input, copied.json.value);
    if (!parsed.ok) return this.fail("INVALID_INPUT", "the input does not match the program's input schema");
    const input = tryCopyJson(parsed.value, { maxBytes: program.limits.maxInputBytes }, { freeze: true });
    if (!input.ok)
      return this.fail("INVALID_INPUT", "the program's input schema produced a value that is not JSON within limits");
    if (signal?.aborted) return this.fail("CANCELLED", "the caller cancelled the execution before it started");

    // ---- the adapter: never a fallback to the host ----
    const available = await this.availability();
    if (!available) {
      return this.fail(
        "UNSUPPORTED_PROFILE",
        "the sandbox adapter is not available; Airlock never runs a program outside its sandbox",
      );
    }
    if (signal?.aborted) return this.fail("CANCELLED", "the caller cancelled the execution before it started");

    // ---- the run ----
    const onAbort = () => this.stop("CANCELLED", "the caller cancelled the execution");
    signal?.addEventListener("abort", onAbort, { once: true });
    const wall = setTimeout(
      () =>
        this.stop("TIMEOUT", `the execution passed its limit wallTimeMillis of ${program.limits.wallTimeMillis} ms`),
      program.limits.wallTimeMillis,
    );
    let result: SandboxResult | undefined;
    let adapterFailed = false;
    const sandboxProgram: SandboxProgram = Object.freeze({
      id: program.id,
      version: program.version,
      digest: program.digest,
      language: program.language,
      source: program.source,
      limits: program.limits,
    });
    const bridge: SandboxToolsBridge = Object.freeze({
      call: (toolId: string, toolInput: unknown, callSignal?: AbortSignal) => this.call(toolId, toolInput, callSignal),
    });
    let stopWait: { promise: Promise<void>; cancel(): void } | undefined;
    let onStop: (() => void) | undefined;
    try {
      let running: Promise<SandboxResult>;
      try {
        running = Promise.resolve(
          this.adapter.execute(
            Object.freeze({
              program: sandboxProgram,
              input: input.json.value,
              inputJson: input.json.canonical,
              tools: bridge,
              signal: this.controller.signal,
            }),
          ),
        );
      } catch (error) {
        running = Promise.reject(error);
      }
      // An adapter that ignores its signal is not waited for beyond a grace period after the stop.
      const stopped = new Promise<"stopped">((resolve) => {
        onStop = () => {
          stopWait = delay(ADAPTER_STOP_GRACE_MS);
          stopWait.promise.then(() => resolve("stopped"));
        };
        if (this.controller.signal.aborted) onStop();
        else this.controller.signal.addEventListener("abort", onStop, { once: true });
      });
      const answer = await Promise.race([running.then((value) => ({ value }) as const), stopped]);
      if (answer === "stopped") adapterFailed = true;
      else result = answer.value;
    } catch {
      adapterFailed = true;
    } finally {
      clearTimeout(wall);
      if (onStop !== undefined) this.controller.signal.removeEventListener("abort", onStop);
      stopWait?.cancel();
      signal?.removeEventListener("abort", onAbort);
    }

    // ---- every call settles (or is given up as unknown) before the outcome ----
    this.ended = true;
    this.controller.abort();
    this.startGiveUp();
    await Promise.all([...this.calls]);
    if (this.giveUpTimer !== undefined) clearTimeout(this.giveUpTimer);

    return this.decide(result, adapterFailed);
  }

  private async availability(): Promise<boolean> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    try {
      const timeout = new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(false), AVAILABILITY_TIMEOUT_MS);
      });
      return (await Promise.race([Promise.resolve(this.adapter.isAvailable()), timeout])) === true;
    } catch {
      return false;
    } finally {
      clearTimeout(timer);
    }
  }

  private async decide(
    result: SandboxResult | undefined,
    adapterFailed: boolean,
  ): Promise<CodeExecutionOutcome<unknown>> {
    const limits = this.program.limits;
    const programError =
      result !== undefined && result.status === "failed" ? clipProgramError(result.programError) : undefined;
    if (this.usage.unknownCalls > 0) {
      return this.fail(
        "OUTCOME_UNKNOWN",
        "the outcome of a tool call is unknown, so the effects of the execution are unknown",
        programError,
      );
    }
    if (this.stopCause !== undefined) return this.fail(this.stopCause.code, this.stopCause.message);
    if (adapterFailed || result === undefined || typeof result !== "object" || result === null) {
      return this.fail("TOOL_FAILED", "the sandbox failed or gave no answer");
    }
    if (result.status === "failed") {
      const reason =
        result.reason === undefined
          ? programError !== undefined
            ? "program_error"
            : "sandbox_error"
          : SANDBOX_FAILURE_REASONS.includes(result.reason)
            ? result.reason
            : "sandbox_error";
      switch (reason) {
        case "program_error":
          return this.fail("TOOL_FAILED", "the program threw an error (see programError)", programError);
        case "cpu_limit":
          return this.fail(
            "LIMIT_EXCEEDED",
            `the program computed longer than its limit cpuMillis of ${limits.cpuMillis} ms`,
          );
        case "memory_limit":
          return this.fail(
            "LIMIT_EXCEEDED",
            `the program ran out of memory at its limit memoryBytes of ${limits.memoryBytes} bytes`,
          );
        case "invalid_output":
          return this.fail("INVALID_OUTPUT", "the program returned a value that is not JSON");
        case "unsupported_program":
          return this.fail("UNSUPPORTED_PROFILE", "the sandbox adapter cannot run this program");
        default:
          return this.fail("TOOL_FAILED", "the sandbox failed");
      }
    }
    if (result.status !== "succeeded")
      return this.fail("TOOL_FAILED", "the sandbox gave an answer Airlock cannot read");

    // ---- output: JSON within limits, then the output schema ----
    const bounds = { maxBytes: limits.maxOutputBytes };
    let output: JsonValue;
    try {
      if ("outputJson" in result) {
        if (typeof result.outputJson !== "string")
          return this.fail("TOOL_FAILED", "the sandbox gave an answer Airlock cannot read");
        output = parseJson(result.outputJson, bounds).value;
      } else {
        const copied = tryCopyJson(result.output, bounds);
        if (!copied.ok) throw copied.error;
        output = copied.json.value;
      }
    } catch (error) {
      const { code, message } = error as { code?: string; message?: string };
      if (code === "LIMIT_EXCEEDED") {
        return this.fail(
          "LIMIT_EXCEEDED",
          `the program's output breaks a limit (maxOutputBytes ${limits.maxOutputBytes}): ${message}`,
        );
      }
      return this.fail("INVALID_OUTPUT", "the program returned a value that is not JSON");
    }
    const parsed = await parseWithSchema(this.program.output, output);
    if (!parsed.ok) return this.fail("INVALID_OUTPUT", "the program's output does not match its output schema");
    return Object.freeze({
      status: "succeeded" as const,
      output: parsed.value,
      usage: this.snapshot(),
      evidence: Object.freeze([...this.evidence]),
    });
  }

  // ---- tool calls ----

  private call(toolId: unknown, rawInput: unknown, callSignal?: AbortSignal): Promise<ToolCallResult> {
    if (this.ended || this.controller.signal.aborted) {
      return Promise.resolve(callResult("CANCELLED", "the execution has ended"));
    }
    const limits = this.program.limits;
    this.attempts += 1;
    if (this.attempts > limits.maxToolCalls) {
      return Promise.resolve(
        callResult(
          "LIMIT_EXCEEDED",
          `the program made more tool calls than its limit maxToolCalls of ${limits.maxToolCalls}`,
        ),
      );
    }
    const tool = typeof toolId === "string" ? this.toolsById.get(toolId) : undefined;
    if (tool === undefined) {
      return Promise.resolve(callResult("PERMISSION_DENIED", "the program called a tool that is not in its tool list"));
    }
    if (this.caller !== undefined && !this.caller.has(tool)) {
      return Promise.resolve(callResult("PERMISSION_DENIED", "the tool is not available to this caller"));
    }
    const copied = tryCopyJson(rawInput, { maxBytes: limits.maxToolInputBytes }, { freeze: true });
    if (!copied.ok) {
      const { code, message } = copied.error;
      return Promise.resolve(
        callResult(
          code,
          `the tool input was refused (limit maxToolInputBytes ${limits.maxToolInputBytes}): ${message}`,
        ),
      );
    }
    const tracked = this.runCall(tool, copied.json.value, callSignal);
    const settled = tracked.then(
      () => {},
      () => {},
    );
    this.calls.add(settled);
    settled.then(() => this.calls.delete(settled));
    return tracked;
  }

  private async runCall(tool: AnyTool, input: JsonValue, callSignal: AbortSignal | undefined): Promise<ToolCallResult> {
    const signals = [this.controller.signal];
    if (callSignal instanceof AbortSignal) signals.push(callSignal);
    const signal = signals.length === 1 ? this.controller.signal : AbortSignal.any(signals);
    // maxToolConcurrency: wait for a free slot (a finishing call hands its slot to the first waiter).
    if (this.inFlight >= this.program.limits.maxToolConcurrency) {
      const admitted = await new Promise<boolean>((resolve) => {
        const wake = () => {
          signal.removeEventListener("abort", onAbort);
          resolve(true);
        };
        const onAbort = () => {
          const index = this.waiting.indexOf(wake);
          if (index >= 0) this.waiting.splice(index, 1);
          resolve(false);
        };
        this.waiting.push(wake);
        if (signal.aborted) onAbort();
        else signal.addEventListener("abort", onAbort, { once: true });
      });
      if (!admitted) return callResult("CANCELLED", "the call was cancelled before it started");
    } else {
      this.inFlight += 1;
    }
    try {
      if (signal.aborted) return callResult("CANCELLED", "the call was cancelled before it started");
      this.usage.toolCalls += 1;
      const callId = `${this.options.executionId}:${this.usage.toolCalls}`;
      const context: CodeToolCallContext = Object.freeze({
        runId: this.options.runId,
        callId,
        executionId: this.options.executionId,
        scope: this.scope,
        signal,
        programId: this.program.id,
        programDigest: this.program.digest,
        caller: this.caller,
      });
      let pending: Promise<unknown>;
      try {
        pending = Promise.resolve(this.invokeTool(tool, input, context));
      } catch (error) {
        pending = Promise.reject(error);
      }
      const answer = await Promise.race([
        pending.then(
          (value) => ({ kind: "answer" as const, value }),
          () => ({ kind: "threw" as const }),
        ),
        this.giveUp.then(() => ({ kind: "gave_up" as const })),
      ]);
      if (answer.kind !== "answer") {
        this.evidence.push(Object.freeze({ runId: this.options.runId, receipt: unknownReceipt(callId, tool.id) }));
        return this.unknown(tool.costMicros);
      }
      const seen: { status?: unknown } = {};
      const result = this.accept(tool, answer.value, seen);
      const receipt = receiptOf(callId, tool.id, seen.status, costOfOutcome(answer.value) !== undefined, result);
      this.evidence.push(Object.freeze({ runId: this.options.runId, receipt }));
      return result;
    } finally {
      this.releaseSlot();
    }
  }

  private releaseSlot(): void {
    const next = this.waiting.shift();
    if (next !== undefined) next();
    else this.inFlight -= 1;
  }

  private unknown(unknownMicros: number): ToolCallResult {
    this.usage.unknownCalls += 1;
    this.usage.unknownCostMicros += unknownMicros;
    return callResult("OUTCOME_UNKNOWN", "the outcome of the tool call is unknown");
  }

  /** Checks the broker's outcome and hands the program a JSON copy, within the response budget. */
  private accept(tool: AnyTool, value: unknown, seen: { status?: unknown }): ToolCallResult {
    const recorded = costOfOutcome(value);
    if (typeof value !== "object" || value === null) return this.unknown(tool.costMicros);
    // Each field is read once, here: a getter that throws (or answers differently the second time) makes the
    // outcome unknown, as a broker that throws does, and its error never reaches the program.
    let status: unknown;
    let output: unknown;
    let error: { code?: unknown; message?: unknown } | undefined;
    try {
      status = (value as { status?: unknown }).status;
      seen.status = status;
      if (status === "succeeded") output = (value as { output?: unknown }).output;
      else {
        const found = (value as { error?: unknown }).error as { code?: unknown; message?: unknown } | undefined;
        error = found === undefined || found === null ? undefined : { code: found.code, message: found.message };
      }
    } catch {
      return this.unknown(tool.costMicros);
    }
    let result: ToolCallResult;
    if (status === "succeeded") {
      const remaining = Math.max(1, this.resultBudget - this.resultBytes);
      const copied = tryCopyJson(output, { maxBytes: remaining }, { freeze: true });
      this.usage.knownCostMicros += recorded?.spentMicros ?? tool.costMicros;
      if (!copied.ok) {
        if (copied.error.rule === "bytes") {
          this.stop(
            "LIMIT_EXCEEDED",
            `tool results passed the execution's response budget of ${this.resultBudget} bytes`,
          );
          return callResult("CANCELLED", "the execution was stopped");
        }
        result = callResult(
          copied.error.code === "LIMIT_EXCEEDED" ? "LIMIT_EXCEEDED" : "INVALID_OUTPUT",
          `the tool's output was refused: ${copied.error.message}`,
        );
      } else {
        this.resultBytes += copied.json.bytes;
        result = Object.freeze({ status: "succeeded" as const, output: copied.json.value });
      }
    } else {
      const code = error?.code;
      if (
        (status !== "failed" && status !== "blocked" && status !== "cancelled" && status !== "outcome_unknown") ||
        !isErrorCode(code) ||
        statusOf(code) !== status
      ) {
        return this.unknown(tool.costMicros);
      }
      if (status === "outcome_unknown") return this.unknown(recorded?.unknownMicros ?? tool.costMicros);
      this.usage.knownCostMicros += recorded?.spentMicros ?? 0;
      const message = typeof error?.message === "string" ? clip(error.message, MAX_CALL_ERROR_MESSAGE_CHARS) : "";
      this.resultBytes += message.length + code.length + 64;
      if (this.resultBytes > this.resultBudget) {
        this.stop(
          "LIMIT_EXCEEDED",
          `tool results passed the execution's response budget of ${this.resultBudget} bytes`,
        );
        return callResult("CANCELLED", "the execution was stopped");
      }
      result = Object.freeze({ status, error: Object.freeze({ code, message }) });
    }
    return result;
  }
}
