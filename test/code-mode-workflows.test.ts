/**
 * Durable code phases: the template flow end to end on the real QuickJS adapter and a SQLite file, the phase tool's
 * shape, the audit record and its checks, forged definitions, phases that must not run or replay, and what a phase is
 * charged (what its program's calls cost, of the most it reserved) on SQLite and PostgreSQL.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Budget, defineTool, invokeTool, type Tool, z } from "airlock-codemode";
import { type ClosableSandboxAdapter, createQuickJsSandboxAdapter } from "airlock-codemode/adapter-code-quickjs";
import { type CodeProgramLimits, createCodeMode, defineCodeProgram } from "airlock-codemode/code-mode";
import { createDurableCodeAudit, defineDurableCodeWorkflow } from "airlock-codemode/code-mode-workflows";
import {
  type AnyWorkflow,
  createScheduledWorkflowRuntime,
  type ScheduledWorkflowRuntime,
  type WorkflowSnapshot,
  type WorkflowStore,
} from "airlock-codemode/workflows";
import { createPostgresStore } from "airlock-codemode/workflows/postgres";
import { createSqliteStore } from "airlock-codemode/workflows/sqlite";
import { afterAll, describe, expect, it } from "vitest";
import { testLimits } from "./helpers/code-mode.ts";
import { dropSchema, freshSchema } from "./helpers/postgres.ts";
import { requirePostgres } from "./helpers/system-tools.ts";
import { submitAndSettle } from "./helpers/workflow-runs.ts";

const value = z.object({ value: z.number() });
const limits = testLimits({ maxToolCalls: 2 });
const scope = { principalId: "alice", projectId: "project" };
const url = await requirePostgres();
const adapter: ClosableSandboxAdapter = createQuickJsSandboxAdapter({ poolSize: 1 });
afterAll(() => adapter.close());

function counter() {
  const counts = { writes: 0 };
  const tool = defineTool({
    id: "external.write",
    version: "1",
    description: "A controlled write.",
    input: value,
    output: value,
    effects: "write",
    capabilities: [],
    costMicros: 3,
    execute: (input: { value: number }) => {
      counts.writes++;
      return { value: input.value + 1 };
    },
  }) as Tool;
  return { counts, tool };
}

function programOf(tool: Tool, source: string, overrides: Partial<CodeProgramLimits> = {}) {
  return defineCodeProgram({
    id: "durable.phase",
    version: "1",
    intent: "Write once and return what the write returned.",
    language: "javascript",
    source,
    input: value,
    output: value,
    inputSchemaId: "value.v1",
    outputSchemaId: "value.v1",
    tools: [tool],
    limits: { ...limits, ...overrides },
  });
}

const WRITE_ONCE = `async (input, tools) => {
  const result = await tools.call("external.write", input);
  if (result.status !== "succeeded") throw new Error("the write failed");
  return result.output;
}`;

function modeFor(tool: Tool) {
  const nested = new Budget(100, 10);
  return createCodeMode({
    adapter,
    invokeTool: (t, input, context) =>
      invokeTool(t, input, { ...context, permissions: { allow: [`tool:${tool.id}`, "effect:write"] }, budget: nested }),
  });
}

async function tempFile() {
  const directory = await mkdtemp(join(tmpdir(), "airlock-code-phase-"));
  return { filename: join(directory, "state.sqlite"), cleanup: () => rm(directory, { recursive: true, force: true }) };
}

const verifyHuman = async (credential: unknown) => {
  if (credential !== "approved") throw new Error("denied");
  return { id: "reviewer", projectId: "project", canApprove: true };
};

describe("durable code workflows", () => {
  it("asks for approval of the exact program, keeps it across a reopened store, runs the phase once and audits it", async () => {
    const { filename, cleanup } = await tempFile();
    try {
      const { counts, tool } = counter();
      const program = programOf(tool, WRITE_ONCE);
      const mode = modeFor(tool);
      const definitionFor = (store: ReturnType<typeof createSqliteStore>) =>
        defineDurableCodeWorkflow({
          id: "catalog.quote",
          version: "1",
          input: value,
          output: value,
          codeMode: mode,
          audit: createDurableCodeAudit({ store, scope }),
          phases: [{ id: "total", program, input: { kind: "input", path: [] } }],
          result: { kind: "step", stepId: "total", path: [] },
        });
      const first = createSqliteStore({ filename });
      await first.initialize();
      const definition = definitionFor(first);
      const phase = definition.nodes[0];
      if (phase?.kind !== "tool") throw new Error("a phase is a tool node");
      const hex = program.digest.slice("sha256:".length);
      expect(phase).toMatchObject({ approval: true, id: "total" });
      expect(phase.tool).toMatchObject({
        id: `code.${hex.slice(0, 32)}`,
        version: program.digest,
        effects: "write",
        costMicros: 6,
      });
      expect(phase.tool.capabilities).toEqual([
        "code:execute",
        "code:audit:v2",
        expect.stringMatching(/^code:audit-scope:[a-f0-9]{64}$/),
        `code:program:${program.digest}`,
      ]);
      const policy = {
        scope,
        permissions: { allow: [`tool:${phase.tool.id}`, "effect:write", ...phase.tool.capabilities] },
        policyVersion: "1",
        maxCostMicros: 6,
        verifyHuman,
      };
      const one = createScheduledWorkflowRuntime({ ...policy, store: first, workerId: "first" });
      const { run: submitted, settled: waiting } = await submitAndSettle(one, definition, { value: 2 }, "quote-1");
      expect(waiting).toMatchObject({ status: "waiting", budget: { spentMicros: 0, reservedMicros: 0 } });
      expect(counts.writes).toBe(0);
      const approval = waiting.steps.total?.approval;
      await one.close();
      await first.close();

      const second = createSqliteStore({ filename });
      await second.initialize();
      const reopened = definitionFor(second);
      expect(reopened.digest).toBe(definition.digest);
      const two = createScheduledWorkflowRuntime({ ...policy, store: second, workerId: "second" });
      expect((await two.inspect(submitted.id)).steps.total?.approval).toEqual(approval);
      await expect(
        two.approve({ id: submitted.id, nodeId: "total", digest: "a".repeat(64), credential: "approved" }),
      ).rejects.toMatchObject({ code: "CONFLICT" });
      await two.approve({
        id: submitted.id,
        nodeId: "total",
        digest: approval?.digest as string,
        credential: "approved",
      });
      const done = await two.runUntilSettled(reopened, submitted.id);
      // One write of 3 of the 6 reserved: the phase is charged what its program's calls cost.
      expect(done).toMatchObject({
        status: "succeeded",
        output: { value: 3 },
        budget: { spentMicros: 3, reservedMicros: 0 },
      });
      expect(done.steps.total?.approval?.humanId).toBe("reviewer");
      expect(counts.writes).toBe(1);
      expect((await two.runUntilSettled(reopened, submitted.id)).status).toBe("succeeded");
      expect(counts.writes).toBe(1);
      const record = await createDurableCodeAudit({ store: second, scope }).inspect(submitted.id, "total");
      expect(record).toEqual({
        format: 2,
        runId: submitted.id,
        phaseId: "total",
        executionId: `${submitted.id}/step:total:sandbox`,
        programDigest: program.digest,
        outcome: "succeeded",
        evidence: [
          {
            runId: submitted.id,
            receipt: {
              callId: `${submitted.id}/step:total:sandbox:code:1`,
              toolId: "external.write",
              execution: "succeeded",
              disclosure: "released",
            },
          },
        ],
        usage: { toolCalls: 1, unknownCalls: 0, knownCostMicros: 3, unknownCostMicros: 0, maximumCostMicros: 6 },
      });
      // Another scope's audit finds nothing.
      const other = createDurableCodeAudit({ store: second, scope: { principalId: "mallory", projectId: "project" } });
      expect(await other.inspect(submitted.id, "total")).toBeUndefined();
      await expect(other.inspect("nope", "total")).rejects.toMatchObject({ code: "INVALID_INPUT" });
      await expect(other.inspect(submitted.id, "__proto__")).rejects.toMatchObject({ code: "INVALID_INPUT" });
      await two.close();
      await second.close();
    } finally {
      await cleanup();
    }
  });

  it("refuses forged code modes, audits and programs, getters, too many calls, and bad graphs", async () => {
    const store = createSqliteStore({ filename: ":memory:" });
    await store.initialize();
    const { tool } = counter();
    const program = programOf(tool, WRITE_ONCE);
    const mode = modeFor(tool);
    const audit = createDurableCodeAudit({ store, scope });
    const base = {
      id: "durable.code",
      version: "1",
      input: value,
      output: value,
      codeMode: mode,
      audit,
      phases: [{ id: "phase", program, input: { kind: "input" as const, path: [] } }],
      result: { kind: "step" as const, stepId: "phase", path: [] },
    };
    const refused = (options: unknown, code = "INVALID_CONFIG") =>
      expect(() => defineDurableCodeWorkflow(options as typeof base)).toThrowError(expect.objectContaining({ code }));
    expect(defineDurableCodeWorkflow(base).nodes).toHaveLength(1);
    refused({ ...base, codeMode: { execute: mode.execute, adapter: mode.adapter } });
    refused({ ...base, audit: { inspect: audit.inspect } });
    refused({ ...base, phases: [{ ...base.phases[0], program: { ...program } }] });
    refused(Object.defineProperty({ ...base }, "phases", { enumerable: true, get: () => base.phases }));
    refused({ ...base, extra: true });
    refused({ ...base, phases: [] });
    refused({ ...base, phases: Array.from({ length: 129 }, (_, i) => ({ ...base.phases[0], id: `p${i}` })) });
    refused({ ...base, phases: [{ ...base.phases[0], dependsOn: ["missing"] }] });
    refused({
      ...base,
      phases: [
        { ...base.phases[0], id: "a", dependsOn: ["b"] },
        { ...base.phases[0], id: "b", dependsOn: ["a"] },
      ],
    });
    refused({
      ...base,
      phases: [
        { ...base.phases[0], id: "a" },
        { ...base.phases[0], id: "a" },
      ],
    });
    refused({
      ...base,
      phases: [
        { ...base.phases[0], id: "a" },
        { ...base.phases[0], id: "b", input: { kind: "step", stepId: "a", path: [] } },
      ],
    });
    refused({ ...base, phases: [{ ...base.phases[0], input: { kind: "input", path: Array(33).fill("x") } }] });
    refused(
      { ...base, phases: [{ ...base.phases[0], program: programOf(tool, WRITE_ONCE, { maxToolCalls: 65 }) }] },
      "LIMIT_EXCEEDED",
    );
    expect(() => createDurableCodeAudit({ store, scope, extra: 1 } as never)).toThrowError(
      expect.objectContaining({ code: "INVALID_CONFIG" }),
    );
    expect(() => createDurableCodeAudit({ store: {} as never, scope })).toThrowError(
      expect.objectContaining({ code: "INVALID_CONFIG" }),
    );
    expect(() => createDurableCodeAudit({ store, scope: { principalId: "a", projectId: "" } })).toThrowError(
      expect.objectContaining({ code: "INVALID_CONFIG" }),
    );
    await store.close();
  });

  it("fails closed when the store returns an audit record of another identity", async () => {
    const forged = {
      create: async () => {
        throw new Error("unused");
      },
      read: async (_scope: string, id: string) => ({
        scope: "wrong",
        id,
        kind: "code-audit",
        idempotencyKey: id,
        definitionHash: "0".repeat(64),
        version: 1,
        state: {},
      }),
    };
    const audit = createDurableCodeAudit({ store: forged, scope });
    await expect(audit.inspect("a".repeat(64), "total")).rejects.toMatchObject({ code: "STORAGE_UNAVAILABLE" });
  });

  it("does not run a phase whose audit belongs to another scope", async () => {
    const store = createSqliteStore({ filename: ":memory:" });
    await store.initialize();
    const phase = await runPhase(store, store, "scope", {
      auditScope: { principalId: "mallory", projectId: "project" },
    });
    expect(phase.result).toMatchObject({ status: "outcome_unknown", output: null });
    expect(phase.counts.writes).toBe(0);
    expect(await phase.audit.inspect(phase.result.id, "execute")).toBeUndefined();
    await phase.runtime.close();
    await store.close();
  });

  it("does not replay a write phase whose program failed after its write, and keeps the program's text out of the audit", async () => {
    const store = createSqliteStore({ filename: ":memory:" });
    await store.initialize();
    const phase = await runPhase(store, store, "uncertain", {
      source: `async (input, tools) => { await tools.call("external.write", input); throw new Error("SECRET private crash"); }`,
    });
    const { result } = phase;
    // What ran (the write, 3) is charged; the rest of the 6 reserved is given back.
    expect(result).toMatchObject({
      status: "outcome_unknown",
      output: null,
      budget: { spentMicros: 3, reservedMicros: 0 },
    });
    expect(result.steps.execute?.receipt).toMatchObject({ execution: "unknown", disclosure: "withheld" });
    const record = await phase.audit.inspect(result.id, "execute");
    expect(record).toMatchObject({
      outcome: "failed",
      usage: { toolCalls: 1, unknownCalls: 0, knownCostMicros: 3, unknownCostMicros: 0, maximumCostMicros: 6 },
      evidence: [{ receipt: { toolId: "external.write", execution: "succeeded" } }],
    });
    expect(JSON.stringify(record)).not.toContain("SECRET");
    await phase.runtime.runUntilSettled(phase.definition, result.id);
    expect(phase.counts.writes).toBe(1);
    await phase.runtime.close();
    await store.close();
  });
});

const backings = [
  {
    name: "SQLite",
    skip: false,
    async make() {
      const { filename, cleanup } = await tempFile();
      return { open: (): WorkflowStore => createSqliteStore({ filename }), cleanup };
    },
  },
  {
    name: "PostgreSQL",
    skip: url === undefined,
    async make() {
      const schema = freshSchema("airlock_phase_cost");
      return {
        open: (): WorkflowStore => createPostgresStore({ connectionString: url as string, schema }),
        cleanup: () => dropSchema(url as string, schema),
      };
    },
  },
];

/** Drives a run until it settles, approving each phase that waits for a person (at most `phases` of them). */
async function approveThrough(runtime: ScheduledWorkflowRuntime, definition: AnyWorkflow, id: string, phases: number) {
  let snapshot: WorkflowSnapshot = await runtime.runUntilSettled(definition, id);
  for (let approved = 0; snapshot.status === "waiting" && approved < phases; approved++) {
    const [nodeId, step] = Object.entries(snapshot.steps).find(([, item]) => item.status === "waiting") ?? [];
    expect(snapshot.budget.reservedMicros).toBe(0);
    await runtime.approve({
      id,
      nodeId: nodeId as string,
      digest: step?.approval?.digest as string,
      credential: "approved",
    });
    snapshot = await runtime.runUntilSettled(definition, id);
  }
  return snapshot;
}

describe.each(backings)("$name: a phase is charged what its program's calls cost", ({ skip, make }) => {
  /** A workflow of `phases` chained phases, each running `source` with `tool` (6 reserved: 2 calls of at most 3). */
  function chain(store: WorkflowStore, tool: Tool, source: string, phases = 1) {
    const program = programOf(tool, source);
    const ids = Array.from({ length: phases }, (_, i) => `phase${i + 1}`);
    const definition = defineDurableCodeWorkflow({
      id: "charged.code",
      version: "1",
      input: value,
      output: value,
      codeMode: modeFor(tool),
      audit: createDurableCodeAudit({ store, scope }),
      phases: ids.map((id, i) => ({
        id,
        program,
        input:
          i === 0
            ? { kind: "input" as const, path: [] }
            : { kind: "step" as const, stepId: ids[i - 1] as string, path: [] },
        ...(i === 0 ? {} : { dependsOn: [ids[i - 1] as string] }),
      })),
      result: { kind: "step", stepId: ids[phases - 1] as string, path: [] },
    });
    const phase = definition.nodes[0];
    if (phase?.kind !== "tool") throw new Error("a phase is a tool node");
    expect(phase.tool.costMicros).toBe(6);
    const runtime = (workerStore: WorkflowStore, workerId: string, maxCostMicros: number, extra = {}) =>
      createScheduledWorkflowRuntime({
        store: workerStore,
        workerId,
        scope,
        permissions: { allow: [`tool:${phase.tool.id}`, "effect:write", ...phase.tool.capabilities] },
        policyVersion: "1",
        maxCostMicros,
        verifyHuman,
        ...extra,
      });
    return { definition, runtime };
  }

  /** A backing with a store opened on it; `finish` closes what was opened and drops the backing. */
  async function opened() {
    const backing = await make();
    const stores: WorkflowStore[] = [];
    const open = async () => {
      const store = backing.open();
      stores.push(store);
      await store.initialize();
      return store;
    };
    return {
      open,
      store: await open(),
      finish: async () => {
        for (const store of stores) await store.close();
        await backing.cleanup();
      },
    };
  }

  /** Runs `phases` chained phases of one write each on a fresh backing under `maxCostMicros`, approving each. */
  async function runChain(phases: number, maxCostMicros: number) {
    const { store, finish } = await opened();
    try {
      const { counts, tool } = counter();
      const { definition, runtime } = chain(store, tool, WRITE_ONCE, phases);
      const worker = runtime(store, "chain", maxCostMicros);
      const run = await worker.submit(definition, { input: { value: 1 }, idempotencyKey: `chain-${phases}` });
      const done = await approveThrough(worker, definition, run.id, phases);
      await worker.close();
      return { done, writes: counts.writes };
    } finally {
      await finish();
    }
  }

  it.skipIf(skip)("spends 3 of the 6 a phase reserved when its one write cost 3", async () => {
    const { done, writes } = await runChain(1, 6);
    expect(done).toMatchObject({
      status: "succeeded",
      output: { value: 2 },
      budget: { spentMicros: 3, reservedMicros: 0 },
    });
    expect(writes).toBe(1);
  });

  it.skipIf(skip)("spends 3 when another worker on a reopened store approves and runs the phase", async () => {
    const { store, open, finish } = await opened();
    try {
      const { counts, tool } = counter();
      const first = chain(store, tool, WRITE_ONCE);
      const before = first.runtime(store, "before-restart", 6);
      const { run, settled } = await submitAndSettle(before, first.definition, { value: 1 }, "restart");
      expect(settled).toMatchObject({ status: "waiting" });
      await before.close();
      await store.close();
      const reopened = await open();
      const second = chain(reopened, tool, WRITE_ONCE);
      const after = second.runtime(reopened, "after-restart", 6);
      const done = await approveThrough(after, second.definition, run.id, 1);
      expect(done).toMatchObject({ status: "succeeded", budget: { spentMicros: 3, reservedMicros: 0 } });
      expect(counts.writes).toBe(1);
      await after.close();
    } finally {
      await finish();
    }
  });

  it.skipIf(skip)(
    "charges what ran of a phase that failed after its write, holds only an unknown call's cost, and a verifier's figure counts what was charged",
    async () => {
      const { store, finish } = await opened();
      try {
        const { counts, tool } = counter();
        const failing = chain(
          store,
          tool,
          `async (input, tools) => { await tools.call("external.write", input); throw new Error("after the write"); }`,
        );
        const verdicts: number[] = [];
        const worker = failing.runtime(store, "unknown", 6, {
          verifyExecution: async () => ({
            authorityId: "ledger",
            attestationId: `a${verdicts.length}`,
            execution: "succeeded" as const,
            knownCostMicros: verdicts.shift() as number,
          }),
        });
        const run = await worker.submit(failing.definition, { input: { value: 1 }, idempotencyKey: "after-write" });
        const unknown = await approveThrough(worker, failing.definition, run.id, 1);
        expect(unknown).toMatchObject({ status: "outcome_unknown", budget: { spentMicros: 3, reservedMicros: 0 } });
        expect(unknown.steps.phase1?.receipt).toMatchObject({ execution: "unknown" });
        expect(counts.writes).toBe(1);
        // An attested cost below what ran gives nothing back; above it, the difference is charged, once.
        verdicts.push(1);
        const low = await worker.reconcile(failing.definition, { id: run.id, nodeId: "phase1", credential: "ledger" });
        expect(low).toMatchObject({ status: "outcome_unknown", budget: { spentMicros: 3, reservedMicros: 0 } });

        const second = await worker.submit(failing.definition, {
          input: { value: 2 },
          idempotencyKey: "after-write-2",
        });
        await approveThrough(worker, failing.definition, second.id, 1);
        verdicts.push(5);
        const high = await worker.reconcile(failing.definition, {
          id: second.id,
          nodeId: "phase1",
          credential: "ledger",
        });
        expect(high).toMatchObject({ budget: { spentMicros: 5, reservedMicros: 0 } });
        expect(high.steps.phase1?.receipt).toMatchObject({ execution: "succeeded" });
        await worker.close();

        // A write whose own outcome is unknown keeps its 3 held; the 3 the program never used are given back.
        const lost = defineTool({
          ...tool,
          execute: () => {
            throw new Error("the line dropped");
          },
        }) as Tool;
        const uncertain = chain(store, lost, WRITE_ONCE);
        const other = uncertain.runtime(store, "uncertain", 6);
        const third = await other.submit(uncertain.definition, {
          input: { value: 3 },
          idempotencyKey: "unknown-write",
        });
        expect(await approveThrough(other, uncertain.definition, third.id, 1)).toMatchObject({
          status: "outcome_unknown",
          budget: { spentMicros: 0, reservedMicros: 3 },
        });
        await other.close();
      } finally {
        await finish();
      }
    },
  );

  it.skipIf(skip)(
    "runs two chained phases on a budget of 9, which their reservations alone (12) would pass",
    async () => {
      const { done, writes } = await runChain(2, 9);
      expect(done).toMatchObject({
        status: "succeeded",
        output: { value: 3 },
        budget: { spentMicros: 6, reservedMicros: 0 },
      });
      expect(writes).toBe(2);
    },
  );
});

/**
 * Runs a program (WRITE_ONCE unless `source`) as an approved phase of a run (key `key`) on `store`, its audit on
 * `auditStore` for `auditScope` (the run's scope unless given). The runtime is left open for the caller to close.
 */
async function runPhase(
  store: ReturnType<typeof createSqliteStore>,
  auditStore: ReturnType<typeof createSqliteStore>,
  key: string,
  options: { source?: string; auditScope?: { principalId: string; projectId: string } } = {},
) {
  const { counts, tool } = counter();
  const audit = createDurableCodeAudit({ store: auditStore, scope: options.auditScope ?? scope });
  const definition = defineDurableCodeWorkflow({
    id: "audited.code",
    version: "1",
    input: value,
    output: value,
    codeMode: modeFor(tool),
    audit,
    phases: [
      { id: "execute", program: programOf(tool, options.source ?? WRITE_ONCE), input: { kind: "input", path: [] } },
    ],
    result: { kind: "step", stepId: "execute", path: [] },
  });
  const phase = definition.nodes[0];
  if (phase?.kind !== "tool") throw new Error("a phase is a tool node");
  const runtime = createScheduledWorkflowRuntime({
    store,
    scope,
    workerId: "audited",
    permissions: { allow: [`tool:${phase.tool.id}`, "effect:write", ...phase.tool.capabilities] },
    policyVersion: "1",
    maxCostMicros: 6,
    verifyHuman,
  });
  const run = await runtime.submit(definition, { input: { value: 1 }, idempotencyKey: key });
  const result = await approveThrough(runtime, definition, run.id, 1);
  return { result, audit, counts, runtime, definition };
}

describe("audit records", () => {
  it("refuses a stored record past 64 evidence items or 64 KiB as STORAGE_UNAVAILABLE, and takes one at the limits", async () => {
    const store = createSqliteStore({ filename: ":memory:" });
    await store.initialize();
    try {
      const { result, audit, runtime } = await runPhase(store, store, "limits");
      await runtime.close();
      expect(result.status).toBe("succeeded");
      const [stored] = await store.list({ kind: "code-audit", limit: 10 });
      if (stored === undefined) throw new Error("the phase left no audit record");
      const original = structuredClone(stored.state) as {
        executionId: string;
        evidence: { runId: string; receipt: { callId: string; toolId: string } }[];
        usage: { toolCalls: number };
      };
      const rewrite = async (edit: (state: typeof original) => void) => {
        const state = structuredClone(original);
        edit(state);
        await store.mutate(stored.scope, stored.id, () => ({ state: state as never, events: [] }));
        return state;
      };
      const items = (n: number) => (state: typeof original) => {
        const first = state.evidence[0] as (typeof original.evidence)[number];
        state.evidence = Array.from({ length: n }, (_, i) => ({
          runId: first.runId,
          receipt: { ...first.receipt, callId: `${state.executionId}:code:${i + 1}` },
        }));
        state.usage.toolCalls = n;
      };
      await rewrite(items(64));
      expect((await audit.inspect(result.id, "execute"))?.evidence).toHaveLength(64);
      await rewrite(items(65));
      await expect(audit.inspect(result.id, "execute")).rejects.toMatchObject({ code: "STORAGE_UNAVAILABLE" });
      // 64 KiB of JSON exactly is taken; one byte more is refused.
      const padded = (extra: number) => (state: typeof original) => {
        items(64)(state);
        const size = Buffer.byteLength(JSON.stringify(state));
        const receipt = (state.evidence[0] as (typeof original.evidence)[number]).receipt;
        receipt.toolId += "x".repeat(64 * 1024 - size + extra);
      };
      const atLimit = await rewrite(padded(0));
      expect(Buffer.byteLength(JSON.stringify(atLimit))).toBe(64 * 1024);
      expect(await audit.inspect(result.id, "execute")).toMatchObject({ format: 2, outcome: "succeeded" });
      const past = await rewrite(padded(1));
      expect(Buffer.byteLength(JSON.stringify(past))).toBe(64 * 1024 + 1);
      await expect(audit.inspect(result.id, "execute")).rejects.toMatchObject({ code: "STORAGE_UNAVAILABLE" });
    } finally {
      await store.close();
    }
  });

  it("never overwrites a phase's record: a phase run again under a run that has one ends outcome_unknown, the first record kept", async () => {
    // Two runtimes' stores, one audit store: the same scope and key give the same run id in both.
    const first = createSqliteStore({ filename: ":memory:" });
    const second = createSqliteStore({ filename: ":memory:" });
    const audits = createSqliteStore({ filename: ":memory:" });
    for (const store of [first, second, audits]) await store.initialize();
    try {
      const once = await runPhase(first, audits, "twice");
      await once.runtime.close();
      expect(once.result.status).toBe("succeeded");
      const kept = await once.audit.inspect(once.result.id, "execute");
      const again = await runPhase(second, audits, "twice");
      await again.runtime.close();
      expect(again.result.id).toBe(once.result.id);
      // The program ran (its store knew nothing of the first run), but its record could not be written.
      expect(again.counts.writes).toBe(1);
      expect(again.result).toMatchObject({ status: "outcome_unknown", output: null });
      expect(again.result.steps.execute?.receipt).toMatchObject({ execution: "unknown" });
      expect(await again.audit.inspect(once.result.id, "execute")).toEqual(kept);
      const [record] = await audits.list({ kind: "code-audit", limit: 10 });
      expect(record?.version).toBe(1);
      expect(await audits.events(record?.scope as string, record?.id as string)).toHaveLength(1);
    } finally {
      for (const store of [first, second, audits]) await store.close();
    }
  });
});
