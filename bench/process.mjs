// The process tier next to the worker pool, in one process run: start-up (construct until the pool is warm), a
// trivial execution, one awaited tool call, how late a CPU loop is stopped after its deadline, and throughput.
// Prints a table of medians with the ratio process / worker, and writes bench/results/process-latest.json.
//   npm run build && node bench/process.mjs      (QUICK=1 for fewer iterations)
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { availableParallelism, cpus } from "node:os";
import { CodemodeSandbox, ProcessCodemodeSandbox } from "../dist/index.js";
import { benchProgress, median, runtime, timeEach } from "./lib.mjs";

const quick = process.env.QUICK === "1";
const progress = benchProgress();
const n = (full, small) => (quick ? small : full);
const tools = [{ name: "echo", execute: async (args) => args }];

const tiers = [
  { name: "worker", make: () => new CodemodeSandbox({ poolSize: 1, tools }) },
  {
    name: "process (plain child)",
    make: () =>
      new ProcessCodemodeSandbox({
        poolSize: 1,
        tools,
        isolation: { bwrapPath: "/nonexistent/bwrap", allowDegraded: true },
      }),
  },
];
if (process.platform === "linux" && existsSync("/usr/bin/bwrap")) {
  tiers.push({ name: "process (bwrap)", make: () => new ProcessCodemodeSandbox({ poolSize: 1, tools }) });
}
if (process.platform === "linux" && existsSync("/usr/bin/runsc") && process.getuid?.() === 0) {
  tiers.push({
    name: "process (gVisor)",
    make: () => new ProcessCodemodeSandbox({ poolSize: 1, tools, isolation: { runtime: "gvisor" } }),
  });
}

const rows = [];
for (const tier of tiers) {
  progress.update(`measuring the ${tier.name} tier (${tiers.indexOf(tier) + 1} of ${tiers.length})…`);
  const startups = [];
  for (let i = 0; i < n(3, 1); i++) {
    const start = performance.now();
    const sandbox = tier.make();
    await sandbox.warm();
    startups.push(performance.now() - start);
    await sandbox.close();
  }
  const sandbox = tier.make();
  await sandbox.warm();
  await timeEach(sandbox, "return 1;", 20);
  const trivial = await timeEach(sandbox, "return 1;", n(300, 50));
  const base = await timeEach(sandbox, "return 1;", n(100, 20));
  const calls = await timeEach(sandbox, "for (let i = 0; i < 100; i++) await tools.echo(i); return 1;", n(100, 20));
  const perCall = ((calls - base) / 100) * 1000;
  const late = [];
  for (let i = 0; i < n(10, 3); i++) {
    const start = performance.now();
    await sandbox.execute("while (true) {}", { timeoutMs: 100 });
    late.push(performance.now() - start - 100);
  }
  const start = performance.now();
  const concurrent = 8;
  for (let r = 0; r < n(20, 5); r++)
    await Promise.all(Array.from({ length: concurrent }, () => sandbox.execute("return 1;")));
  const perSecond = (concurrent * n(20, 5)) / ((performance.now() - start) / 1000);
  await sandbox.close();
  rows.push({
    tier: tier.name,
    startupMs: median(startups),
    trivialMs: trivial,
    perCallUs: perCall,
    stopLatenessMs: median(late),
    executionsPerSecond: perSecond,
  });
}

progress.done();
const worker = rows[0];
const fmt = (v, d = 2) => v.toFixed(d).padStart(9);
console.log(`${runtime}, ${availableParallelism()} CPUs (${cpus()[0]?.model ?? "?"}), pool size 1`);
console.log(
  "tier                    start-up ms  trivial ms  per call us  stop late ms  exec/s   (ratio trivial to worker)",
);
for (const r of rows) {
  console.log(
    `${r.tier.padEnd(22)} ${fmt(r.startupMs, 0)}   ${fmt(r.trivialMs)}   ${fmt(r.perCallUs, 1)}   ${fmt(r.stopLatenessMs)}  ${fmt(r.executionsPerSecond, 0)}   x${(r.trivialMs / worker.trivialMs).toFixed(2)}`,
  );
}
mkdirSync(new URL("./results/", import.meta.url), { recursive: true });
writeFileSync(
  new URL("./results/process-latest.json", import.meta.url),
  `${JSON.stringify({ node: process.version, runtime, cpus: availableParallelism(), rows }, null, 2)}\n`,
);
