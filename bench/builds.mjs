/**
 * Two builds of Airlock side by side in one process, in alternation, so that the machine's drift hits both alike:
 * `return 1` (worker, inline), a tool call (1,000 per execution; worker, inline) and 64 executions in flight (worker).
 * For a change that may cost speed, against the build before it:
 *
 *   git worktree add /tmp/before <commit> && (cd /tmp/before && npm ci && npm run build)
 *   node bench/builds.mjs /tmp/before/dist dist
 *
 * Prints the median of each row per build and the ratio new / old. Both builds share this process's heap, so what one
 * leaves to the garbage collector slows the other too: for such a change, run each build in a process of its own, in
 * alternation, as well.
 */
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";

const [oldDist, newDist] = process.argv.slice(2);
if (!oldDist || !newDist) {
  console.error("usage: node bench/builds.mjs <old dist directory> <new dist directory>");
  process.exit(2);
}
const load = (dist) => import(pathToFileURL(resolve(dist, "index.js")).href);
const builds = { old: await load(oldDist), new: await load(newDist) };

const ROUNDS = 12;
const CALLS = "let t = 0; for (let i = 0; i < 1000; i++) t += await tools.add({ a: i, b: 1 }); return t";
const tools = [{ name: "add", execute: async (args) => args.a + args.b }];
const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];

const sandboxes = {};
for (const [name, airlock] of Object.entries(builds)) {
  sandboxes[name] = {
    worker: new airlock.CodemodeSandbox({ tools }),
    inline: new airlock.InlineCodemodeSandbox({ tools }),
  };
  await sandboxes[name].worker.warm();
  await sandboxes[name].inline.warm();
}

const results = new Map();
const note = (row, name, value) => {
  if (!results.has(row)) results.set(row, { old: [], new: [] });
  results.get(row)[name].push(value);
};
const timed = async (sandbox, code) => {
  const started = performance.now();
  const result = await sandbox.execute(code);
  if (!result.ok) throw new Error(`the bench script failed: ${result.error.message}`);
  return performance.now() - started;
};

for (let round = 0; round < ROUNDS; round++) {
  for (const name of round % 2 === 0 ? ["new", "old"] : ["old", "new"]) {
    for (const kind of ["worker", "inline"]) {
      const sandbox = sandboxes[name][kind];
      const once = [];
      for (let i = 0; i < 200; i++) once.push(await timed(sandbox, "return 1"));
      note(`return 1, ${kind} (ms)`, name, median(once));
      const calls = [];
      for (let i = 0; i < 3; i++) calls.push(await timed(sandbox, CALLS));
      note(`tool call, ${kind} (us per call)`, name, median(calls));
    }
    const sandbox = sandboxes[name].worker;
    let done = 0;
    const started = performance.now();
    const until = started + 400;
    await Promise.all(
      Array.from({ length: 64 }, async () => {
        while (performance.now() < until) {
          await sandbox.execute("return 1");
          done++;
        }
      }),
    );
    note("64 in flight, worker (exec/s)", name, done / ((performance.now() - started) / 1000));
  }
}

console.log(`${"row".padEnd(34)}${"old".padStart(10)}${"new".padStart(10)}  new / old`);
for (const [row, { old, new: fresh }] of results) {
  const a = median(old);
  const b = median(fresh);
  console.log(`${row.padEnd(34)}${a.toFixed(3).padStart(10)}${b.toFixed(3).padStart(10)}  ${(b / a).toFixed(3)}`);
}
for (const pair of Object.values(sandboxes)) {
  await pair.worker.close();
  await pair.inline.close();
}
