/**
 * A person's decision on the call a paused execution waits on: who may decide (`verifyApprover`, which the workflow
 * runtime and the command line use too), and the decision itself, written to the journal for the resume to act on.
 */
import { MAX_JSON_BYTES, tryCopyJson } from "../../json/index.ts";
import type { Scope } from "../../tools/define.ts";
import { AirlockError, configError } from "../../tools/errors.ts";
import { type ApprovalJournalStore, journalId, scopeHash } from "./call-journal.ts";
import { setState } from "./journal-owner.ts";

/** Time `verifyHuman` has to answer. */
export const APPROVAL_VERIFY_TIMEOUT_MS = 30_000;

export interface ApprovingHuman {
  readonly id: string;
  readonly projectId: string;
  readonly canApprove: boolean;
}

export type VerifyHuman = (credential: unknown) => ApprovingHuman | Promise<ApprovingHuman>;

export interface ApprovalDecision {
  readonly scope: Scope;
  readonly executionId: string;
  readonly digest: string;
  readonly credential: unknown;
}

/**
 * Records a person's verdict on the pending call of a waiting execution: the person is verified first
 * (PERMISSION_DENIED), and a digest other than the pending one is CONFLICT, as is an expired request.
 */
export async function decide(
  store: ApprovalJournalStore,
  verifyHuman: VerifyHuman,
  decision: ApprovalDecision,
  verdict: "approved" | "rejected",
): Promise<{ status: "approved" | "rejected" }> {
  if (typeof decision !== "object" || decision === null)
    throw configError("approve needs { scope, executionId, digest, credential }");
  const { scope, executionId, digest, credential } = decision;
  if (
    typeof executionId !== "string" ||
    executionId.length === 0 ||
    typeof digest !== "string" ||
    !/^[a-f0-9]{64}$/.test(digest)
  ) {
    throw new AirlockError("INVALID_INPUT", "approve needs an executionId and the 64-hex digest of the approval");
  }
  const copied = tryCopyJson(scope, { maxBytes: MAX_JSON_BYTES });
  if (!copied.ok || typeof (scope as { projectId?: unknown })?.projectId !== "string") {
    throw new AirlockError("INVALID_INPUT", "approvals need a scope with a projectId");
  }
  const human = await verifyApprover(verifyHuman, credential, scope.projectId as string);
  const sh = scopeHash(copied.json.value as Scope);
  let expired = false;
  await setState(
    store,
    sh,
    journalId(executionId),
    (journal, now) => {
      if (journal.status !== "waiting" || journal.pending === null || journal.pending.digest !== digest) {
        throw new AirlockError("CONFLICT", "the digest is not the pending approval of that execution");
      }
      if (journal.pending.expiresAt <= now) {
        journal.status = "expired";
        expired = true;
        return true;
      }
      journal.status = verdict;
      journal.pending = { ...journal.pending, decision: verdict, humanId: human.id };
      return true;
    },
    // Beside the state, an event of the journal's own: the resume sends the call only if both say the same, and
    // each decision of an execution that pauses more than once stays in its history.
    (journal) =>
      expired || journal.pending === null
        ? []
        : [{ type: "call.decided", data: { n: journal.pending.n, digest, decision: verdict, humanId: human.id } }],
  );
  if (expired) throw new AirlockError("CONFLICT", "the approval request expired");
  return { status: verdict };
}

/**
 * Asks `verifyHuman` about a credential: the person must belong to `projectId` and be allowed to approve, else
 * PERMISSION_DENIED (also when the verifier throws or takes longer than `APPROVAL_VERIFY_TIMEOUT_MS`). Only the
 * person's id is kept by whoever records the decision; the credential goes nowhere.
 */
export async function verifyApprover(
  verifyHuman: VerifyHuman | undefined,
  credential: unknown,
  projectId: string,
): Promise<ApprovingHuman> {
  if (typeof verifyHuman !== "function") throw new AirlockError("PERMISSION_DENIED", "there is no verifyHuman to ask");
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    const human = await Promise.race([
      Promise.resolve().then(() => verifyHuman(credential)),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error("timed out")), APPROVAL_VERIFY_TIMEOUT_MS);
      }),
    ]);
    const { id, projectId: project, canApprove } = human ?? ({} as ApprovingHuman);
    if (typeof id !== "string" || id.length === 0 || id.length > 256 || project !== projectId || canApprove !== true) {
      throw new Error("refused");
    }
    return Object.freeze({ id, projectId: project, canApprove });
  } catch {
    throw new AirlockError(
      "PERMISSION_DENIED",
      "the credential does not belong to a person who may approve in this project",
    );
  } finally {
    clearTimeout(timer);
  }
}
