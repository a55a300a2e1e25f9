/**
 * The executor: `createCodeMode({ adapter, invokeTool })` runs programs on a sandbox adapter and sends every tool call
 * the program makes back through the host's broker (calls.ts). `execute()` never throws; it returns an outcome with a
 * public error code and usage (outcome.ts), and only after every tool call it started has settled (or was given up as
 * unknown).
 *
 * How an execution ends, in order of precedence:
 * 1. a tool call whose outcome is unknown makes it `outcome_unknown`, whatever the program returned;
 * 2. a stop the executor made: the caller's signal (CANCELLED), the wall clock (TIMEOUT), the response budget
 *    (LIMIT_EXCEEDED);
 * 3. the sandbox's answer: the program threw (TOOL_FAILED with `programError`), a CPU or memory limit
 *    (LIMIT_EXCEEDED), an output that is not JSON or does not match the output schema (INVALID_OUTPUT), ...
 *
 * A code mode made with `approvals` runs programs whose tools may ask a person (code-mode/approvals/call-approvals.ts): each run of such a
 * program is an attempt of this executor on an adapter the approvals layer wraps with its journal.
 */
import type { z } from "zod";
import { tryCopyJson } from "../json/index.ts";
import { booleanOption, integerOption, optionKeys, refuseUnknownOptions, unknownOption } from "../platform/options.ts";
import type { Scope } from "../tools/define.ts";
import { AirlockError, CONFIG_OPTION_ERRORS, configError, type ErrorCode } from "../tools/errors.ts";
import { copyScope, isId, MAX_ID_CHARS } from "../tools/invoke.ts";
import { type CallerTools, isCallerTools } from "../tools/registry.ts";
import { parseWithSchema } from "../tools/validate.ts";
import { traceRun } from "../tracing/index.ts";
import {
  availabilityCheckOf,
  isSandboxAdapter,
  type SandboxAdapter,
  type SandboxProgram,
  type SandboxResult,
  type SandboxToolsBridge,
} from "./adapter.ts";
import type { AttemptOutcome, WaitingOutcome } from "./approvals/attempt-outcome.ts";
import { type CodeApprovalsOptions, createCallApprovals } from "./approvals/call-approvals.ts";
import type { CallApproval } from "./approvals/call-journal.ts";
import type { ApprovalDecision } from "./approvals/decisions.ts";
import { CALL_ID_INFIX, type CodeModeInvokeTool, DEFAULT_MAX_TOOL_RESULT_BYTES, ToolCalls } from "./calls.ts";
import { brandCodeMode, type ExecutionEvidence } from "./evidence.ts";
import { EXECUTION_ID_MEMORY, ExecutionIds } from "./execution-ids.ts";
import {
  type AdmittedAnswer,
  admitAnswer,
  type CodeExecutionOutcome,
  type CodeUsage,
  failed,
  outcomeOfAnswer,
} from "./outcome.ts";
import { type AnyCodeProgram, type CodeProgram, isCodeProgram } from "./program.ts";

/** Time an adapter has to return after the executor stopped its execution, before the executor stops waiting. */
export const ADAPTER_STOP_GRACE_MS = 2_000;
/** Time an adapter's `isAvailable()` has to answer. */
export const AVAILABILITY_TIMEOUT_MS = 5_000;

export interface CreateCodeModeOptions<A extends SandboxAdapter = SandboxAdapter> {
  adapter: A;
  invokeTool: CodeModeInvokeTool;
  /** Accept an adapter declared `qualification: 'test'`. */
  allowTestAdapter?: boolean;
  /** Total bytes of tool results one execution may receive; default `DEFAULT_MAX_TOOL_RESULT_BYTES`. */
  maxToolResultBytes?: number;
  /** Lets programs pause at calls of tools with `approval` until a person decides (see code-mode/approvals/call-approvals.ts). */
  approvals?: CodeApprovalsOptions;
}

export interface CodeExecuteOptions {
  runId: string;
  /** New for every execution: one that is running or among the last `EXECUTION_ID_MEMORY` finished is CONFLICT. */
  executionId: string;
  /** Trusted: whose data the tools touch. The program cannot see or change it. */
  scope: Scope;
  /** Required: ends the execution (CANCELLED) when it aborts. Pass `AbortSignal.timeout(ms)` for a deadline. */
  signal: AbortSignal;
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

export interface CodeMode<A extends SandboxAdapter = SandboxAdapter> {
  readonly adapter: A;
  execute<I extends z.ZodType, O extends z.ZodType>(
    program: CodeProgram<I, O>,
    input: unknown,
    options: CodeExecuteOptions,
  ): Promise<CodeExecutionOutcome<z.output<O>>>;
}

/** The program reached a call a person must approve: `approve` or `reject` it, then `resume`. */
export interface CodeWaitingOutcome {
  readonly status: "waiting";
  readonly approval: CallApproval;
  readonly usage: CodeUsage;
  readonly evidence: readonly ExecutionEvidence[];
}

/** What an execution of a code mode with approvals ends with. */
export type ResumableExecutionOutcome<T> = CodeExecutionOutcome<T> | CodeWaitingOutcome;

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

/** Characters a resumed attempt adds to its execution id (`/resume-<n>`). */
const RESUME_SUFFIX_CHARS = 16;

function delay(ms: number): { promise: Promise<void>; cancel(): void } {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const promise = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, ms);
  });
  return { promise, cancel: () => clearTimeout(timer) };
}

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
  refuseUnknownOptions(options, "createCodeMode", CREATE_CODE_MODE_KEYS, CONFIG_OPTION_ERRORS);
  const { adapter, invokeTool, allowTestAdapter } = options;
  if (!isSandboxAdapter(adapter)) {
    throw configError(
      "createCodeMode accepts only adapters made by defineSandboxAdapter or Airlock's adapter factories",
    );
  }
  if (typeof invokeTool !== "function") throw configError("createCodeMode needs an invokeTool function");
  booleanOption(allowTestAdapter, "allowTestAdapter", CONFIG_OPTION_ERRORS);
  if (adapter.qualification === "test" && allowTestAdapter !== true) {
    throw new AirlockError(
      "UNSUPPORTED_PROFILE",
      "the adapter is qualified 'test' only; pass allowTestAdapter: true to use it for fixtures and experiments",
    );
  }
  const maxToolResultBytes =
    integerOption(options.maxToolResultBytes, "maxToolResultBytes", 1, Infinity, CONFIG_OPTION_ERRORS) ??
    DEFAULT_MAX_TOOL_RESULT_BYTES;
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
        return refuse("INVALID_CONFIG", "execute needs options { runId, executionId, scope, signal }");
      }
      const unknownKey = unknownOption(executeOptions, "execute", EXECUTE_KEYS);
      if (unknownKey !== undefined) return refuse("INVALID_CONFIG", unknownKey);
      // Read once: the caller changing its object later (or a getter answering differently) changes nothing.
      const options: CodeExecuteOptions = { ...executeOptions };
      const { executionId } = options;
      // Call ids are `${executionId}:code:${n}` and must be ids too.
      const maxChars = MAX_ID_CHARS - CALL_ID_INFIX.length - String(program.limits.maxToolCalls).length;
      if (!isId(executionId) || executionId.length > maxChars) {
        return refuse(
          "INVALID_CONFIG",
          `executionId must be a string of 1-${maxChars} characters (its call ids, executionId${CALL_ID_INFIX}n, have at most ${MAX_ID_CHARS})`,
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
      const finish = () => {
        if (claimed !== undefined) ids.finish(claimed);
      };
      // The input is copied before execute() returns: the caller changing it later changes nothing.
      const copied = tryCopyJson(input, { maxBytes: program.limits.maxInputBytes });
      const attributes = { "airlock.program.id": program.id, "airlock.program.digest": program.digest };
      /** One run of the executor: the whole execution, or one attempt of a resumable one. */
      const attempt = (attemptAdapter: SandboxAdapter, attemptOptions: CodeExecuteOptions) => {
        const run = new Execution(
          program,
          attemptAdapter,
          invokeTool,
          attemptOptions,
          maximumCostMicros,
          maxToolResultBytes,
        );
        return traceRun(run, "airlock.code_mode.execute", attributes, () => run.start(copied)).catch(() =>
          failed("OUTCOME_UNKNOWN", "the executor failed; the execution's effects are unknown", undefined, bare),
        );
      };
      if (!durable || approvals === undefined) return attempt(adapter, options).finally(finish);
      const scope = copyScope(options.scope);
      if (scope === undefined || !isId(options.runId) || executionId.length > maxChars - RESUME_SUFFIX_CHARS) {
        finish();
        return refuse(
          "INVALID_CONFIG",
          `a resumable execution needs a runId, a scope, and an executionId of at most ${maxChars - RESUME_SUFFIX_CHARS} characters`,
        );
      }
      if (!copied.ok) {
        finish();
        return refuse(copied.error.code, `the input was refused: ${copied.error.message}`);
      }
      const context = { runId: options.runId, executionId, scope };
      const runAttempt = (attemptAdapter: SandboxAdapter, attemptId: string) =>
        attempt(attemptAdapter, { ...options, executionId: attemptId }) as Promise<AttemptOutcome>;
      const running = resume
        ? approvals.resume(program, copied.json, context, runAttempt, adapter)
        : approvals.execute(program, copied.json, context, runAttempt, adapter);
      return running.then((outcome) => withBareUsage(outcome, bare)).finally(finish);
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

/** Outcomes of the approvals layer that never reached the executor carry the program's bare usage. */
function withBareUsage(outcome: AttemptOutcome | WaitingOutcome, bare: CodeUsage): ResumableExecutionOutcome<unknown> {
  const usage = "toolCalls" in outcome.usage ? outcome.usage : bare;
  return Object.freeze({ ...outcome, usage }) as ResumableExecutionOutcome<unknown>;
}

/** One execution: its checks, the sandbox run, its stops, and the outcome once every call settled. */
class Execution {
  private readonly controller = new AbortController();
  private stopCause: { code: ErrorCode; message: string } | undefined;
  private ended = false;
  private calls: ToolCalls | undefined;

  constructor(
    private readonly program: AnyCodeProgram,
    private readonly adapter: SandboxAdapter,
    private readonly invokeTool: CodeModeInvokeTool,
    private readonly options: CodeExecuteOptions,
    private readonly maximumCostMicros: number,
    private readonly maxToolResultBytes: number,
  ) {}

  private snapshot(): CodeUsage {
    const usage = this.calls?.usage ?? { toolCalls: 0, unknownCalls: 0, knownCostMicros: 0, unknownCostMicros: 0 };
    return Object.freeze({ ...usage, maximumCostMicros: this.maximumCostMicros });
  }

  /** The receipts of the calls so far, as a frozen copy. */
  private receipts(): readonly ExecutionEvidence[] {
    return Object.freeze([...(this.calls?.evidence ?? [])]);
  }

  private fail(code: ErrorCode, message: string): CodeExecutionOutcome<never> {
    return failed(code, message, undefined, this.snapshot(), this.receipts());
  }

  /** Ends the run early with `code`; the first stop wins. A bridge the program kept answers its calls with `code`. */
  private stop(code: ErrorCode, message: string): void {
    if (this.stopCause !== undefined || this.ended) return;
    this.stopCause = { code, message };
    this.calls?.close(code, `${message}; the execution accepts no more tool calls`);
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
    if (!(signal instanceof AbortSignal)) {
      // Required, as in Mayura: an execution nobody can cancel would hold its tools until its wall-clock limit.
      return this.fail("INVALID_CONFIG", "execute options need signal to be an AbortSignal");
    }
    if (caller !== undefined && !isCallerTools(caller)) {
      return this.fail("INVALID_CONFIG", "caller must be a tool set made by registry.for()");
    }
    const calls = new ToolCalls({
      program,
      invokeTool: this.invokeTool,
      runId,
      executionId: options.executionId,
      scope,
      caller,
      resultBudget: Math.min(this.maxToolResultBytes, program.limits.memoryBytes),
      signal: this.controller.signal,
      stop: (code, message) => this.stop(code, message),
      traced: this,
    });
    this.calls = calls;

    // ---- input: JSON within maxInputBytes (no `__proto__` keys), then the input schema ----
    if (!copied.ok) {
      return this.fail(
        "INVALID_INPUT",
        `the program input was refused (limit maxInputBytes ${program.limits.maxInputBytes}): ${copied.error.message}`,
      );
    }
    const parsed = await parseWithSchema(program.input, copied.json.value);
    if (!parsed.ok) return this.fail("INVALID_INPUT", "the input does not match the program's input schema");
    const input = tryCopyJson(parsed.value, { maxBytes: program.limits.maxInputBytes }, { freeze: true });
    if (!input.ok)
      return this.fail("INVALID_INPUT", "the program's input schema produced a value that is not JSON within limits");
    if (signal.aborted) return this.fail("CANCELLED", "the caller cancelled the execution before it started");

    // ---- the adapter: never a fallback to the host ----
    const unavailable = await this.unavailability();
    if (unavailable !== undefined) {
      return this.fail(
        "UNSUPPORTED_PROFILE",
        `the sandbox adapter is not available${unavailable === "" ? "" : ` (${unavailable})`}; Airlock never runs a program outside its sandbox`,
      );
    }
    if (!this.adapter.languages.includes(program.language)) {
      return this.fail(
        "UNSUPPORTED_PROFILE",
        `the sandbox adapter does not run ${program.language} programs (its languages are ${this.adapter.languages.join(", ")}); Airlock never runs a program outside its sandbox`,
      );
    }
    if (signal.aborted) return this.fail("CANCELLED", "the caller cancelled the execution before it started");

    // ---- the run ----
    const onAbort = () => this.stop("CANCELLED", "the caller cancelled the execution");
    signal.addEventListener("abort", onAbort, { once: true });
    const wall = setTimeout(
      () =>
        this.stop("TIMEOUT", `the execution passed its limit wallTimeMillis of ${program.limits.wallTimeMillis} ms`),
      program.limits.wallTimeMillis,
    );
    // Read once, as soon as it comes: what the program returned, or why it failed.
    let answer: AdmittedAnswer | undefined;
    const sandboxProgram: SandboxProgram = Object.freeze({
      id: program.id,
      version: program.version,
      digest: program.digest,
      language: program.language,
      source: program.source,
      javascript: program.javascript,
      approvedImports: program.approvedImports,
      limits: program.limits,
    });
    const bridge: SandboxToolsBridge = Object.freeze({
      call: (toolId: string, toolInput: unknown, callSignal?: AbortSignal) => calls.call(toolId, toolInput, callSignal),
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
      const settled = await Promise.race([running.then((value) => ({ value }) as const), stopped]);
      if (settled !== "stopped") answer = admitAnswer(settled.value);
    } catch {
      answer = undefined;
    } finally {
      clearTimeout(wall);
      if (onStop !== undefined) this.controller.signal.removeEventListener("abort", onStop);
      stopWait?.cancel();
      signal.removeEventListener("abort", onAbort);
    }

    // ---- every call settles (or is given up as unknown) before the outcome ----
    this.ended = true;
    this.controller.abort();
    await calls.end();
    return this.decide(answer);
  }

  /**
   * Undefined when the adapter can run the program now; otherwise why not: Airlock's own adapters say why, in
   * Airlock's words, and any other gives "".
   */
  private async unavailability(): Promise<string | undefined> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const check = availabilityCheckOf(this.adapter);
    try {
      const timeout = new Promise<string>((resolve) => {
        timer = setTimeout(
          () => resolve(`it did not say within ${AVAILABILITY_TIMEOUT_MS} ms whether it is available`),
          AVAILABILITY_TIMEOUT_MS,
        );
      });
      const answer =
        check !== undefined
          ? check()
          : Promise.resolve(this.adapter.isAvailable()).then((ok) => (ok === true ? undefined : ""));
      return await Promise.race([answer, timeout]);
    } catch {
      return "";
    } finally {
      clearTimeout(timer);
    }
  }

  /** The outcome, in the order of precedence of the module's documentation. */
  private decide(answer: AdmittedAnswer | undefined): Promise<CodeExecutionOutcome<unknown>> {
    if (this.snapshot().unknownCalls > 0) {
      const programError = answer?.status === "failed" ? answer.programError : undefined;
      return Promise.resolve(
        failed(
          "OUTCOME_UNKNOWN",
          "the outcome of a tool call is unknown, so the effects of the execution are unknown",
          programError,
          this.snapshot(),
          this.receipts(),
        ),
      );
    }
    if (this.stopCause !== undefined) return Promise.resolve(this.fail(this.stopCause.code, this.stopCause.message));
    return outcomeOfAnswer(this.program, answer, () => this.snapshot(), this.receipts());
  }
}
