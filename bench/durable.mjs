// Durable programs: what a durable phase costs over a plain execute (SQLite file, PostgreSQL), and how long a paused
// program takes to resume against the number of calls in its journal (each is replayed, none re-run).
// PostgreSQL rows need AIRLOCK_TEST_POSTGRES_URL; without it they are left out, saying so. Writes
// bench/results/durable-latest.json.
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Budget, defineTool, invokeTool, z } from "airlock-codemode";
import { createQuickJsSandboxAdapter } from "airlock-codemode/adapter-code-quickjs";
import { createCodeMode, defineCodeProgram } from "airlock-codemode/code-mode";
import { createDurableCodeAudit, defineDurableCodeWorkflow } from "airlock-codemode/code-mode-workflows";
import { createScheduledWorkflowRuntime } from "airlock-codemode/workflows";
import { createPostgresStore } from "airlock-codemode/workflows/postgres";
import { createSqliteStore } from "airlock-codemode/workflows/sqlite";
import { median } from "./lib.mjs";

const ITERATIONS = 20;
/** A plain execute is timed over more executions, after WARM_ITERATIONS that are not. */
const WARM_ITERATIONS = 200;
const PLAIN_ITERATIONS = 500;
const RESUME_CALLS = [0, 10, 100, 1_000];
const RESUME_ITERATIONS = 5;
const scope = { principalId: "bench", projectId: "bench" };
/** A signal that never aborts: execute requires one, and the bench cancels nothing. */
const NO_ABORT = new AbortController().signal;
const value = z.object({ value: z.number() });
const limits = (maxToolCalls) => ({
  cpuMillis: 10_000,
  wallTimeMillis: 60_000,
  memoryBytes: 64 * 1024 * 1024,
  scratchBytes: 0,
  maxInputBytes: 1_024,
  maxOutputBytes: 1_024,
  maxToolInputBytes: 1_024,
  maxToolCalls,
  maxToolConcurrency: 1,
});
const verifyHuman = async () => ({ id: "bench", projectId: "bench", canApprove: true });

const adapter = createQuickJsSandboxAdapter({ poolSize: 1 });
// defineTool keeps `execute` out of the tool's own properties: other tools are made from this spec, not the tool.
const writeSpec = {
  id: "bench.write",
  version: "1",
  description: "A write that does nothing.",
  input: value,
  output: value,
  effects: "write",
  capabilities: [],
  costMicros: 1,
  execute: (input) => input,
};
const write = defineTool(writeSpec);
const program = defineCodeProgram({
  id: "bench.phase",
  version: "1",
  intent: "One write.",
  language: "javascript",
  source: `async (input, tools) => (await tools.call("bench.write", input)).output`,
  input: value,
  output: value,
  inputSchemaId: "v",
  outputSchemaId: "v",
  tools: [write],
  limits: limits(2),
});
const budget = new Budget(Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER);
const broker = (tool, input, context) =>
  invokeTool(tool, input, {
    ...context,
    permissions: { allow: [`tool:${tool.id}`, "effect:read", "effect:write"] },
    budget,
  });
const plainMode = createCodeMode({ adapter, invokeTool: broker });

async function timed(iterations, body) {
  const times = [];
  for (let i = 0; i < iterations; i++) {
    const start = performance.now();
    await body(i);
    times.push(performance.now() - start);
  }
  return median(times);
}

const results = { date: new Date().toISOString(), node: process.version, rows: [] };
const row = (name, ms, note = "") => {
  results.rows.push({ name, ms: Number(ms.toFixed(3)), note });
  console.log(`${name.padEnd(58)} ${ms.toFixed(2).padStart(9)} ms  ${note}`);
};

// ---- a durable phase against a plain execute ----
let seq = 0;
// Warm-up: the pool's worker and VMs, and the JIT on both threads; the first executions take 5-30x the later ones.
await timed(WARM_ITERATIONS, () =>
  plainMode.execute(program, { value: 1 }, { runId: "bench", executionId: `warm-${seq++}`, scope, signal: NO_ABORT }),
);
const plain = await timed(PLAIN_ITERATIONS, () =>
  plainMode.execute(program, { value: 1 }, { runId: "bench", executionId: `plain-${seq++}`, scope, signal: NO_ABORT }),
);
row("plain execute (one write)", plain);

async function phaseRow(name, store) {
  await store.initialize();
  const audit = createDurableCodeAudit({ store, scope });
  const definition = defineDurableCodeWorkflow({
    id: "bench.durable",
    version: "1",
    input: value,
    output: value,
    codeMode: plainMode,
    audit,
    phases: [{ id: "phase", program, input: { kind: "input", path: [] } }],
    result: { kind: "step", stepId: "phase", path: [] },
  });
  const phase = definition.nodes[0];
  const runtime = createScheduledWorkflowRuntime({
    store,
    workerId: "bench",
    scope,
    permissions: { allow: [`tool:${phase.tool.id}`, "effect:write", ...phase.tool.capabilities] },
    policyVersion: "1",
    maxCostMicros: 1_000,
    verifyHuman,
  });
  const stamp = Date.now();
  const ms = await timed(ITERATIONS, async (i) => {
    const run = await runtime.submit(definition, { input: { value: 1 }, idempotencyKey: `${stamp}-${i}` });
    const waiting = await runtime.runUntilSettled(definition, run.id);
    await runtime.approve({
      id: run.id,
      nodeId: "phase",
      digest: waiting.steps.phase.approval.digest,
      credential: "c",
    });
    const done = await runtime.runUntilSettled(definition, run.id);
    if (done.status !== "succeeded") throw new Error(`the phase ended ${done.status}`);
  });
  row(`durable phase, ${name} (submit, approve, run, audit)`, ms, `${(ms / plain).toFixed(1)}x plain`);
  await runtime.close();
  await store.close();
}

const directory = await mkdtemp(join(tmpdir(), "airlock-bench-durable-"));
try {
  await phaseRow("SQLite", createSqliteStore({ filename: join(directory, "phases.sqlite") }));
  const url = process.env.AIRLOCK_TEST_POSTGRES_URL;
  const schema = `airlock_bench_${process.pid}`;
  if (url) {
    await phaseRow("PostgreSQL", createPostgresStore({ connectionString: url, schema }));
    const pg = (await import("pg")).default;
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await client.end();
  } else console.log("PostgreSQL rows left out: AIRLOCK_TEST_POSTGRES_URL is not set");

  // ---- resume time against the journal's length ----
  const store = createSqliteStore({ filename: join(directory, "journal.sqlite") });
  await store.initialize();
  const pay = defineTool({ ...writeSpec, id: "bench.pay", approval: "always" });
  const read = defineTool({ ...writeSpec, id: "bench.read", effects: "read" });
  const approving = createCodeMode({ adapter, invokeTool: broker, approvals: { store, verifyHuman } });
  for (const calls of RESUME_CALLS) {
    const journaled = defineCodeProgram({
      ...program,
      id: `bench.resume-${calls}`,
      source: `async (input, tools) => {
        let sum = 0;
        for (let i = 0; i < ${calls}; i++) sum += (await tools.call("bench.read", { value: i })).output.value;
        await tools.call("bench.pay", { value: sum });
        return { value: sum };
      }`,
      tools: [read, pay],
      limits: limits(calls + 1),
    });
    const first = await timed(RESUME_ITERATIONS, async (i) => {
      const outcome = await approving.execute(
        journaled,
        { value: 0 },
        { runId: "b", executionId: `r${calls}-${i}`, scope, signal: NO_ABORT },
      );
      if (outcome.status !== "waiting") throw new Error(`expected waiting, got ${outcome.status}`);
      await approving.approve({
        scope,
        executionId: `r${calls}-${i}`,
        digest: outcome.approval.digest,
        credential: "c",
      });
    });
    const resume = await timed(RESUME_ITERATIONS, async (i) => {
      const outcome = await approving.resume(
        journaled,
        { value: 0 },
        { runId: "b", executionId: `r${calls}-${i}`, scope, signal: NO_ABORT },
      );
      if (outcome.status !== "succeeded") throw new Error(`expected succeeded, got ${outcome.status}`);
    });
    row(
      `journaled run to the approval, ${calls} calls (SQLite)`,
      first,
      `${(first / Math.max(calls, 1)).toFixed(3)} ms a call`,
    );
    row(
      `resume after approval, ${calls} calls replayed (SQLite)`,
      resume,
      `${(resume / Math.max(calls, 1)).toFixed(3)} ms a replayed call`,
    );
  }
  await store.close();
} finally {
  await adapter.close();
  await rm(directory, { recursive: true, force: true });
}
await writeFile(new URL("./results/durable-latest.json", import.meta.url), `${JSON.stringify(results, null, 2)}\n`);
