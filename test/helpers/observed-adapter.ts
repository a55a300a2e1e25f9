/**
 * A code-mode adapter that forwards to another as it is, noting what each deterministic run was given and did:
 * whether it got a snapshot to continue, whether the sandbox said it restored it, and how many calls it made (through
 * `call`, which the journal checks). With `ignoreSnapshots`, it declares snapshots and then runs the program without
 * the snapshot it was given, saying nothing of it.
 */
import { defineSandboxAdapter, type SandboxAdapter, type SandboxDeterministicRun } from "airlock-codemode/code-mode";

export interface ObservedRun {
  snapshotGiven: boolean;
  restored: boolean | undefined;
  calls: number;
}

export function observeAdapter(inner: SandboxAdapter, { snapshots = true, ignoreSnapshots = false } = {}) {
  const runs: ObservedRun[] = [];
  const adapter = defineSandboxAdapter({
    id: "observed-quickjs",
    version: "1",
    qualification: "production",
    deterministic: true,
    snapshots,
    isAvailable: () => inner.isAvailable(),
    execute: (request) => {
      const run = request.deterministic as SandboxDeterministicRun;
      const seen: ObservedRun = { snapshotGiven: run.restore !== undefined, restored: undefined, calls: 0 };
      runs.push(seen);
      const restore = run.restore;
      return inner.execute({
        ...request,
        deterministic: {
          ...run,
          call: (toolId, input) => {
            seen.calls++;
            return run.call(toolId, input);
          },
          restore:
            restore === undefined || ignoreSnapshots
              ? undefined
              : {
                  snapshot: restore.snapshot,
                  onRestored: (restored: boolean) => {
                    seen.restored = restored;
                    restore.onRestored(restored);
                  },
                },
        },
      });
    },
  });
  return { adapter, runs };
}
