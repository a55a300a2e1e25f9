// Resuming a paused program: replaying its journal against restoring a snapshot of its VM taken at the pause, for
// journals of 1 to 10,000 calls. Three parts:
// 1. Airlock's own resume through the code mode (`mode.resume`, the journal in a SQLite store), both ways: by replay
//    (every earlier call answered from the journal) and from the snapshot Airlock keeps at the pause (read from the
//    store, checked, restored on a VM of the worker pool, the open calls answered), up to the approved call's end;
//    `approvals.snapshotMinCalls` 0 keeps a snapshot at every pause, and the largest keeps none. Also what a pause
//    costs with a snapshot taken and stored, and what the store keeps of it. The cross-over chooses
//    SNAPSHOT_MIN_CALLS;
// 2. the same program on the engine alone, one VM of the same wasm: replay (a fresh VM, the program run again, each
//    call checked against the journal and answered from it) against snapshot (at the pause: snapshot, serialize,
//    gzip; to resume: gunzip, deserialize, restore into a fresh instance, answer the pending call, run to the end);
// 3. what a snapshot costs in the store: the serialized bytes as base64 in a record of the workflows store (SQLite
//    file, synchronous FULL), written at the pause and read back at the resume.
// Every figure is the median of RUNS; the spread (min-max) is printed beside it. Writes
// bench/results/snapshot-latest.json.
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gunzipSync, gzipSync } from "node:zlib";
import { Budget, defineTool, invokeTool, z } from "airlock-codemode";
import { createQuickJsSandboxAdapter } from "airlock-codemode/adapter-code-quickjs";
import { createCodeMode, defineCodeProgram, SNAPSHOT_MIN_CALLS } from "airlock-codemode/code-mode";
import { createSqliteStore } from "airlock-codemode/workflows/sqlite";
import { QuickJS } from "quickjs-wasi";
import { median, runtime } from "./lib.mjs";

const CALLS = [1, 10, 100, 1_000, 10_000];
/** Journal lengths of the code-mode part: the four of the engine's and some between, where the two ways meet. */
const CODE_MODE_CALLS = [10, 100, 200, 300, 500, 700, 1_000, 2_000, 10_000];
/** Code-mode resumes per journal length and way (each needs its own journal, built by a first run to the approval). */
const CODE_MODE_RUNS = Number(process.env.SNAPSHOT_BENCH_CODE_MODE_RUNS ?? 3);
/** Engine-level measurements per journal length. */
const RUNS = Number(process.env.SNAPSHOT_BENCH_RUNS ?? 7);
const scope = { principalId: "bench", projectId: "bench" };
const NO_ABORT = new AbortController().signal;
/** `snapshotMinCalls` that keeps no snapshot: no program makes this many calls. */
const NEVER = 100_000;

const results = { date: new Date().toISOString(), runtime, snapshotMinCalls: SNAPSHOT_MIN_CALLS, rows: [] };
const spread = (values) => `${Math.min(...values).toFixed(2)}-${Math.max(...values).toFixed(2)}`;
const row = (name, values, unit = "ms", extra = {}) => {
  const m = median(values);
  results.rows.push({
    name,
    unit,
    median: Number(m.toFixed(3)),
    min: Math.min(...values),
    max: Math.max(...values),
    ...extra,
  });
  const note = Object.entries(extra)
    .map(([k, v]) => `${k} ${v}`)
    .join(", ");
  console.log(`${name.padEnd(62)} ${m.toFixed(2).padStart(10)} ${unit} (${spread(values)})  ${note}`);
};
console.log(`${runtime}; medians of ${RUNS} (engine) and ${CODE_MODE_RUNS} (code mode) runs, min-max in brackets`);

// ---- 1. Airlock's resume through the code mode, both ways ----
const value = z.object({ value: z.number() });
const echo = {
  version: "1",
  description: "Answers its input.",
  input: value,
  output: value,
  capabilities: [],
  costMicros: 1,
  execute: (input) => input,
};
const read = defineTool({ ...echo, id: "bench.read", effects: "read" });
const pay = defineTool({ ...echo, id: "bench.pay", effects: "write", approval: "always" });
const budget = new Budget(Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER);
const broker = (tool, input, context) =>
  invokeTool(tool, input, {
    ...context,
    permissions: { allow: [`tool:${tool.id}`, "effect:read", "effect:write"] },
    budget,
  });
const verifyHuman = async () => ({ id: "bench", projectId: "bench", canApprove: true });
const directory = await mkdtemp(join(tmpdir(), "airlock-bench-snapshot-"));
const adapter = createQuickJsSandboxAdapter({ poolSize: 1 });
const programOf = (calls) =>
  defineCodeProgram({
    id: `bench.snapshot-${calls}`,
    version: "1",
    intent: "Reads, then one approved write.",
    language: "javascript",
    source: `async (input, tools) => {
      let sum = 0;
      for (let i = 0; i < ${calls}; i++) sum += (await tools.call("bench.read", { value: i })).output.value;
      await tools.call("bench.pay", { value: sum });
      return { value: sum };
    }`,
    input: value,
    output: value,
    inputSchemaId: "v",
    outputSchemaId: "v",
    tools: [read, pay],
    limits: {
      cpuMillis: 60_000,
      wallTimeMillis: 600_000,
      memoryBytes: 64 * 1024 * 1024,
      scratchBytes: 0,
      maxInputBytes: 1_024,
      maxOutputBytes: 1_024,
      maxToolInputBytes: 1_024,
      maxToolCalls: calls + 1,
      maxToolConcurrency: 1,
    },
  });
const ways = [
  { way: "replay", snapshotMinCalls: NEVER },
  { way: "snapshot", snapshotMinCalls: 0 },
];
const codeMode = [];
try {
  // The journals are built in memory (a run to the approval on a file costs a synchronous write per call); the resume
  // reads them back through the same store API and writes its own few entries.
  const store = createSqliteStore({ filename: ":memory:" });
  await store.initialize();
  const modes = Object.fromEntries(
    ways.map(({ way, snapshotMinCalls }) => [
      way,
      createCodeMode({ adapter, invokeTool: broker, approvals: { store, verifyHuman, snapshotMinCalls } }),
    ]),
  );
  let sequence = 0;
  /** Runs to the pause, approves, and times the pause and the resume. */
  const pauseAndResume = async (mode, program) => {
    const options = { runId: "b", executionId: `s${++sequence}`, scope, signal: NO_ABORT };
    let start = performance.now();
    const paused = await mode.execute(program, { value: 0 }, options);
    const pause = performance.now() - start;
    if (paused.status !== "waiting") throw new Error(`expected waiting, got ${paused.status}`);
    // The snapshot the pause kept (newest first), as the store holds it: gzipped, as base64.
    const kept = (await store.list({ kind: "code-snapshot", limit: 1 }))[0]?.state.data;
    await mode.approve({ scope, executionId: options.executionId, digest: paused.approval.digest, credential: "c" });
    start = performance.now();
    const done = await mode.resume(program, { value: 0 }, options);
    const resume = performance.now() - start;
    if (done.status !== "succeeded") throw new Error(`expected succeeded, got ${done.status}`);
    return { pause, resume, stored: typeof kept === "string" ? kept.length : 0 };
  };
  // A first pass of each way warms the code mode and is not reported.
  for (const { way } of ways) await pauseAndResume(modes[way], programOf(10));
  for (const calls of CODE_MODE_CALLS) {
    const program = programOf(calls);
    const times = { replay: [], snapshot: [] };
    let stored = 0;
    // The two ways in turn, so that drifts of the machine hit both alike.
    for (let i = 0; i < CODE_MODE_RUNS; i++) {
      for (const { way } of ways) {
        const measured = await pauseAndResume(modes[way], program);
        times[way].push(measured.resume);
        if (way === "snapshot") stored = measured.stored;
      }
    }
    for (const { way } of ways) {
      row(`code mode: resume by ${way}, ${calls} calls`, times[way], "ms", {
        "per call": `${(median(times[way]) / calls).toFixed(3)} ms`,
        ...(way === "snapshot" ? { "stored (base64 of gzip)": stored } : {}),
      });
    }
    codeMode.push({ calls, replay: median(times.replay), snapshot: median(times.snapshot) });
  }
  // What a pause costs with a snapshot taken, gzipped and stored (the run is short: the difference is the snapshot).
  const pauses = { replay: [], snapshot: [] };
  for (let i = 0; i < RUNS; i++) {
    for (const { way } of ways) pauses[way].push((await pauseAndResume(modes[way], programOf(10))).pause);
  }
  for (const { way } of ways)
    row(`code mode: pause after 10 calls, ${way === "snapshot" ? "with" : "without"} a snapshot`, pauses[way]);
  await store.close();
} finally {
  await adapter.close();
}
const codeCrossing = codeMode.find((e) => e.snapshot < e.replay);
console.log(
  codeCrossing
    ? `code mode: resuming from a snapshot is faster than replaying from ${codeCrossing.calls} calls on (SNAPSHOT_MIN_CALLS ${SNAPSHOT_MIN_CALLS})`
    : "code mode: no cross-over up to 10,000 calls: replay stays faster",
);
results.codeModeCrossOverCalls = codeCrossing?.calls ?? null;

// ---- 2. the engine alone: replay against snapshot and restore ----
const wasm = new WebAssembly.Module(
  (await import("node:fs")).readFileSync(createRequire(import.meta.url).resolve("quickjs-wasi/quickjs.wasm")),
);
// The guest side of a call as Airlock's prelude has it: the host function only notes the call; the answer comes
// later through `__settle`, which resolves the promise the program awaits.
const guest = (calls) => `
  const pending = new Map();
  let next = 0;
  const call = (tool, input) => new Promise((resolve) => {
    const id = ++next;
    pending.set(id, resolve);
    __host(id, tool, JSON.stringify(input));
  });
  globalThis.__settle = (id, json) => { const resolve = pending.get(id); pending.delete(id); resolve(JSON.parse(json)); };
  globalThis.__result = undefined;
  (async () => {
    let sum = 0;
    for (let i = 0; i < ${calls}; i++) sum += (await call("bench.read", { value: i })).output.value;
    await call("bench.pay", { value: sum });
    globalThis.__result = sum;
  })();
`;

/** A VM whose host function queues the program's calls. */
function bind(vm, issued) {
  return (id, tool, args) => {
    issued.push({ id: id.toNumber(), tool: tool.toString(), args: args.toString() });
    return vm.undefined;
  };
}
function settle(vm, id, json) {
  const fn = vm.global.getProp("__settle");
  const idHandle = vm.newNumber(id);
  const jsonHandle = vm.newString(json);
  vm.callFunction(fn, vm.undefined, idHandle, jsonHandle).dispose();
  for (const handle of [fn, idHandle, jsonHandle]) handle.dispose();
  vm.executePendingJobs();
}
function numberAt(vm, name) {
  const handle = vm.global.getProp(name);
  const number = handle.toNumber();
  handle.dispose();
  return number;
}
const answerOf = (args) => JSON.stringify({ status: "succeeded", output: JSON.parse(args) });

/** The first attempt, up to the pending approved call: returns the VM and the journal of its calls. */
async function runToPause(calls) {
  const vm = await QuickJS.create(wasm);
  const issued = [];
  const host = vm.newFunction("__host", bind(vm, issued));
  vm.setProp(vm.global, "__host", host);
  host.dispose();
  vm.evalCode(guest(calls)).dispose();
  vm.executePendingJobs();
  const journal = [];
  while (issued.length > 0) {
    const c = issued.shift();
    if (c.tool === "bench.pay") return { vm, journal, pending: c };
    const answer = answerOf(c.args);
    journal.push({ ...c, answer });
    settle(vm, c.id, answer);
  }
  throw new Error("the program did not reach its approved call");
}

/** Resume by replay: a fresh VM runs the program again; every journaled call is checked and answered. */
async function replayResume(vm, calls, journal) {
  const issued = [];
  const host = vm.newFunction("__host", bind(vm, issued));
  vm.setProp(vm.global, "__host", host);
  host.dispose();
  vm.evalCode(guest(calls)).dispose();
  vm.executePendingJobs();
  let at = 0;
  while (issued.length > 0) {
    const c = issued.shift();
    const entry = journal[at++];
    if (entry === undefined) {
      settle(vm, c.id, answerOf(c.args));
      continue;
    }
    if (entry.id !== c.id || entry.tool !== c.tool || entry.args !== c.args) throw new Error("the replay diverged");
    settle(vm, c.id, entry.answer);
  }
  return numberAt(vm, "__result");
}

/** Resume from a snapshot: bytes from the store, a fresh instance, the pending call answered. */
async function snapshotResume(stored, pending, parts) {
  let start = performance.now();
  const snapshot = QuickJS.deserializeSnapshot(gunzipSync(stored));
  parts.decode.push(performance.now() - start);
  start = performance.now();
  const vm = await QuickJS.restore(snapshot, wasm);
  parts.instantiate.push(performance.now() - start);
  const issued = [];
  vm.registerHostCallback("__host", bind(vm, issued));
  settle(vm, pending.id, answerOf(pending.args));
  if (issued.length > 0) throw new Error("the restored program made a call it had not made before");
  const sum = numberAt(vm, "__result");
  vm.dispose();
  return sum;
}

const expected = (calls) => (calls * (calls - 1)) / 2;
const engine = [];
for (const calls of CALLS) {
  const replay = [];
  const fresh = [];
  const take = [];
  const restore = [];
  const parts = { decode: [], instantiate: [] };
  let bytes = 0;
  let gzipped = 0;
  let stored;
  let pending;
  for (let i = 0; i < RUNS; i++) {
    const paused = await runToPause(calls);
    pending = paused.pending;
    let start = performance.now();
    const raw = QuickJS.serializeSnapshot(paused.vm.snapshot());
    stored = gzipSync(raw, { level: 1 });
    take.push(performance.now() - start);
    bytes = raw.byteLength;
    gzipped = stored.byteLength;
    paused.vm.dispose();

    start = performance.now();
    const vm = await QuickJS.create(wasm);
    fresh.push(performance.now() - start);
    start = performance.now();
    if ((await replayResume(vm, calls, paused.journal)) !== expected(calls)) throw new Error("replay: wrong result");
    replay.push(performance.now() - start);
    vm.dispose();

    start = performance.now();
    if ((await snapshotResume(stored, pending, parts)) !== expected(calls)) throw new Error("restore: wrong result");
    restore.push(performance.now() - start);
  }
  row(`engine: resume by replay, ${calls} calls (a VM at hand)`, replay);
  row(`engine: resume from a snapshot, ${calls} calls (restore + run on)`, restore);
  row(`  of which gunzip + deserialize`, parts.decode);
  row(`  of which QuickJS.restore (a new instance, the memory copied)`, parts.instantiate);
  row(`engine: snapshot at the pause, ${calls} calls (take + gzip)`, take, "ms", {
    bytes,
    gzipped,
  });
  engine.push({ calls, replay: median(replay), restore: median(restore), fresh: median(fresh), bytes, gzipped });
}
const freshVm = median(engine.map((e) => e.fresh));
console.log(
  `(a fresh VM of the plain module, which replay gets from the pool already reset: ${freshVm.toFixed(2)} ms)`,
);
const crossing = engine.find((e) => e.restore < e.replay);
console.log(
  crossing
    ? `cross-over: restoring a snapshot is faster than replaying from ${crossing.calls} calls on`
    : "no cross-over up to 10,000 calls: replay stays faster",
);
results.crossOverCalls = crossing?.calls ?? null;

// ---- 3. a snapshot in the store ----
try {
  const store = createSqliteStore({ filename: join(directory, "snapshots.sqlite") });
  await store.initialize();
  for (const e of [engine[0], engine.at(-1)]) {
    const paused = await runToPause(e.calls);
    const encoded = gzipSync(QuickJS.serializeSnapshot(paused.vm.snapshot()), { level: 1 }).toString("base64");
    paused.vm.dispose();
    const writes = [];
    const reads = [];
    for (let i = 0; i < RUNS; i++) {
      const id = `snap-${e.calls}-${i}`;
      let start = performance.now();
      await store.create({
        scope: "bench",
        id,
        kind: "bench-snapshot",
        idempotencyKey: id,
        definitionHash: "bench",
        state: { snapshot: encoded },
      });
      writes.push(performance.now() - start);
      start = performance.now();
      const record = await store.read("bench", id);
      Buffer.from(record.state.snapshot, "base64");
      reads.push(performance.now() - start);
    }
    row(`store: write a snapshot, ${e.calls} calls (SQLite file)`, writes, "ms", { base64: encoded.length });
    row(`store: read a snapshot back, ${e.calls} calls (SQLite file)`, reads);
  }
  await store.close();
} finally {
  await rm(directory, { recursive: true, force: true });
}
await writeFile(new URL("./results/snapshot-latest.json", import.meta.url), `${JSON.stringify(results, null, 2)}\n`);
