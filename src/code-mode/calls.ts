/**
 * The tool calls of one execution: what the program's `tools.call(toolId, input)` goes through on the host. Each call
 * is checked (the call limit, the program's tool list, the caller's set, the input as JSON within maxToolInputBytes),
 * waits for a slot under maxToolConcurrency, goes to the host's broker with the trusted context, and its outcome is
 * read once and handed to the program as a JSON copy within the execution's response budget. A call whose outcome
 * cannot be known (the broker threw, answered something unreadable, or did not settle in time after the execution
 * ended) is counted as unknown. Once the execution was stopped or ended, a retained bridge answers every call with the
 * stop's code (TIMEOUT, CANCELLED, LIMIT_EXCEEDED) or CONFLICT, and nothing reaches the broker. Every call handed to
 * the broker leaves a receipt (evidence.ts), in the order they were handed over.
 */
import { type JsonValue, tryCopyJson } from "../json/index.ts";
import type { AnyTool, Scope } from "../tools/define.ts";
import { type ErrorCode, isErrorCode, type Outcome, statusOf } from "../tools/errors.ts";
import { costOfOutcome } from "../tools/invoke.ts";
import type { CallerTools } from "../tools/registry.ts";
import { traceRunCall } from "../tracing/index.ts";
import type { ToolCallResult } from "./adapter.ts";
import { type ExecutionEvidence, receiptOf, unknownReceipt } from "./evidence.ts";
import { clip } from "./outcome.ts";
import type { AnyCodeProgram } from "./program.ts";

/** Characters of a tool call's error message handed to the program. */
export const MAX_CALL_ERROR_MESSAGE_CHARS = 1_024;
/** Default total bytes of tool results one execution may receive (never more than the program's memoryBytes). */
export const DEFAULT_MAX_TOOL_RESULT_BYTES = 16 * 1024 * 1024;
/** Between an execution's id and a call's number in the call's id, as in Mayura: `<executionId>:code:<n>`. */
export const CALL_ID_INFIX = ":code:";
/** Time the broker has to settle the calls of an execution after it ended, before they count as unknown. */
export const CALL_SETTLE_GRACE_MS = 2_000;

export interface CodeToolCallContext {
  readonly runId: string;
  /** `<executionId>:code:<n>` (Mayura's form), n counting the calls handed to the broker from 1. */
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

/** What the calls need to know of their execution. */
export interface ToolCallsOptions {
  readonly program: AnyCodeProgram;
  readonly invokeTool: CodeModeInvokeTool;
  readonly runId: string;
  readonly executionId: string;
  readonly scope: Scope;
  readonly caller: CallerTools | undefined;
  /** Total bytes of tool results the execution may receive. */
  readonly resultBudget: number;
  /** Aborts when the execution ends or is stopped: every call's signal follows it. */
  readonly signal: AbortSignal;
  /** Stops the execution (the response budget ran out). */
  stop(code: ErrorCode, message: string): void;
  /** The execution these calls belong to, whose trace (if any) gets a span per call. */
  readonly traced: object;
}

export interface CallUsage {
  toolCalls: number;
  unknownCalls: number;
  knownCostMicros: number;
  unknownCostMicros: number;
}

export const callResult = (code: ErrorCode, message: string): ToolCallResult =>
  Object.freeze({ status: statusOf(code), error: Object.freeze({ code, message }) });

export class ToolCalls {
  readonly usage: CallUsage = { toolCalls: 0, unknownCalls: 0, knownCostMicros: 0, unknownCostMicros: 0 };
  /** A receipt per call handed to the broker, once the broker answered or was given up. */
  readonly evidence: ExecutionEvidence[] = [];
  /** Why no call starts any more: the execution's stop, or its end. */
  private closed: ToolCallResult | undefined;
  private readonly giveUp: Promise<void>;
  private startGiveUp!: () => void;
  private giveUpTimer: ReturnType<typeof setTimeout> | undefined;
  private readonly pending = new Set<Promise<void>>();
  private attempts = 0;
  private inFlight = 0;
  private readonly waiting: (() => void)[] = [];
  private resultBytes = 0;
  private readonly toolsById: Map<string, AnyTool>;

  constructor(private readonly options: ToolCallsOptions) {
    this.toolsById = new Map(options.program.tools.map((tool) => [tool.id, tool]));
    this.giveUp = new Promise((resolve) => {
      this.startGiveUp = () => {
        this.giveUpTimer = setTimeout(resolve, CALL_SETTLE_GRACE_MS);
      };
    });
  }

  /** No call starts from now on: each is answered with `code` (the first close wins). */
  close(code: ErrorCode, message: string): void {
    this.closed ??= callResult(code, message);
  }

  /**
   * The execution ended: no call starts from now on (CONFLICT, unless it was stopped); resolves once every call
   * started has settled, or was given up as unknown after `CALL_SETTLE_GRACE_MS`.
   */
  async end(): Promise<void> {
    this.close("CONFLICT", "the execution has ended; it accepts no more tool calls");
    this.startGiveUp();
    await Promise.all([...this.pending]);
    if (this.giveUpTimer !== undefined) clearTimeout(this.giveUpTimer);
  }

  call(toolId: unknown, rawInput: unknown, callSignal?: AbortSignal): Promise<ToolCallResult> {
    if (this.closed !== undefined) return Promise.resolve(this.closed);
    const limits = this.options.program.limits;
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
    const { caller } = this.options;
    if (caller !== undefined && !caller.has(tool)) {
      return Promise.resolve(callResult("PERMISSION_DENIED", "the tool is not available to this caller"));
    }
    // Refused before the broker: not JSON, over maxToolInputBytes, or a `__proto__` key.
    const copied = tryCopyJson(rawInput, { maxBytes: limits.maxToolInputBytes }, { freeze: true });
    if (!copied.ok) {
      return Promise.resolve(
        callResult(
          "INVALID_INPUT",
          `the tool input was refused (limit maxToolInputBytes ${limits.maxToolInputBytes}): ${copied.error.message}`,
        ),
      );
    }
    const tracked = this.run(tool, copied.json.value, callSignal);
    const settled = tracked.then(
      () => {},
      () => {},
    );
    this.pending.add(settled);
    settled.then(() => this.pending.delete(settled));
    return tracked;
  }

  private async run(tool: AnyTool, input: JsonValue, callSignal: AbortSignal | undefined): Promise<ToolCallResult> {
    const { options } = this;
    const signals = [options.signal];
    if (callSignal instanceof AbortSignal) signals.push(callSignal);
    const signal = signals.length === 1 ? options.signal : AbortSignal.any(signals);
    // maxToolConcurrency: wait for a free slot (a finishing call hands its slot to the first waiter).
    if (this.inFlight >= options.program.limits.maxToolConcurrency) {
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
      const callId = `${options.executionId}${CALL_ID_INFIX}${this.usage.toolCalls}`;
      const context: CodeToolCallContext = Object.freeze({
        runId: options.runId,
        callId,
        executionId: options.executionId,
        scope: options.scope,
        signal,
        programId: options.program.id,
        programDigest: options.program.digest,
        caller: options.caller,
      });
      let pending: Promise<unknown>;
      try {
        pending = traceRunCall(options.traced, tool.id, input, () => options.invokeTool(tool, input, context));
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
        this.evidence.push(Object.freeze({ runId: options.runId, receipt: unknownReceipt(callId, tool.id) }));
        return this.unknown(tool.costMicros);
      }
      const seen: { status?: unknown } = {};
      const result = this.accept(tool, answer.value, seen);
      const receipt = receiptOf(callId, tool.id, seen.status, costOfOutcome(answer.value) !== undefined, result);
      this.evidence.push(Object.freeze({ runId: options.runId, receipt }));
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

  private overBudget(): ToolCallResult {
    const message = `tool results passed the execution's response budget of ${this.options.resultBudget} bytes`;
    this.options.stop("LIMIT_EXCEEDED", message);
    return callResult("LIMIT_EXCEEDED", message);
  }

  /**
   * Checks the broker's outcome and hands the program a JSON copy, within the response budget. `seen.status` gets the
   * status the broker's outcome had, for the call's receipt.
   */
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
    const { resultBudget } = this.options;
    if (status === "succeeded") {
      const remaining = Math.max(1, resultBudget - this.resultBytes);
      const copied = tryCopyJson(output, { maxBytes: remaining }, { freeze: true });
      this.usage.knownCostMicros += recorded?.spentMicros ?? tool.costMicros;
      if (!copied.ok) {
        if (copied.error.rule === "bytes") return this.overBudget();
        return callResult("INVALID_OUTPUT", `the tool's output was refused: ${copied.error.message}`);
      }
      this.resultBytes += copied.json.bytes;
      return Object.freeze({ status: "succeeded" as const, output: copied.json.value });
    }
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
    if (this.resultBytes > resultBudget) return this.overBudget();
    return Object.freeze({ status, error: Object.freeze({ code, message }) });
  }
}
