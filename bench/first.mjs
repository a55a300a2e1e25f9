// A new sandbox's first executions against its steady ones: in a fresh process, a sandbox created without warm()
// runs `return 1` 330 times; the row compares the median of executions 4-33 with that of 300-330, per launcher, with
// pi-codemode 1.6.0 beside it (one process). Each sample is a fresh process (the host's JIT warmth is the process's), the systems
// in alternation so that this machine's drifts hit them alike.
//   node bench/first.mjs     (npm run bench runs it; QUICK=1 for fewer processes)
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { median, runtime } from "./lib.mjs";

const EXECUTIONS = 330;
const FIRST = [3, 33];
const STEADY = [300, 330];

if (process.argv[2] === "--child") {
  const [system, launcher] = process.argv.slice(3);
  const times = await child(system, launcher);
  console.log(JSON.stringify({ first: median(times.slice(...FIRST)), steady: median(times.slice(...STEADY)) }));
  process.exit(0);
}

async function child(system, launcher) {
  const tools = [{ name: "echo", execute: async (args) => args }];
  let sandbox;
  if (system === "pi") {
    const pi = await import("@earendil-works/pi-codemode");
    sandbox =
      launcher === "inline"
        ? new pi.InlineCodemodeSandbox({ tools, wasm: await pi.loadQuickJSWasm() })
        : new pi.CodemodeSandbox({ tools });
  } else {
    const airlock = await import("../dist/index.js");
    sandbox =
      launcher === "inline" ? new airlock.InlineCodemodeSandbox({ tools }) : new airlock.CodemodeSandbox({ tools });
  }
  const times = [];
  for (let i = 0; i < EXECUTIONS; i++) {
    const start = performance.now();
    const result = await sandbox.execute("return 1");
    times.push(performance.now() - start);
    if (!(result.ok ?? result.result === 1)) throw new Error(`execution ${i + 1} failed: ${JSON.stringify(result)}`);
  }
  await (sandbox.close?.() ?? sandbox.dispose?.());
  return times;
}

const rounds = process.env.QUICK === "1" ? 3 : 7;
const cases = [
  ["airlock", "worker"],
  ["pi", "worker"],
  ["airlock", "inline"],
  ["pi", "inline"],
];
const samples = new Map(cases.map(([s, l]) => [`${s} ${l}`, { first: [], steady: [] }]));
const script = fileURLToPath(import.meta.url);
for (let round = 0; round < rounds; round++) {
  for (const [system, launcher] of cases) {
    // pi-codemode makes a VM (and on its pool a worker) per execution, so it has no warmth to build: one process
    // each (330 executions of its worker sandbox take 30-90 s here).
    if (system === "pi" && round > 0) continue;
    const out = execFileSync(process.execPath, [script, "--child", system, launcher], { encoding: "utf8" });
    const { first, steady } = JSON.parse(out.trim().split("\n").at(-1));
    const sample = samples.get(`${system} ${launcher}`);
    sample.first.push(first);
    sample.steady.push(steady);
  }
}

const fmt = (ms) => ms.toFixed(3);
console.log(
  `first executions of a sandbox created without warm(), ${runtime}, ${rounds} fresh processes each, pi 1 (medians, ms)`,
);
console.log(`${"row".padEnd(34)} ${"e4-33".padStart(8)} ${"e301-330".padStart(9)} ${"ratio".padStart(6)}`);
for (const [system, launcher] of cases) {
  const { first, steady } = samples.get(`${system} ${launcher}`);
  const [a, b] = [median(first), median(steady)];
  const name = `${system === "pi" ? "pi-codemode 1.6.0" : "Airlock"} ${launcher}`;
  console.log(`${name.padEnd(34)} ${fmt(a).padStart(8)} ${fmt(b).padStart(9)} ${(a / b).toFixed(2).padStart(6)}`);
}
