/**
 * Receipts: what is known of each tool call an execution handed to the broker, so that an audit record can say which
 * effects happened without holding their data. `execution` is what the tool did as far as anyone can know;
 * `disclosure` whether its output reached the program.
 */
import type { ToolCallResult } from "./adapter.ts";

export type ReceiptExecution = "not_started" | "succeeded" | "failed" | "unknown";
export type ReceiptDisclosure = "released" | "withheld";

export interface ExecutionReceipt {
  readonly callId: string;
  readonly toolId: string;
  readonly execution: ReceiptExecution;
  readonly disclosure: ReceiptDisclosure;
}

export interface ExecutionEvidence {
  readonly runId: string;
  readonly receipt: ExecutionReceipt;
}

/**
 * The receipt of a call the broker answered. `brokerStatus` is the status the broker's outcome had; `dispatched` says
 * the tool ran (an outcome `invokeTool` made after running it). A tool that answered but whose output was refused
 * (schema, size, the response budget) did act: `succeeded`, withheld.
 */
export function receiptOf(
  callId: string,
  toolId: string,
  brokerStatus: unknown,
  dispatched: boolean,
  result: ToolCallResult,
): ExecutionReceipt {
  let execution: ReceiptExecution;
  if (result.status === "succeeded" || brokerStatus === "succeeded") execution = "succeeded";
  else if (result.status === "outcome_unknown") execution = "unknown";
  else {
    const code = result.error.code;
    if (dispatched) execution = code === "INVALID_OUTPUT" || code === "LIMIT_EXCEEDED" ? "succeeded" : "failed";
    else execution = code === "TOOL_FAILED" || code === "TIMEOUT" ? "failed" : "not_started";
  }
  return Object.freeze({
    callId,
    toolId,
    execution,
    disclosure: result.status === "succeeded" ? ("released" as const) : ("withheld" as const),
  });
}

/** A call whose broker never answered (it threw, or was given up): its effect is unknown. */
export function unknownReceipt(callId: string, toolId: string): ExecutionReceipt {
  return Object.freeze({ callId, toolId, execution: "unknown" as const, disclosure: "withheld" as const });
}

const codeModes = new WeakSet<object>();

/** Marks an object made by `createCodeMode`, so that durable phases refuse look-alikes. */
export function brandCodeMode<T extends object>(mode: T): T {
  codeModes.add(mode);
  return mode;
}

/** True only for code modes made by `createCodeMode`. */
export function isCodeMode(value: unknown): boolean {
  return typeof value === "object" && value !== null && codeModes.has(value);
}
