// Cost of stripTypeScript per script: the first call (which loads amaro and compiles its WebAssembly), then the
// median of 200 calls on a 50-line TypeScript script, of 200 more (steady state), and of 200 on the same script
// with its types already erased (plain JavaScript); then the same script stripped on the strip thread, as sandboxes,
// the gateway and the AI SDK tool strip it (its first call starts the thread). Run after a build: `npx tsc -p
// tsconfig.build.json` then `node bench/strip.mjs`. Each figure comes from one fresh process, so the first call is
// really the first.
import { performance } from "node:perf_hooks";
import { median, runtime } from "./lib.mjs";

const RUNS = 200;

/** A 50-line script in the style a model writes: types, generics, `as`, `satisfies`, awaits and a top-level return. */
function script() {
  const head = [
    "interface Issue { id: number; title: string; labels: string[]; closed?: boolean }",
    "type Summary = { total: number; open: number; byLabel: Record<string, number> };",
    "const repo: string = 'acme/widgets';",
    "const issues = (await tools.github_list_issues({ repo, state: 'all' })) as Issue[];",
    "function count<T>(items: readonly T[], keep: (item: T) => boolean): number {",
    "  let n: number = 0;",
    "  for (const item of items) if (keep(item)) n++;",
    "  return n;",
    "}",
    "const byLabel: Record<string, number> = {};",
  ];
  const body = [];
  for (let i = 0; body.length < 36; i++) {
    body.push(`const label${i}: string | undefined = issues[${i}]?.labels[0] as string | undefined;`);
    body.push(`if (label${i} !== undefined) byLabel[label${i}] = (byLabel[label${i}] ?? 0) + 1;`);
    body.push(`const item${i} = issues.find((issue: Issue): boolean => issue.id === ${i})!;`);
  }
  const tail = [
    "const summary = {",
    "  total: issues.length,",
    "  open: count<Issue>(issues, (issue) => !issue.closed),",
    "  byLabel,",
    "} satisfies Summary;",
    "return summary;",
  ];
  const lines = [...head, ...body.slice(0, 50 - head.length - tail.length), ...tail];
  if (lines.length !== 50) throw new Error(`expected 50 lines, got ${lines.length}`);
  return lines.join("\n");
}

function percentile(values, p) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
}

const source = script();

const importStart = performance.now();
const { stripTypeScript } = await import("../dist/source/index.js");
const importMs = performance.now() - importStart;

const firstStart = performance.now();
const firstOutput = stripTypeScript(source);
const firstMs = performance.now() - firstStart;
if (firstOutput.length !== source.length) throw new Error("stripping changed the length of the script");

function measure(text) {
  const times = [];
  for (let run = 0; run < RUNS; run++) {
    const start = performance.now();
    stripTypeScript(text);
    times.push(performance.now() - start);
  }
  return times;
}

const ts = measure(source);
// The slow calls of the first batch are amaro's WebAssembly warming up; a second batch shows the steady state.
const warm = measure(source);
// The same script with its types already erased: what plain JavaScript costs.
const js = measure(firstOutput);
const format = (ms) => `${ms.toFixed(3)} ms`;
console.log(`${runtime}, ${source.split("\n").length}-line script, ${source.length} characters`);
console.log(`import airlock/source:              ${format(importMs)}`);
console.log(`first stripTypeScript (loads amaro): ${format(firstMs)}`);
console.log(
  `TypeScript, ${RUNS} runs: median ${format(median(ts))}, p95 ${format(percentile(ts, 95))}, min ${format(Math.min(...ts))}`,
);
console.log(
  `TypeScript, next ${RUNS}: median ${format(median(warm))}, p95 ${format(percentile(warm, 95))}, min ${format(Math.min(...warm))}`,
);
console.log(
  `plain JS,   ${RUNS} runs: median ${format(median(js))}, p95 ${format(percentile(js, 95))}, min ${format(Math.min(...js))}`,
);

const { stripTypeScriptOnThread } = await import("../dist/host/typescript-thread.js");
const threadFirstStart = performance.now();
await stripTypeScriptOnThread(source);
const threadFirstMs = performance.now() - threadFirstStart;
const onThread = [];
for (let run = 0; run < 2 * RUNS; run++) {
  const start = performance.now();
  await stripTypeScriptOnThread(source);
  onThread.push(performance.now() - start);
}
const steady = onThread.slice(RUNS);
console.log(`first on the strip thread (starts it): ${format(threadFirstMs)}`);
console.log(
  `strip thread, ${RUNS} runs after ${RUNS}: median ${format(median(steady))}, p95 ${format(percentile(steady, 95))}, min ${format(Math.min(...steady))}`,
);
