// A trivial execution through a Durable Object in workerd (miniflare), Airlock next to pi-codemode on the same
// workerd: timed inside the agent Worker, and from Node including the dispatch of the request to the agent. Prints
// a table of medians and writes bench/results/cloudflare-latest.json.
//   npm run build && node bench/cloudflare.mjs      (QUICK=1 for fewer iterations)
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { build } from "esbuild";
import { Miniflare } from "miniflare";
import { benchProgress, median, runtime } from "./lib.mjs";

const quick = process.env.QUICK === "1";
const progress = benchProgress();
const here = new URL(".", import.meta.url);
const require = createRequire(import.meta.url);
const ROOT = "/airlock-bench";

const bundle = async (file) => {
  const result = await build({
    entryPoints: [new URL(`cloudflare/${file}`, here).pathname],
    bundle: true,
    format: "esm",
    platform: "neutral",
    external: ["*.wasm", "cloudflare:workers"],
    write: false,
    logLevel: "silent",
  });
  return result.outputFiles[0].text;
};

progress.update("bundling the Workers…");
const [agent, airlock, pi] = await Promise.all([
  bundle("agent.ts"),
  bundle("airlock-sandbox.ts"),
  bundle("pi-sandbox.ts"),
]);
const airlockWasm = readFileSync(new URL("../dist/engine/wasm/quickjs-tracked.wasm", here));
const piWasm = readFileSync(require.resolve("quickjs-wasi/quickjs.wasm"));
const compatibilityDate = "2026-04-22";
const mf = new Miniflare({
  cf: false,
  workers: [
    {
      name: "agent",
      compatibilityDate,
      modulesRoot: ROOT,
      modules: [{ type: "ESModule", path: `${ROOT}/agent.js`, contents: agent }],
      durableObjects: {
        AIRLOCK: { className: "AirlockSandbox", scriptName: "airlock" },
        PI: { className: "PiSandbox", scriptName: "pi" },
      },
    },
    {
      name: "airlock",
      compatibilityDate,
      modulesRoot: ROOT,
      modules: [
        { type: "ESModule", path: `${ROOT}/cloudflare/airlock.js`, contents: airlock },
        { type: "CompiledWasm", path: `${ROOT}/engine/wasm/quickjs-tracked.wasm`, contents: airlockWasm },
      ],
      durableObjects: { AIRLOCK: "AirlockSandbox" },
    },
    {
      name: "pi",
      compatibilityDate,
      modulesRoot: ROOT,
      modules: [
        { type: "ESModule", path: `${ROOT}/pi.js`, contents: pi },
        { type: "CompiledWasm", path: `${ROOT}/quickjs-wasi/quickjs.wasm`, contents: piWasm },
      ],
      durableObjects: { PI: "PiSandbox" },
    },
  ],
});

const inAgent = async (path, n) => {
  const response = await mf.dispatchFetch(`http://agent${path}?n=${n}`);
  const body = await response.json();
  if (!response.ok) throw new Error(`${path}: ${JSON.stringify(body)}`);
  return body;
};

const rows = [];
try {
  for (const [name, path] of [
    ["airlock", "/airlock"],
    ["pi-codemode", "/pi"],
  ]) {
    progress.update(`measuring ${name}…`);
    await inAgent(path, quick ? 20 : 200); // warm: the object's VMs, the agent's and the object's code
    const { times: agentTimes, meanMs } = await inAgent(path, quick ? 50 : 500);
    const dispatched = [];
    for (let i = 0; i < (quick ? 30 : 200); i++) {
      const started = performance.now();
      await inAgent(path, 1);
      dispatched.push(performance.now() - started);
    }
    rows.push({ name, agentMs: meanMs, agentMedianMs: median(agentTimes), withDispatchMs: median(dispatched) });
  }
} finally {
  await mf.dispose();
}
progress.clear();

const [ours, theirs] = rows;
console.log(
  `Trivial execution through a Durable Object in workerd (miniflare), ${runtime}: mean inside the agent (workerd's clock moves in whole ms), median with the dispatch`,
);
console.log("sandbox       | inside the agent | with the dispatch from Node");
for (const row of rows) {
  console.log(
    `${row.name.padEnd(13)} | ${row.agentMs.toFixed(2).padStart(13)} ms | ${row.withDispatchMs.toFixed(2).padStart(12)} ms`,
  );
}
console.log(
  `pi / airlock: ${(theirs.agentMs / ours.agentMs).toFixed(1)}x inside the agent, ${(theirs.withDispatchMs / ours.withDispatchMs).toFixed(1)}x with the dispatch`,
);
mkdirSync(new URL("results/", here), { recursive: true });
writeFileSync(
  new URL("results/cloudflare-latest.json", here),
  `${JSON.stringify({ runtime, date: new Date().toISOString(), rows }, null, 2)}\n`,
);
