import { CodemodeSandbox } from "airlock-codemode";
const kinds = [
  { code: "return 1", expect: "ok" },
  { code: "throw new Error('no')", expect: "script" },
  { code: "while (true) {}", expect: "timeout", timeoutMs: 30 },
  { code: "await tools.wait();", expect: "aborted", abort: true },
  { code: "const a = []; while (true) a.push('z'.repeat(256) + a.length);", expect: "script" },
  { code: "return (await tools.echo({ n: [1, 2, 3] })).n.length", expect: "ok" },
  { code: "text('x'.repeat(100)); store('k', 1); return load('k')", expect: "ok" },
];
const sandbox = new CodemodeSandbox({ poolSize: 2, timeoutMs: 10_000, memoryLimitBytes: 4 * 1024 * 1024,
  tools: [{ name: "echo", execute: (args) => args }, { name: "wait", execute: (_args, { signal }) => new Promise((resolve) => signal.addEventListener("abort", () => resolve(0))) }] });
await sandbox.warm();
const bad = new Map();
for (let done = 0; done < 1000; done += 25) {
  await Promise.all(Array.from({ length: 25 }, async (_, i) => {
    const kind = kinds[(done + i) % kinds.length];
    const controller = new AbortController();
    if (kind.abort) setTimeout(() => controller.abort(), 2);
    const r = await sandbox.execute(kind.code, { signal: controller.signal, timeoutMs: kind.timeoutMs });
    const got = r.ok ? "ok" : r.error.kind;
    if (got !== kind.expect) { const k = kind.code.slice(0, 20) + " -> " + got + ": " + (r.ok ? "" : r.error.message); bad.set(k, (bad.get(k) ?? 0) + 1); }
  }));
}
console.log(JSON.stringify([...bad], null, 1), JSON.stringify(sandbox.poolStats));
await sandbox.close();
