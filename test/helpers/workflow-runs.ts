/**
 * The steps most workflow tests begin with: submit a run and drive it until nothing more can happen now (it settled,
 * or it waits for a person or another worker). What the test asserts stays in the test.
 */
import type { z } from "airlock-codemode";
import type { AnyWorkflow, ScheduledWorkflowRuntime, WorkflowSnapshot } from "airlock-codemode/workflows";

/** Submits `definition` with `input` under `idempotencyKey`, then runs it until it settles; returns both snapshots. */
export async function submitAndSettle<I extends z.ZodType, O extends z.ZodType>(
  runtime: ScheduledWorkflowRuntime,
  definition: AnyWorkflow & { input: I; output: O },
  input: z.input<I>,
  idempotencyKey: string,
): Promise<{ run: WorkflowSnapshot; settled: WorkflowSnapshot }> {
  const run = await runtime.submit(definition, { input, idempotencyKey });
  return { run, settled: await runtime.runUntilSettled(definition, run.id) };
}
