// Airlock against pi-codemode 1.6.0 on the same work, in one process run. Prints a table of medians and the ratio
// pi / Airlock for each row, and writes the figures to bench/results/latest.json.
//   npm run bench            (QUICK=1 for fewer iterations)
import { mkdirSync, writeFileSync } from "node:fs";
import { availableParallelism, cpus, totalmem } from "node:os";
import { Worker } from "node:worker_threads";
import {
  InlineCodemodeSandbox as PiInline,
  CodemodeSandbox as PiSandbox,
  loadQuickJSWasm as piWasm,
} from "@earendil-works/pi-codemode";
import { CodemodeSandbox, InlineCodemodeSandbox } from "../dist/index.js";
import { benchProgress, median, runtime, timeEach } from "./lib.mjs";

const quick = process.env.QUICK === "1";
const progress = benchProgress();
const n = (full, small) => (quick ? small : full);
const echo = { name: "echo", execute: async (args) => args };
const sleep10 = { name: "sleep", execute: () => new Promise((resolve) => setTimeout(() => resolve(1), 10)) };
const tools = [echo, sleep10];

/**
 * Per-call cost of Airlock and pi in us: 1,000 sequential calls per execution (so that the execution's own cost and
 * timer noise are small next to them), minus an execution without calls. The two are measured in alternation, a few
 * executions each in turn, so that this machine's drifts hit both alike.
 */
async function perCall(airlock, pi, rounds, floor) {
  const loop = (n) => `for (let i = 0; i < ${n}; i++) await tools.echo(i); return 1;`;
  const samples = { airlock: { base: [], calls: [] }, pi: { base: [], calls: [] } };
  const floors = [];
  for (let round = 0; round < rounds; round++) {
    if (floor) floors.push(await floor.time(1000));
    for (const [name, sandbox, each] of [
      ["airlock", airlock, 3],
      ["pi", pi, 1],
    ]) {
      samples[name].base.push(await timeEach(sandbox, loop(0), each));
      samples[name].calls.push(await timeEach(sandbox, loop(1000), each));
      // pi ends each execution's worker thread in the background: let that finish before the other side is timed.
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
  const perCallUs = ({ base, calls }) => ((median(calls) - median(base)) / 1000) * 1000;
  return [perCallUs(samples.airlock), perCallUs(samples.pi), floor ? median(floors) : undefined];
}

/**
 * The floor under a tool call through a worker, in us: an awaited postMessage round trip to a bare worker thread that
 * echoes each message (no VM, no tool). Measured in the same rounds as `perCall`, so that drifts hit it alike.
 */
function bareRoundTrip() {
  const worker = new Worker(
    "const { parentPort } = require('node:worker_threads'); parentPort.on('message', (m) => parentPort.postMessage(m));",
    { eval: true },
  );
  const ask = (value) =>
    new Promise((resolve) => {
      worker.once("message", resolve);
      worker.postMessage(value);
    });
  return {
    async time(calls) {
      const start = performance.now();
      for (let i = 0; i < calls; i++) await ask({ i });
      return ((performance.now() - start) / calls) * 1000;
    },
    close: () => worker.terminate(),
  };
}

async function stopLateness(sandbox, iterations) {
  const late = [];
  for (let i = 0; i < iterations; i++) {
    const start = performance.now();
    const result = await sandbox.execute("while (true) {}", { timeoutMs: 100 });
    late.push(performance.now() - start - 100);
    if (result.ok || result.error.kind !== "timeout") throw new Error("the loop was not stopped by its deadline");
  }
  return median(late);
}

/**
 * Executions per second with `concurrent` executions in flight: each of `concurrent` clients starts its next
 * execution when its last one ended, until `total` have run. Also returns the process's CPU time over the run as a
 * share of the machine's cores, which tells whether CPU or concurrency was the limit.
 */
async function throughput(sandbox, code, concurrent, total) {
  let started = 0;
  const client = async () => {
    while (started < total) {
      started++;
      const result = await sandbox.execute(code);
      if (!result.ok) throw new Error(`${result.error.kind}: ${result.error.message}`);
    }
  };
  const cpu = process.cpuUsage();
  const start = performance.now();
  await Promise.all(Array.from({ length: concurrent }, client));
  const ms = performance.now() - start;
  const used = process.cpuUsage(cpu);
  return { perSecond: total / (ms / 1000), cpuShare: (used.user + used.system) / 1000 / ms / availableParallelism() };
}

const rows = [];
/** A row of the table; `floor` is a figure of neither product (printed across both columns). */
function row(name, unit, airlock, pi, better = "lower", floor = undefined) {
  // A ratio of a figure at or below zero (a stop that came before the deadline) says nothing.
  const ratio =
    pi === undefined || airlock === undefined || pi <= 0 || airlock <= 0
      ? undefined
      : better === "lower"
        ? pi / airlock
        : airlock / pi;
  rows.push(floor === undefined ? { name, unit, airlock, pi, ratio } : { name, unit, floor });
  progress.clear();
  const fmt = (v) => (v === undefined ? "n/a" : v >= 100 ? v.toFixed(0) : v >= 1 ? v.toFixed(2) : v.toFixed(3));
  const figures =
    floor === undefined ? `${fmt(airlock).padStart(10)} ${fmt(pi).padStart(10)}` : fmt(floor).padStart(21);
  console.log(`${name.padEnd(44)} ${figures} ${unit.padEnd(8)} ${ratio === undefined ? "" : `${ratio.toFixed(1)}x`}`);
}

/** Shows what is measured next, on a terminal. */
const step = (text) => progress.update(`measuring ${text}…`);

const machine = {
  node: process.version,
  runtime,
  cpu: cpus()[0]?.model ?? "unknown",
  cores: availableParallelism(),
  memoryGiB: Math.round(totalmem() / 2 ** 30),
  platform: `${process.platform}-${process.arch}`,
};
console.log(`Machine: ${machine.cpu}, ${machine.cores} cores, ${machine.memoryGiB} GiB, ${runtime}`);
console.log(`${"row".padEnd(44)} ${"Airlock".padStart(10)} ${"pi 1.6.0".padStart(10)} ${"unit".padEnd(8)} pi/Airlock`);

const wasm = await piWasm();
const airWorker = new CodemodeSandbox({ tools, timeoutMs: 30_000 });
const airInline = new InlineCodemodeSandbox({ tools, timeoutMs: 30_000 });
const piWorker = new PiSandbox({ tools, timeoutMs: 30_000 });
const piInline = new PiInline({ tools, wasm, timeoutMs: 30_000 });
await airWorker.warm();
await airInline.warm();
// Warm-up: JIT, first VMs, the peers' first worker.
step("nothing yet: warming up");
await timeEach(airWorker, "return 1", 200);
await timeEach(airInline, "return 1", 200);
await timeEach(piWorker, "return 1", 2);
await timeEach(piInline, "return 1", 3);

// 1. return 1, sequential
step("1. return 1, worker");
row(
  "1. return 1, worker (median)",
  "ms",
  await timeEach(airWorker, "return 1", n(2000, 300)),
  await timeEach(piWorker, "return 1", n(30, 8)),
);
step("1. return 1, inline");
row(
  "1. return 1, inline (median)",
  "ms",
  await timeEach(airInline, "return 1", n(2000, 300)),
  await timeEach(piInline, "return 1", n(60, 15)),
);

// 2. per-call cost of 100 sequential echo calls in one execution
step("2. tool calls, worker and pi in alternation");
const floor = bareRoundTrip();
const [workerCall, piWorkerCall, roundTrip] = await perCall(airWorker, piWorker, n(9, 3), floor);
await floor.close();
row("2. tool call, worker (per call)", "us", workerCall, piWorkerCall);
// Neither product: what any tool call through a worker costs at least on this machine, in this run.
row("2. floor: bare postMessage round trip", "us", undefined, undefined, "lower", roundTrip);
step("2. tool calls, inline and pi in alternation");
row("2. tool call, inline (per call)", "us", ...(await perCall(airInline, piInline, n(9, 3))));

// 3. interpreter-bound loop
const loop = "let s = 0; for (let i = 0; i < 1e6; i++) s += i; return s;";
step("3. 1e6-iteration loops");
row(
  "3. 1e6-iteration loop, worker",
  "ms",
  await timeEach(airWorker, loop, n(15, 4)),
  await timeEach(piWorker, loop, n(8, 3)),
);
row(
  "3. 1e6-iteration loop, inline",
  "ms",
  await timeEach(airInline, loop, n(15, 4)),
  await timeEach(piInline, loop, n(8, 3)),
);

// 4. how late a 100 ms deadline stops while(true){} (pi inline stops by interrupt budget, not deadline: not compared)
step("4. how late a deadline stops while(true){}");
row(
  "4. while(true) stop after deadline, worker",
  "ms",
  await stopLateness(airWorker, n(10, 3)),
  await stopLateness(piWorker, n(5, 2)),
);
row("4. while(true) stop after deadline, inline", "ms", await stopLateness(airInline, n(10, 3)), undefined);

// 5. throughput with 64 executions in flight (pi: one execution per client, as its worker spends ~100 ms on each).
// Airlock's runs come first, after a pause: pi ends each execution's worker thread in the background, and 64 of those
// ending at once would take CPU from whatever is measured next.
step("5. throughput with 64, 32 and 128 executions in flight (the longest row)");
await new Promise((resolve) => setTimeout(resolve, 1000));
const trivialWorker = await throughput(airWorker, "return 1", 64, n(20_000, 3_000));
const waiting = await throughput(airWorker, "return await tools.sleep()", 64, n(20_000, 3_000));
// Whether concurrency or CPU is the limit, directly: with half as many executions in flight, a system limited by
// concurrency does half as much (the ratio is 2); one limited by CPU does as much (the ratio is 1).
const halfWaiting = await throughput(airWorker, "return await tools.sleep()", 32, n(10_000, 1_500));
// And with twice as many: a system whose CPU was the limit at 64 does no more at 128 (the ratio is 1).
const doubleWaiting = await throughput(airWorker, "return await tools.sleep()", 128, n(20_000, 3_000));
const trivialInline = await throughput(airInline, "return 1", 64, n(20_000, 3_000));
const piTrivialWorker = await throughput(piWorker, "return 1", 64, 64);
const piWaiting = await throughput(piWorker, "return await tools.sleep()", 64, 64);
const piTrivialInline = await throughput(piInline, "return 1", 64, 64);
row("5. 64 concurrent return 1, worker", "exec/s", trivialWorker.perSecond, piTrivialWorker.perSecond, "higher");
row("5. 64 concurrent 10 ms tool, worker", "exec/s", waiting.perSecond, piWaiting.perSecond, "higher");
// The bound a 10 ms tool sets for 64 executions in flight is 6,400/s; these rows say how much CPU reaching for it took
// (on N cores, the bound is CPU's rather than concurrency's once an execution costs N / 6,400 s of CPU: 0.31 ms on 2).
row("5. 64 concurrent 10 ms tool, CPU used", "% cores", waiting.cpuShare * 100, undefined);
row(
  "5. 64 concurrent 10 ms tool, CPU per exec",
  "ms",
  (waiting.cpuShare * availableParallelism() * 1000) / waiting.perSecond,
  undefined,
);
row("5. 32 concurrent 10 ms tool, worker", "exec/s", halfWaiting.perSecond, undefined);
row("5. 10 ms tool, exec/s at 64 / at 32 in flight", "ratio", waiting.perSecond / halfWaiting.perSecond, undefined);
row("5. 10 ms tool, exec/s at 128 / at 64 in flight", "ratio", doubleWaiting.perSecond / waiting.perSecond, undefined);
row("5. 64 concurrent return 1, inline", "exec/s", trivialInline.perSecond, piTrivialInline.perSecond, "higher");

await piWorker.close();
await piInline.close();

// 6. memory over 10,000 executions (Airlock only: the peers need minutes for as many)
const mixed = [
  "return 1",
  "text('x'); return [1, 2, 3]",
  "await tools.echo({ a: 1 }); return 2",
  "throw new Error('x')",
];
step("6. memory over 10,000 executions");
let rss1000 = 0;
let peak = 0;
for (let i = 1; i <= n(10_000, 2_000); i++) {
  await airWorker.execute(mixed[i % mixed.length]);
  if (i % 100 === 0) peak = Math.max(peak, process.memoryUsage().rss);
  if (i === n(1_000, 200)) rss1000 = process.memoryUsage().rss;
}
const rssEnd = process.memoryUsage().rss;
row("6. peak RSS after 10,000 executions, worker", "MiB", peak / 2 ** 20, undefined);
row("6. RSS growth 1,000 -> 10,000 executions", "%", ((rssEnd - rss1000) / rss1000) * 100, undefined);

await airWorker.close();
await airInline.close();

// 7. neighbours of spinning scripts: 8 concurrent executions that each call a tool, in rounds, with 0, 1 and 2
// `while (true) {}` spinning on a pool of the default size (one worker per core). Each spinner is given a second to
// settle first (the pool sees every worker computing and starts a spare); the rows say how much later the neighbours
// finish. The arrival row is the case the settling hides: a neighbour that comes 20 ms after two spinners start.
step("7. neighbours of spinning scripts");
const neighbours = new CodemodeSandbox({ tools, timeoutMs: 60_000 });
await neighbours.warm();
const percentile = (values, p) =>
  [...values].sort((a, b) => a - b)[Math.min(values.length - 1, Math.floor(values.length * p))];
const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
async function neighbourLatency(spinners) {
  const stop = new AbortController();
  const spinning = Array.from({ length: spinners }, () =>
    neighbours.execute("while (true) {}", { signal: stop.signal }),
  );
  await pause(1000);
  const times = [];
  for (let round = 0; round < n(40, 10); round++) {
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        const start = performance.now();
        const result = await neighbours.execute("return await tools.echo(1)");
        if (!result.ok) throw new Error(`a neighbour failed: ${result.error.message}`);
        times.push(performance.now() - start);
      }),
    );
  }
  stop.abort();
  await Promise.all(spinning);
  return { median: median(times), p99: percentile(times, 0.99) };
}
const calm = await neighbourLatency(0);
const one = await neighbourLatency(1);
const two = await neighbourLatency(2);
await neighbours.close();
/** A fresh warmed sandbox per sample: two spinners start, one neighbour arrives 20 ms later. */
async function arrivingNeighbour() {
  const sandbox = new CodemodeSandbox({ tools, timeoutMs: 60_000 });
  await sandbox.warm();
  const stop = new AbortController();
  const spinning = [0, 1].map(() => sandbox.execute("while (true) {}", { signal: stop.signal }));
  await pause(20);
  const start = performance.now();
  const result = await sandbox.execute("return await tools.echo(1)");
  const ms = performance.now() - start;
  if (!result.ok) throw new Error(`the neighbour failed: ${result.error.message}`);
  stop.abort();
  await Promise.all(spinning);
  await sandbox.close();
  return ms;
}
const arrivals = [];
for (let i = 0; i < n(5, 2); i++) arrivals.push(await arrivingNeighbour());
row("7. 8 neighbours, no spinner (median / p99)", "ms", calm.median, undefined);
row("7.   p99", "ms", calm.p99, undefined);
row("7. 8 neighbours, 1 spinner (median)", "ms", one.median, undefined);
row("7.   p99", "ms", one.p99, undefined);
row("7. 8 neighbours, 2 spinners (median)", "ms", two.median, undefined);
row("7.   p99", "ms", two.p99, undefined);
row("7. 1 neighbour arriving 20 ms after 2 spinners (median)", "ms", median(arrivals), undefined);

// 8. the first executions after warm(), against the steady state: warm() runs each worker's warm-up and the host's,
// and primes the workers with the sandbox's tools. Each figure is the median over fresh sandboxes, since one
// sandbox's first executions are few and noisy.
step("8. the first executions after warm()");
async function firstExecutions() {
  const fresh = new CodemodeSandbox({ tools, timeoutMs: 60_000 });
  await fresh.warm();
  const times = [];
  for (let i = 0; i < 330; i++) {
    const start = performance.now();
    await fresh.execute("return await tools.echo(1)");
    times.push(performance.now() - start);
  }
  await fresh.close();
  return { first: times[0], second: times[1], first30: median(times.slice(0, 30)), steady: median(times.slice(300)) };
}
const firsts = [];
for (let i = 0; i < n(5, 2); i++) firsts.push(await firstExecutions());
const of = (key) => median(firsts.map((f) => f[key]));
row("8. 1st execution after warm(), worker", "ms", of("first"), undefined);
row("8. 2nd execution after warm()", "ms", of("second"), undefined);
row("8. first 30 after warm(), worker (median)", "ms", of("first30"), undefined);
row("8. executions 300-330 (median)", "ms", of("steady"), undefined);
row("8. first 30 / steady", "ratio", median(firsts.map((f) => f.first30 / f.steady)), undefined);

mkdirSync(new URL("./results/", import.meta.url), { recursive: true });
const report = { date: new Date().toISOString(), machine, quick, rows };
writeFileSync(new URL("./results/latest.json", import.meta.url), `${JSON.stringify(report, null, 2)}\n`);
// One file per Node major as well, so that the runs on Node 20 and 24 that docs/performance.md quotes stay side by side.
const major = process.versions.node.split(".")[0];
writeFileSync(new URL(`./results/latest-node${major}.json`, import.meta.url), `${JSON.stringify(report, null, 2)}\n`);
progress.done();
console.log(`wrote bench/results/latest.json and latest-node${major}.json`);
