// What the loop ticks cost (loop-ticks.ts): the same inline sandbox with Airlock's engine and with the same engine
// rewritten without ticks, in one process, in alternation (so that the machine's drifts hit both alike), measured in
// CPU time: a trivial execution, a tool call (1,000 per execution), and a script that builds and copies JSON.
//   npm run bench:ticks
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";

const M = await import("../dist/index.js");
const rounds = Number(process.env.TICKS_BENCH_ROUNDS ?? 15);
const { catchableOutOfMemory } = await import("../dist/engine/wasm/catchable-oom.js");
const { pollInterruptsOften } = await import("../dist/engine/wasm/interrupt-poll.js");
const { instrumentWrites } = await import("../dist/engine/wasm/write-tracking.js");
const src = readFileSync(createRequire(import.meta.url).resolve("quickjs-wasi/quickjs.wasm"));
const noTicks = new WebAssembly.Module(instrumentWrites(pollInterruptsOften(catchableOutOfMemory(src))));
const echo = { name: "echo", execute: async (x) => x };
const sb = {
  ticks: new M.InlineCodemodeSandbox({ tools: [echo] }),
  none: new M.InlineCodemodeSandbox({ tools: [echo], wasm: noTicks }),
};
for (const s of Object.values(sb)) await s.warm();
const loop = (n) => `for (let i = 0; i < ${n}; i++) await tools.echo({ i, s: "abc" + i }); return 1;`;
const json = `const o = Array.from({length: 2000}, (_, i) => ({ i, s: 'x' + i })); return JSON.parse(JSON.stringify(o)).length`;
async function cpu(s, code, reps) {
  const u = process.cpuUsage();
  for (let i = 0; i < reps; i++) {
    const r = await s.execute(code);
    if (!r.ok) throw new Error(JSON.stringify(r.error));
  }
  const d = process.cpuUsage(u);
  return (d.user + d.system) / 1000 / reps;
}
const res = {};
const push = (k, v) => {
  res[k] = [...(res[k] ?? []), v];
};
for (let round = 0; round < rounds; round++)
  for (const [name, s] of round % 2 ? Object.entries(sb) : Object.entries(sb).reverse()) {
    push(`${name} return1 us`, (await cpu(s, "return 1", 2000)) * 1000);
    push(`${name} per call us`, (await cpu(s, loop(1000), 5)) - (await cpu(s, loop(0), 500)));
    push(`${name} json ms`, await cpu(s, json, 10));
  }
const med = (a) => [...a].sort((x, y) => x - y)[a.length >> 1];
for (const what of ["return1 us", "per call us", "json ms"]) {
  const [none, ticks] = [med(res[`none ${what}`]), med(res[`ticks ${what}`])];
  console.log(
    `${what.padEnd(12)} without ticks ${none.toFixed(3)}  with ticks ${ticks.toFixed(3)}  ratio ${(ticks / none).toFixed(3)}`,
  );
}
