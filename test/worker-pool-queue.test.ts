/**
 * The worker pool past its slots: a worker tracks a fixed number of executions at once (4096); more wait on the host
 * in order instead of failing, and their deadline and abort count from execute() while they wait. The pool is built
 * here with two slots so that a few executions fill it.
 */
import { CodemodeSandboxBase, type CodemodeSandboxBaseOptions, loadQuickJSWasm } from "airlock-codemode";
import { afterEach, describe, expect, it } from "vitest";
import { GuestMemoryBudget } from "../dist/host/memory-budget.js";
import { WorkerPool } from "../dist/worker/launcher.js";

class TwoSlotSandbox extends CodemodeSandboxBase {
  constructor(options: CodemodeSandboxBaseOptions) {
    super(
      options,
      new WorkerPool({
        module: loadQuickJSWasm(),
        size: 1,
        maxSize: 1,
        maxVmsPerWorker: 2,
        budget: new GuestMemoryBudget(2 ** 40),
      }),
    );
  }
}

const open: CodemodeSandboxBase[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((s) => s.close()));
});

/** A sandbox whose `gate` tool records its argument and answers once `release()` was called. */
function gated() {
  const arrived: number[] = [];
  const waiters: (() => void)[] = [];
  let released = false;
  const sandbox = new TwoSlotSandbox({
    timeoutMs: 20_000,
    tools: [
      {
        name: "gate",
        execute: async (args) => {
          arrived.push(args as number);
          if (!released) await new Promise<void>((resolve) => waiters.push(resolve));
          return args;
        },
      },
    ],
  });
  open.push(sandbox);
  const release = () => {
    released = true;
    for (const resolve of waiters.splice(0)) resolve();
  };
  const until = async (calls: number) => {
    while (arrived.length < calls) await new Promise((resolve) => setTimeout(resolve, 5));
  };
  return { sandbox, arrived, release, until };
}

describe("the worker pool with every slot taken", () => {
  it("runs the executions past its slots once slots free, in the order they came", async () => {
    const { sandbox, arrived, release, until } = gated();
    const results = Array.from({ length: 6 }, (_, i) => sandbox.execute(`return await tools.gate(${i});`));
    await until(2);
    expect(arrived).toEqual([0, 1]);
    release();
    const values = (await Promise.all(results)).map((r) => (r.ok ? r.value : r.error.message));
    expect(values).toEqual([0, 1, 2, 3, 4, 5]);
    expect(arrived).toEqual([0, 1, 2, 3, 4, 5]);
  });

  it("ends a waiting execution at once on abort or its deadline, without it ever taking a slot", async () => {
    const { sandbox, arrived, release, until } = gated();
    const holding = [sandbox.execute("return await tools.gate(0);"), sandbox.execute("return await tools.gate(1);")];
    await until(2);
    const controller = new AbortController();
    const aborted = sandbox.execute("return await tools.gate(2);", { signal: controller.signal });
    const timedOut = sandbox.execute("return await tools.gate(3);", { timeoutMs: 1 });
    const later = sandbox.execute("return await tools.gate(4);");
    controller.abort();
    expect(await aborted).toMatchObject({ ok: false, error: { kind: "aborted" }, calls: [] });
    expect(await timedOut).toMatchObject({ ok: false, error: { kind: "timeout" }, calls: [] });
    release();
    expect((await Promise.all(holding)).map((r) => r.ok && r.value)).toEqual([0, 1]);
    expect(await later).toMatchObject({ ok: true, value: 4 });
    expect(arrived).toEqual([0, 1, 4]);
  });

  it("ends waiting executions when the sandbox closes", async () => {
    const { sandbox, until } = gated();
    const results = Array.from({ length: 4 }, (_, i) => sandbox.execute(`return await tools.gate(${i});`));
    await until(2);
    await sandbox.close();
    expect((await Promise.all(results)).map((r) => !r.ok && r.error.kind)).toEqual(Array(4).fill("aborted"));
  });
});
