/** What an attempt of a program under approvals ends with: an outcome, or a wait for a person at one call. */
import type { ErrorCode } from "../../tools/errors.ts";
import type { ExecutionEvidence } from "../evidence.ts";
import type { CallApproval } from "./call-journal.ts";

export type AttemptOutcome =
  | { status: "succeeded"; output: unknown; usage: object; evidence: readonly ExecutionEvidence[] }
  | {
      status: "failed" | "blocked" | "cancelled" | "outcome_unknown";
      error: { code: ErrorCode; message: string };
      usage: object;
      evidence: readonly ExecutionEvidence[];
      programError?: unknown;
    };

export interface WaitingOutcome {
  readonly status: "waiting";
  readonly approval: CallApproval;
  readonly usage: object;
  readonly evidence: readonly ExecutionEvidence[];
}
