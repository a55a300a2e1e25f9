/**
 * One conformance suite for every workflow store: the same runs, approvals, leases, crashes of acknowledgements and
 * corruptions against SQLite and PostgreSQL. A fixture opens the store under test on a fresh backing.
 */
import { defineTool, type Tool, z } from "airlock-codemode";
import {
  type AnyWorkflow,
  createScheduledWorkflowRuntime,
  defineWorkflow,
  type ScheduledWorkflowRuntime,
  type ScheduledWorkflowRuntimeOptions,
  type WorkflowStore,
} from "airlock-codemode/workflows";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { WorkflowCommands } from "../../dist/workflows/store.js";
import { submitAndSettle } from "./workflow-runs.ts";

export interface StoreFixture {
  store: WorkflowStore;
  /** A new store object on the same backing (another process would open the same). */
  open(): Promise<WorkflowStore>;
  /** Rewrites a record's state behind the store's back. */
  tamper(scope: string, id: string, edit: (state: Record<string, unknown>) => void): Promise<void>;
  cleanup(): Promise<void>;
}

const scope = { principalId: "developer", projectId: "project-a" };
const valueSchema = z.object({ value: z.number() });
const HUMAN = "verified-human";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function deferred<T = void>() {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((done) => {
    resolve = done;
  });
  return { promise, resolve };
}

function writeTool(
  options: {
    id?: string;
    costMicros?: number;
    output?: z.ZodType;
    execute?: (input: { value: number }) => unknown;
  } = {},
): Tool {
  return defineTool({
    id: options.id ?? "fixture.write",
    version: "1",
    description: "A controlled write.",
    input: valueSchema,
    output: options.output ?? z.unknown(),
    effects: "write",
    capabilities: [],
    costMicros: options.costMicros ?? 1,
    execute: (input: { value: number }) => (options.execute ? options.execute(input) : input),
  }) as Tool;
}

/** A write tool's handler that returns its input and counts its runs: `effects` is how often the effect happened. */
function counted() {
  const count = {
    effects: 0,
    execute: (input: { value: number }) => {
      count.effects++;
      return input;
    },
  };
  return count;
}

function single(tool: Tool, approval = false): AnyWorkflow {
  return defineWorkflow({
    id: "fixture.single",
    version: "1",
    input: valueSchema,
    output: z.unknown(),
    nodes: [{ kind: "tool", id: "write", tool, input: { kind: "input", path: [] }, approval }],
    result: { kind: "step", stepId: "write", path: [] },
  });
}

function parallel(first: Tool, second: Tool): AnyWorkflow {
  return defineWorkflow({
    id: "fixture.parallel",
    version: "1",
    input: valueSchema,
    output: z.unknown(),
    nodes: [
      { kind: "tool", id: "first", tool: first, input: { kind: "input", path: [] } },
      { kind: "tool", id: "second", tool: second, input: { kind: "input", path: [] } },
      { kind: "join", id: "joined", dependsOn: ["second", "first"] },
    ],
    result: { kind: "step", stepId: "joined", path: [] },
  });
}

export function workflowConformance(name: string, factory: () => Promise<StoreFixture>): void {
  describe(`${name} workflow store`, () => {
    let fixture: StoreFixture;
    let store: WorkflowStore;
    let runtimes: ScheduledWorkflowRuntime[];
    let stores: WorkflowStore[];
    let worker = 0;
    const runtime = (overrides: Partial<ScheduledWorkflowRuntimeOptions> = {}): ScheduledWorkflowRuntime => {
      const instance = createScheduledWorkflowRuntime({
        store,
        workerId: `worker-${++worker}`,
        scope,
        permissions: { allow: ["tool:fixture.write", "tool:fixture.second", "effect:write"] },
        policyVersion: "policy-1",
        maxCostMicros: 10,
        approvalTtlMs: 60_000,
        verifyHuman: async (credential) => {
          if (credential !== HUMAN) throw new Error("SECRET verifier detail");
          return { id: "human-a", projectId: scope.projectId, canApprove: true };
        },
        ...overrides,
      });
      runtimes.push(instance);
      return instance;
    };
    const wrapped = (methods: Partial<WorkflowCommands>) => ({
      ...store,
      workflows: { ...store.workflows, ...methods },
    });
    const reopen = async () => {
      await store.close();
      store = await fixture.open();
      stores.push(store);
      await store.initialize();
    };

    beforeEach(async () => {
      fixture = await factory();
      store = fixture.store;
      stores = [store];
      runtimes = [];
      await store.initialize();
    });
    afterEach(async () => {
      await Promise.all(runtimes.map((instance) => instance.close()));
      for (const opened of stores) await opened.close();
      await fixture.cleanup();
    });

    it("runs two branches and joins them in declared order, with one event sequence", async () => {
      const effects: string[] = [];
      const definition = parallel(
        writeTool({
          execute: (input) => {
            effects.push("first");
            return { value: input.value + 1 };
          },
        }),
        writeTool({
          id: "fixture.second",
          execute: (input) => {
            effects.push("second");
            return { value: input.value + 2 };
          },
        }),
      );
      const engine = runtime();
      const run = await engine.submit(definition, { input: { value: 2 }, idempotencyKey: "parallel" });
      expect(run.id).toMatch(/^[a-f0-9]{64}$/);
      expect(run.status).toBe("running");
      // Submitted, nothing admitted yet: every step is pending, nothing is reserved.
      for (const step of ["first", "second", "joined"]) expect(run.steps[step]?.status).toBe("pending");
      expect(run.budget).toEqual({ spentMicros: 0, reservedMicros: 0, maxCostMicros: 10 });
      const done = await engine.runUntilSettled(definition, run.id);
      expect(done.status).toBe("succeeded");
      expect(done.output).toEqual([{ value: 4 }, { value: 3 }]);
      expect(effects.sort()).toEqual(["first", "second"]);
      expect(done.budget).toEqual({ spentMicros: 2, reservedMicros: 0, maxCostMicros: 10 });
      expect(done.steps.first).toMatchObject({
        kind: "tool",
        status: "succeeded",
        callId: `${run.id}/step:first`,
        receipt: {
          callId: `${run.id}/step:first`,
          toolId: "fixture.write",
          execution: "succeeded",
          disclosure: "released",
        },
        approval: null,
        costReserved: 0,
      });
      expect(done.steps.joined).toMatchObject({ kind: "join", status: "succeeded", callId: null });
      expect(Object.isFrozen(done)).toBe(true);
      expect(Object.isFrozen(done.steps.first)).toBe(true);
      const events = await engine.events(run.id);
      expect(events.map((event) => event.sequence)).toEqual(events.map((_, index) => index + 1));
      expect(events.map((event) => event.type)).toContain("job.started");
      const last = events.at(-1)?.sequence ?? 0;
      expect(await engine.events(run.id, last)).toEqual([]);
      // Reading is only reading: no state change, no effect.
      const before = await engine.inspect(run.id);
      await engine.events(run.id);
      expect(await engine.inspect(run.id)).toEqual(before);
      expect((await engine.runUntilSettled(definition, run.id)).version).toBe(before.version);
      expect(effects).toHaveLength(2);
    });

    it("feeds a step's output to a dependant through its binding", async () => {
      const definition = defineWorkflow({
        id: "fixture.sequence",
        version: "1",
        input: valueSchema,
        output: valueSchema,
        nodes: [
          {
            kind: "tool",
            id: "first",
            tool: writeTool({ execute: (i) => ({ value: i.value + 1 }) }),
            input: { kind: "input", path: [] },
          },
          {
            kind: "tool",
            id: "second",
            tool: writeTool({ id: "fixture.second", execute: (i) => ({ value: i.value * 10 }) }),
            dependsOn: ["first"],
            input: { kind: "step", stepId: "first", path: [] },
          },
        ],
        result: { kind: "step", stepId: "second", path: [] },
      });
      const engine = runtime();
      const { settled } = await submitAndSettle(engine, definition, { value: 2 }, "sequence");
      expect(settled.output).toEqual({ value: 30 });
    });

    it("waits for a verified person without reserving budget, and keeps the approval across a reopened store", async () => {
      const write = counted();
      const definition = single(writeTool({ costMicros: 3, execute: write.execute }), true);
      const first = runtime();
      const { run, settled: waiting } = await submitAndSettle(first, definition, { value: 2 }, "approval");
      expect(waiting.status).toBe("waiting");
      expect(waiting.steps.write?.status).toBe("waiting");
      expect(waiting.budget).toEqual({ spentMicros: 0, reservedMicros: 0, maxCostMicros: 10 });
      const approval = waiting.steps.write?.approval;
      expect(approval).toMatchObject({ digest: expect.stringMatching(/^[a-f0-9]{64}$/), humanId: null });
      expect(approval?.expiresAt).toBeGreaterThan(Date.now());
      expect(write.effects).toBe(0);
      // Asking again changes nothing while the request is live.
      expect((await first.runUntilSettled(definition, run.id)).steps.write?.approval).toEqual(approval);
      await first.close();
      await reopen();
      const second = runtime();
      expect((await second.inspect(run.id)).steps.write?.approval).toEqual(approval);
      const approved = await second.approve({
        id: run.id,
        nodeId: "write",
        digest: approval?.digest as string,
        credential: HUMAN,
      });
      expect(approved.steps.write).toMatchObject({ status: "approved", approval: { humanId: "human-a" } });
      const done = await second.runUntilSettled(definition, run.id);
      expect(done).toMatchObject({
        status: "succeeded",
        output: { value: 2 },
        budget: { spentMicros: 3, reservedMicros: 0 },
      });
      expect(done.steps.write?.approval?.humanId).toBe("human-a");
      expect(write.effects).toBe(1);
      const text = JSON.stringify(await second.events(run.id));
      expect(text).not.toContain(HUMAN);
      expect(text).not.toContain("SECRET");
    });

    it("refuses an unverified person, another project's person, a wrong digest and a malformed one", async () => {
      const write = counted();
      const definition = single(writeTool({ execute: write.execute }), true);
      const engine = runtime();
      const { run, settled } = await submitAndSettle(engine, definition, { value: 2 }, "denied");
      const digest = settled.steps.write?.approval?.digest as string;
      const attempt = (r: ScheduledWorkflowRuntime, d: string, credential: unknown = HUMAN) =>
        r.approve({ id: run.id, nodeId: "write", digest: d, credential });
      await expect(attempt(engine, digest, "forged")).rejects.toMatchObject({ code: "PERMISSION_DENIED" });
      await expect(attempt(engine, "a".repeat(64))).rejects.toMatchObject({ code: "CONFLICT" });
      await expect(attempt(engine, "not-a-digest")).rejects.toMatchObject({ code: "INVALID_INPUT" });
      const elsewhere = runtime({
        verifyHuman: async () => ({ id: "human-b", projectId: "project-b", canApprove: true }),
      });
      await expect(attempt(elsewhere, digest)).rejects.toMatchObject({ code: "PERMISSION_DENIED" });
      const viewer = runtime({
        verifyHuman: async () => ({ id: "human-c", projectId: scope.projectId, canApprove: false }),
      });
      await expect(attempt(viewer, digest)).rejects.toMatchObject({ code: "PERMISSION_DENIED" });
      const none = runtime({ verifyHuman: undefined });
      await expect(attempt(none, digest)).rejects.toMatchObject({ code: "PERMISSION_DENIED" });
      expect(write.effects).toBe(0);
      expect((await engine.inspect(run.id)).status).toBe("waiting");
    });

    it("binds a run to its policy and its definition, and a digest to its run", async () => {
      let effects = 0;
      const execute = (i: { value: number }) => {
        effects++;
        return i;
      };
      const tool = writeTool({ execute });
      const definition = single(tool, true);
      const engine = runtime();
      const a = await engine.submit(definition, { input: { value: 2 }, idempotencyKey: "bound-a" });
      const b = await engine.submit(definition, { input: { value: 2 }, idempotencyKey: "bound-b" });
      const [wa, wb] = await Promise.all([
        engine.runUntilSettled(definition, a.id),
        engine.runUntilSettled(definition, b.id),
      ]);
      const digestA = wa.steps.write?.approval?.digest as string;
      expect(digestA).not.toBe(wb.steps.write?.approval?.digest);
      await expect(
        engine.approve({ id: b.id, nodeId: "write", digest: digestA, credential: HUMAN }),
      ).rejects.toMatchObject({
        code: "CONFLICT",
      });
      const changed = runtime({ policyVersion: "policy-2" });
      await expect(
        changed.approve({ id: a.id, nodeId: "write", digest: digestA, credential: HUMAN }),
      ).rejects.toMatchObject({
        code: "CONFLICT",
      });
      await expect(changed.runUntilSettled(definition, a.id)).rejects.toMatchObject({ code: "CONFLICT" });
      const other = single(defineTool({ ...tool, version: "2", execute }) as Tool, true);
      await expect(engine.runUntilSettled(other, a.id)).rejects.toMatchObject({ code: "CONFLICT" });
      for (const foreign of [
        { ...scope, principalId: "other" },
        { ...scope, projectId: "other" },
      ]) {
        const outsider = runtime({ scope: foreign });
        await expect(outsider.inspect(a.id)).rejects.toMatchObject({ code: "NOT_FOUND" });
        await expect(outsider.runUntilSettled(definition, a.id)).rejects.toMatchObject({ code: "NOT_FOUND" });
        await expect(outsider.cancel(a.id)).rejects.toMatchObject({ code: "NOT_FOUND" });
      }
      expect(effects).toBe(0);
    });

    it("refuses an expired approval, then asks again with a fresh digest", async () => {
      const write = counted();
      const definition = single(writeTool({ execute: write.execute }), true);
      // Long enough for the second approval to be admitted before it lapses too, even on a loaded machine.
      const ttl = { approvalTtlMs: 2_000 };
      const engine = runtime(ttl);
      const { run, settled } = await submitAndSettle(engine, definition, { value: 2 }, "expired");
      const first = settled.steps.write?.approval?.digest as string;
      await sleep(2_100);
      await expect(
        engine.approve({ id: run.id, nodeId: "write", digest: first, credential: HUMAN }),
      ).rejects.toMatchObject({
        code: "CONFLICT",
      });
      const again = await engine.runUntilSettled(definition, run.id);
      expect(again.status).toBe("waiting");
      const fresh = again.steps.write?.approval?.digest as string;
      expect(fresh).not.toBe(first);
      expect(write.effects).toBe(0);
      const slow = runtime(ttl);
      await slow.approve({ id: run.id, nodeId: "write", digest: fresh, credential: HUMAN });
      expect((await slow.runUntilSettled(definition, run.id)).status).toBe("succeeded");
      expect(write.effects).toBe(1);
    });

    it("blocks a step whose grants are missing before asking anyone", async () => {
      const write = counted();
      const definition = single(writeTool({ execute: write.execute }), true);
      const engine = runtime({ permissions: { allow: ["tool:fixture.write"] } });
      const { settled: result } = await submitAndSettle(engine, definition, { value: 2 }, "grants");
      expect(result.status).toBe("blocked");
      expect(result.steps.write).toMatchObject({ status: "blocked", approval: null });
      expect(write.effects).toBe(0);
    });

    it("gives the same run for the same key, CONFLICT for other input, and nothing to another scope", async () => {
      const write = counted();
      const definition = single(writeTool({ execute: write.execute }));
      const engine = runtime();
      const runs = await Promise.all(
        Array.from({ length: 6 }, () => engine.submit(definition, { input: { value: 2 }, idempotencyKey: "same" })),
      );
      expect(new Set(runs.map((run) => run.id)).size).toBe(1);
      const id = runs[0]?.id as string;
      await engine.runUntilSettled(definition, id);
      expect((await engine.submit(definition, { input: { value: 2 }, idempotencyKey: "same" })).status).toBe(
        "succeeded",
      );
      await expect(engine.submit(definition, { input: { value: 3 }, idempotencyKey: "same" })).rejects.toMatchObject({
        code: "CONFLICT",
      });
      await expect(
        engine.submit(definition, { input: { value: "x" } as never, idempotencyKey: "bad" }),
      ).rejects.toMatchObject({
        code: "INVALID_INPUT",
      });
      await expect(engine.submit(definition, { input: { value: 2 }, idempotencyKey: "" })).rejects.toMatchObject({
        code: "INVALID_INPUT",
      });
      const other = runtime({ scope: { ...scope, projectId: "project-b" } });
      expect((await other.submit(definition, { input: { value: 2 }, idempotencyKey: "same" })).id).not.toBe(id);
      expect(write.effects).toBe(1);
      await expect(engine.inspect("nope")).rejects.toMatchObject({ code: "INVALID_INPUT" });
    });

    it("keeps the receipt and the cost of an effect whose output was refused, and never runs it again", async () => {
      let effects = 0;
      const definition = single(
        writeTool({
          output: z.object({ allowed: z.literal(true) }),
          execute: () => {
            effects++;
            return { SECRET: "x" };
          },
        }),
      );
      const engine = runtime();
      const { run, settled: result } = await submitAndSettle(engine, definition, { value: 2 }, "refused-output");
      expect(result.status).toBe("failed");
      expect(result.steps.write).toMatchObject({
        status: "failed",
        output: null,
        receipt: { execution: "succeeded", disclosure: "withheld" },
      });
      expect(result.budget).toMatchObject({ spentMicros: 1, reservedMicros: 0 });
      expect(JSON.stringify(await engine.events(run.id))).not.toContain("SECRET");
      await engine.runUntilSettled(definition, run.id);
      expect(effects).toBe(1);
    });

    it("fails a step whose input does not match its tool, and skips its dependants", async () => {
      const definition = defineWorkflow({
        id: "fixture.bad-input",
        version: "1",
        input: z.object({ value: z.unknown() }),
        output: z.unknown(),
        nodes: [
          { kind: "tool", id: "first", tool: writeTool(), input: { kind: "input", path: [] } },
          { kind: "join", id: "after", dependsOn: ["first"] },
        ],
        result: { kind: "step", stepId: "after", path: [] },
      });
      const engine = runtime();
      const { settled: result } = await submitAndSettle(engine, definition, { value: "text" }, "bad-input");
      expect(result.status).toBe("failed");
      expect(result.steps.first?.status).toBe("failed");
      expect(result.steps.after?.status).toBe("skipped");
      expect(result.budget.spentMicros).toBe(0);
    });

    it("reserves a shared budget once: the branch that does not fit is blocked and never runs", async () => {
      let effects = 0;
      const execute = (input: { value: number }) => {
        effects++;
        return input;
      };
      const definition = parallel(
        writeTool({ costMicros: 6, execute }),
        writeTool({ id: "fixture.second", costMicros: 6, execute }),
      );
      const engine = runtime();
      const { settled: result } = await submitAndSettle(engine, definition, { value: 2 }, "budget");
      expect(result.status).toBe("blocked");
      expect(effects).toBe(1);
      expect(result.budget).toEqual({ spentMicros: 6, reservedMicros: 0, maxCostMicros: 10 });
      expect(result.steps.joined?.status).toBe("skipped");
    });

    it("runs a step once when four workers on two store handles race for it", async () => {
      let effects = 0;
      const began = deferred();
      const release = deferred<{ value: number }>();
      const definition = single(
        writeTool({
          execute: () => {
            effects++;
            began.resolve();
            return release.promise;
          },
        }),
      );
      const secondStore = await fixture.open();
      stores.push(secondStore);
      await secondStore.initialize();
      const engines = [runtime(), runtime(), runtime({ store: secondStore }), runtime({ store: secondStore })];
      const run = await engines[0]?.submit(definition, { input: { value: 2 }, idempotencyKey: "race" });
      const id = run?.id as string;
      const all = Promise.all(engines.map((engine) => engine.runUntilSettled(definition, id)));
      await began.promise;
      release.resolve({ value: 2 });
      await all;
      expect(effects).toBe(1);
      expect((await engines[3]?.runUntilSettled(definition, id))?.status).toBe("succeeded");
      expect(effects).toBe(1);
    });

    it("cancels before a step starts without an effect or a reservation", async () => {
      const write = counted();
      const definition = single(writeTool({ execute: write.execute }));
      const engine = runtime();
      const run = await engine.submit(definition, { input: { value: 2 }, idempotencyKey: "cancel-before" });
      expect((await engine.cancel(run.id)).status).toBe("cancelled");
      const result = await engine.runUntilSettled(definition, run.id);
      expect(result).toMatchObject({ status: "cancelled", budget: { spentMicros: 0, reservedMicros: 0 } });
      expect(result.steps.write?.status).toBe("skipped");
      expect(write.effects).toBe(0);
    });

    it("holds a running step's cost after cancellation until its late receipt, and never shows its output", async () => {
      let effects = 0;
      const began = deferred();
      const release = deferred<{ value: number }>();
      const definition = single(
        writeTool({
          costMicros: 3,
          execute: () => {
            effects++;
            began.resolve();
            return release.promise;
          },
        }),
      );
      const engine = runtime();
      const run = await engine.submit(definition, { input: { value: 2 }, idempotencyKey: "cancel-late" });
      const driving = engine.runUntilSettled(definition, run.id);
      await began.promise;
      // While its tool runs, the step is dispatching: started in the store, its cost reserved, no receipt yet.
      const running = await runtime().inspect(run.id);
      expect(running.status).toBe("running");
      expect(running.steps.write).toMatchObject({
        status: "dispatching",
        receipt: null,
        output: null,
        costReserved: 3,
      });
      expect(running.budget).toEqual({ spentMicros: 0, reservedMicros: 3, maxCostMicros: 10 });
      expect((await engine.events(run.id)).map((event) => event.type)).toContain("job.started");
      const cancelled = await engine.cancel(run.id);
      expect(cancelled).toMatchObject({ status: "cancelled", budget: { spentMicros: 0, reservedMicros: 3 } });
      expect(cancelled.steps.write?.status).toBe("unknown");
      release.resolve({ value: 2 });
      await driving;
      const late = await engine.inspect(run.id);
      expect(late).toMatchObject({ status: "cancelled", output: null, budget: { spentMicros: 3, reservedMicros: 0 } });
      expect(late.steps.write).toMatchObject({
        output: null,
        receipt: { execution: "succeeded", disclosure: "withheld" },
      });
      await engine.recoverExpired(run.id);
      await engine.runUntilSettled(definition, run.id);
      expect(effects).toBe(1);
    });

    it("never dispatches again when the acknowledgement of a persisted start is lost", async () => {
      let lost = false;
      const backing = store.workflows;
      const write = counted();
      const definition = single(writeTool({ execute: write.execute }));
      const faulty = runtime({
        leaseMs: 1_000,
        store: wrapped({
          start: async (command) => {
            const result = await backing.start(command);
            if (!lost && result.status === "started") {
              lost = true;
              throw new Error("SECRET connection reset after commit");
            }
            return result;
          },
        }),
      });
      const { run } = await submitAndSettle(faulty, definition, { value: 2 }, "lost-start");
      await faulty.close();
      await sleep(1_100);
      const healthy = runtime();
      expect((await healthy.recoverExpired(run.id)).steps.write?.status).toBe("unknown");
      const result = await healthy.runUntilSettled(definition, run.id);
      expect(lost).toBe(true);
      expect(write.effects).toBe(0);
      expect(result).toMatchObject({
        status: "outcome_unknown",
        output: null,
        budget: { spentMicros: 0, reservedMicros: 1 },
      });
    });

    it("keeps a committed completion whose acknowledgement was lost, without running the tool again", async () => {
      let lost = false;
      const backing = store.workflows;
      const write = counted();
      const definition = single(writeTool({ execute: write.execute }));
      const faulty = runtime({
        store: wrapped({
          complete: async (command) => {
            const result = await backing.complete(command);
            if (!lost) {
              lost = true;
              throw new Error("lost acknowledgement");
            }
            return result;
          },
        }),
      });
      const run = await faulty.submit(definition, { input: { value: 2 }, idempotencyKey: "lost-complete" });
      await faulty.runUntilSettled(definition, run.id).catch(() => {});
      const result = await runtime().runUntilSettled(definition, run.id);
      expect(result).toMatchObject({ status: "succeeded", budget: { spentMicros: 1, reservedMicros: 0 } });
      expect(write.effects).toBe(1);
    });

    it("takes over an expired lease that never started without reserving its cost again", async () => {
      const claimed = deferred();
      const proceed = deferred();
      const backing = store.workflows;
      let held = false;
      const write = counted();
      const definition = single(writeTool({ costMicros: 3, execute: write.execute }));
      const slow = runtime({
        leaseMs: 1_000,
        store: wrapped({
          claim: async (command) => {
            if (held) return [];
            const claims = await backing.claim(command);
            if (claims.length > 0) {
              held = true;
              claimed.resolve();
              await proceed.promise;
            }
            return claims;
          },
        }),
      });
      const run = await slow.submit(definition, { input: { value: 2 }, idempotencyKey: "takeover" });
      const stale = slow.runUntilSettled(definition, run.id);
      await claimed.promise;
      await sleep(1_100);
      const fresh = runtime();
      expect((await fresh.recoverExpired(run.id)).budget).toMatchObject({ spentMicros: 0, reservedMicros: 3 });
      proceed.resolve();
      await Promise.allSettled([stale]);
      expect(write.effects).toBe(0);
      const result = await fresh.runUntilSettled(definition, run.id);
      expect(result).toMatchObject({ status: "succeeded", budget: { spentMicros: 3, reservedMicros: 0 } });
      expect(write.effects).toBe(1);
      const fences = (await fresh.events(run.id)).filter((e) => e.type === "job.claimed").map((e) => e.data.fence);
      expect(fences).toEqual([1, 2]);
    });

    it("renews the lease of a step that runs longer than one lease", async () => {
      let effects = 0;
      const definition = single(
        writeTool({
          execute: async (i) => {
            effects++;
            await sleep(1_600);
            return i;
          },
        }),
      );
      const engine = runtime({ leaseMs: 1_000 });
      const { run, settled } = await submitAndSettle(engine, definition, { value: 2 }, "renewal");
      expect(settled.status).toBe("succeeded");
      expect(effects).toBe(1);
      expect((await engine.events(run.id)).filter((e) => e.type === "job.claimed")).toHaveLength(1);
    });

    it("ends a step whose lease lapsed before its receipt as unknown, and does not complete it", async () => {
      let completions = 0;
      const backing = store.workflows;
      const write = counted();
      const definition = single(writeTool({ execute: write.execute }));
      const engine = runtime({
        leaseMs: 1_000,
        store: wrapped({
          renew: () => new Promise(() => {}),
          recordReceipt: async (command) => {
            await sleep(1_100);
            return backing.recordReceipt(command);
          },
          complete: async (command) => {
            completions++;
            return backing.complete(command);
          },
        }),
      });
      const { settled: result } = await submitAndSettle(engine, definition, { value: 2 }, "lapsed");
      expect(result).toMatchObject({ status: "outcome_unknown", budget: { spentMicros: 1, reservedMicros: 0 } });
      expect(result.steps.write).toMatchObject({
        status: "unknown",
        receipt: { execution: "succeeded", disclosure: "withheld" },
      });
      expect(completions).toBe(0);
      expect(write.effects).toBe(1);
    });

    it("settles an unknown effect only through a verifier, and keeps contradictions as evidence", async () => {
      let verdict = {
        authorityId: "provider-a",
        attestationId: "event/1",
        execution: "succeeded" as const,
        knownCostMicros: 2,
      };
      let effects = 0;
      const definition = single(
        writeTool({
          costMicros: 4,
          execute: () => {
            effects++;
            return new Promise(() => {});
          },
        }),
      );
      const unsure = runtime({ leaseMs: 1_000 });
      const run = await unsure.submit(definition, { input: { value: 2 }, idempotencyKey: "reconcile" });
      void unsure.runUntilSettled(definition, run.id).catch(() => {});
      await sleep(300);
      await unsure.cancel(run.id);
      const plain = runtime();
      await expect(plain.reconcile(definition, { id: run.id, nodeId: "write", credential: "c" })).rejects.toMatchObject(
        {
          code: "PERMISSION_DENIED",
        },
      );
      const auditor = runtime({
        verifyExecution: async (request, credential) => {
          expect(credential).toBe("SECRET-credential");
          expect(request).toMatchObject({ nodeId: "write", toolId: "fixture.write", maximumCostMicros: 4, scope });
          return verdict as never;
        },
      });
      const settled = await auditor.reconcile(definition, {
        id: run.id,
        nodeId: "write",
        credential: "SECRET-credential",
      });
      expect(settled).toMatchObject({
        status: "cancelled",
        output: null,
        budget: { spentMicros: 2, reservedMicros: 0 },
      });
      expect(settled.steps.write).toMatchObject({
        status: "unknown",
        receipt: { execution: "succeeded", disclosure: "withheld" },
      });
      const repeated = await auditor.reconcile(definition, {
        id: run.id,
        nodeId: "write",
        credential: "SECRET-credential",
      });
      expect(repeated).toEqual(settled);
      verdict = { ...verdict, execution: "failed" as never, attestationId: "event/2" };
      const contradicted = await auditor.reconcile(definition, {
        id: run.id,
        nodeId: "write",
        credential: "SECRET-credential",
      });
      expect(contradicted.version).toBeGreaterThan(settled.version);
      expect(contradicted.budget).toEqual(settled.budget);
      const malformed = runtime({
        verifyExecution: async () => ({
          authorityId: "x",
          attestationId: "",
          execution: "succeeded",
          knownCostMicros: 99,
        }),
      });
      await expect(
        malformed.reconcile(definition, { id: run.id, nodeId: "write", credential: null }),
      ).rejects.toMatchObject({
        code: "PERMISSION_DENIED",
      });
      expect(JSON.stringify(await auditor.events(run.id))).not.toContain("SECRET-credential");
      expect(effects).toBe(1);
    });

    it("pauses between steps and resumes where it stopped", async () => {
      const write = counted();
      const definition = single(writeTool({ execute: write.execute }));
      const engine = runtime();
      const run = await engine.submit(definition, { input: { value: 2 }, idempotencyKey: "pause" });
      expect((await engine.pause(run.id)).status).toBe("paused");
      expect((await engine.runUntilSettled(definition, run.id)).status).toBe("paused");
      expect(write.effects).toBe(0);
      await expect(engine.pause(run.id)).resolves.toMatchObject({ status: "paused" });
      expect((await engine.resume(run.id)).status).toBe("running");
      await expect(engine.resume(run.id)).rejects.toMatchObject({ code: "CONFLICT" });
      expect((await engine.runUntilSettled(definition, run.id)).status).toBe("succeeded");
      expect(write.effects).toBe(1);
    });

    it("treats a record changed behind the store's back as STORAGE_UNAVAILABLE", async () => {
      const definition = single(writeTool());
      const engine = runtime();
      const { run } = await submitAndSettle(engine, definition, { value: 2 }, "forged");
      const events = await engine.events(run.id);
      expect(events.length).toBeGreaterThan(0);
      const records = await store.list({ kind: "workflow-run", limit: 10 });
      const record = records.find((item) => item.id === run.id);
      await fixture.tamper(record?.scope as string, run.id, (state) => {
        state.spentMicros = 2;
      });
      await expect(engine.inspect(run.id)).rejects.toMatchObject({ code: "STORAGE_UNAVAILABLE" });
    });

    it("refuses work once closed, and drains steps in flight", async () => {
      const release = deferred<{ value: number }>();
      const began = deferred();
      const definition = single(
        writeTool({
          execute: () => {
            began.resolve();
            return release.promise;
          },
        }),
      );
      const engine = runtime();
      const run = await engine.submit(definition, { input: { value: 2 }, idempotencyKey: "drain" });
      const driving = engine.runUntilSettled(definition, run.id);
      await began.promise;
      const draining = engine.drain({ timeoutMs: 5_000 });
      release.resolve({ value: 2 });
      expect(await draining).toEqual({ settled: true, pendingJobs: 0 });
      await driving.catch(() => {});
      await expect(engine.inspect(run.id)).rejects.toMatchObject({ code: "CANCELLED" });
      expect((await runtime().inspect(run.id)).steps.write?.status).toBe("succeeded");
    });
  });
}
