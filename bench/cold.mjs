// First contact: what a fresh process pays before its first result, Airlock beside pi-codemode 1.6.0.
//   - the import of each entry, each in a fresh process (pi's root beside Airlock's);
//   - cold start: fresh processes of each system in alternation, each doing import, create a sandbox with one tool,
//     one execution that calls it, close, exit (worker and inline), and `airlock run` of a file with `return 1`;
//   - what a script sandbox user installs: `npm install` of the packed package into an empty project, without the
//     optional packages (needs the npm registry; SKIP_INSTALL=1 skips it).
// Medians of N processes (N=11, QUICK=1: 5). Writes bench/results/cold-latest.json.
import { execFileSync, spawn, spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { median, runtime } from "./lib.mjs";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const SELF = fileURLToPath(import.meta.url);
const PI = "@earendil-works/pi-codemode";
/** What a script sandbox user's install may weigh, node_modules on disk (apparent size). */
const MAX_SANDBOX_INSTALL_BYTES = 10_000_000;

/** Child mode: one measurement in this fresh process, printed as JSON. */
async function child(kind, arg1, arg2) {
  const start = performance.now();
  if (kind === "import") {
    await import(arg1);
    console.log(JSON.stringify({ import: performance.now() - start }));
    return;
  }
  // kind "start": arg1 is "airlock" or "pi", arg2 "worker" or "inline".
  const module = await import(arg1 === "pi" ? PI : "airlock-codemode");
  const imported = performance.now();
  const tool = { name: "add", execute: async ({ a, b }) => a + b };
  const made = performance.now();
  let sandbox;
  if (arg2 === "worker") sandbox = new module.CodemodeSandbox({ tools: [tool] });
  // pi's inline sandbox takes its compiled module; loading it is part of its first result here.
  else if (arg1 === "pi")
    sandbox = new module.InlineCodemodeSandbox({ tools: [tool], wasm: await module.loadQuickJSWasm() });
  else sandbox = new module.InlineCodemodeSandbox({ tools: [tool] });
  const result = await sandbox.execute("return await tools.add({ a: 2, b: 3 })");
  const first = performance.now();
  if (!result.ok || result.value !== 5) throw new Error(`the first execution failed: ${JSON.stringify(result)}`);
  await sandbox.close();
  console.log(JSON.stringify({ import: imported - start, first: first - made }));
}

/** Runs `args` with node in ROOT; resolves with its last JSON line and the whole process's wall time. */
function run(args, stdin) {
  return new Promise((resolve, reject) => {
    const start = performance.now();
    const proc = spawn(process.execPath, args, { cwd: ROOT, stdio: ["pipe", "pipe", "pipe"] });
    let out = "";
    let err = "";
    proc.stdout.on("data", (d) => (out += d));
    proc.stderr.on("data", (d) => (err += d));
    proc.stdin.end(stdin ?? "");
    proc.on("exit", (code) => {
      const wall = performance.now() - start;
      if (code !== 0) return reject(new Error(`node ${args.join(" ")} exited ${code}\n${err}`));
      const last = out.trim().split("\n").at(-1) ?? "";
      resolve({ wall, out: last.startsWith("{") ? JSON.parse(last) : { text: last } });
    });
  });
}

const fmt = (ms) => (ms >= 100 ? ms.toFixed(0) : ms.toFixed(1));

/** Medians of each case over `rounds` rounds, the cases run in alternation, one fresh process each. */
async function alternate(cases, rounds) {
  const samples = cases.map(() => []);
  for (let round = 0; round < rounds; round++) {
    for (const [index, c] of cases.entries()) samples[index].push(await run(c.args, c.stdin));
  }
  return samples.map((list) => ({
    wall: median(list.map((s) => s.wall)),
    import: median(list.map((s) => s.out.import ?? Number.NaN)),
    first: median(list.map((s) => s.out.first ?? Number.NaN)),
  }));
}

/** `npm install` of the packed package into an empty project, as a script sandbox user would: no optional packages. */
function sandboxOnlyInstall() {
  const folder = mkdtempSync(join(tmpdir(), "airlock-cold-install-"));
  try {
    const packed = JSON.parse(
      execFileSync("npm", ["pack", "--json", "--ignore-scripts", "--pack-destination", folder], {
        cwd: ROOT,
      }).toString(),
    )[0];
    const project = join(folder, "project");
    mkdirSync(project);
    writeFileSync(join(project, "package.json"), JSON.stringify({ name: "cold-install", private: true }));
    const installed = spawnSync(
      "npm",
      ["install", "--omit=optional", "--no-audit", "--no-fund", join(folder, packed.filename)],
      { cwd: project, encoding: "utf8" },
    );
    if (installed.status !== 0) throw new Error(`npm install failed:\n${installed.stderr}`);
    const log = `${installed.stdout}\n${installed.stderr}`;
    const modules = join(project, "node_modules");
    const packages = readdirSync(modules)
      .filter((name) => !name.startsWith("."))
      .flatMap((name) => (name.startsWith("@") ? readdirSync(join(modules, name)).map((n) => `${name}/${n}`) : [name]));
    const bytes = Number(execFileSync("du", ["-sb", "--apparent-size", modules]).toString().split("\t")[0]);
    return { packages: packages.length, bytes, tarballBytes: packed.size, unpackedBytes: packed.unpackedSize, log };
  } finally {
    rmSync(folder, { recursive: true, force: true });
  }
}

async function main() {
  const rounds = process.env.QUICK === "1" ? 5 : 11;
  const results = { runtime, date: new Date().toISOString(), rounds, imports: {}, start: {}, install: undefined };
  console.log(`Cold start, ${runtime}, medians of ${rounds} fresh processes (ms)`);

  const pkg = JSON.parse(execFileSync("npm", ["pkg", "get", "exports"], { cwd: ROOT }).toString());
  const entries = Object.keys(pkg).filter((e) => e !== "./package.json" && e !== "./cloudflare");
  const specifiers = [...entries.map((e) => `airlock-codemode${e.slice(1)}`), PI];
  const imports = await alternate(
    specifiers.map((s) => ({ args: [SELF, "--child", "import", s] })),
    rounds,
  );
  console.log("\nimport, each in a fresh process");
  for (const [index, specifier] of specifiers.entries()) {
    results.imports[specifier] = imports[index].import;
    console.log(`  ${specifier.padEnd(42)} ${fmt(imports[index].import).padStart(7)}`);
  }

  const script = join(mkdtempSync(join(tmpdir(), "airlock-cold-")), "one.js");
  writeFileSync(script, "return 1\n");
  const cases = [
    { name: "airlock worker", args: [SELF, "--child", "start", "airlock", "worker"] },
    { name: "pi worker", args: [SELF, "--child", "start", "pi", "worker"] },
    { name: "airlock inline", args: [SELF, "--child", "start", "airlock", "inline"] },
    { name: "pi inline", args: [SELF, "--child", "start", "pi", "inline"] },
    { name: "airlock run (return 1)", args: [join(ROOT, "dist", "cli", "main.js"), "run", script] },
  ];
  const starts = await alternate(cases, rounds);
  rmSync(join(script, ".."), { recursive: true, force: true });
  console.log("\ncold start: import, create with one tool, one execution calling it, close, exit");
  console.log(`  ${"".padEnd(24)} ${"import".padStart(8)} ${"first".padStart(8)} ${"process".padStart(8)}`);
  for (const [index, c] of cases.entries()) {
    const s = starts[index];
    results.start[c.name] = s;
    const cell = (v) => (Number.isNaN(v) ? "" : fmt(v)).padStart(8);
    console.log(`  ${c.name.padEnd(24)} ${cell(s.import)} ${cell(s.first)} ${cell(s.wall)}`);
  }
  console.log("  (first: from creating the sandbox to its first result; process: the whole process, spawn to exit)");

  if (process.env.SKIP_INSTALL !== "1") {
    const install = sandboxOnlyInstall();
    results.install = { packages: install.packages, bytes: install.bytes, tarballBytes: install.tarballBytes };
    const warnings = install.log.split("\n").filter((line) => line.includes("warn"));
    console.log(
      `\nsandbox-only install (npm install --omit=optional of the packed package): ${install.packages} packages, ` +
        `${(install.bytes / 1e6).toFixed(1)} MB on disk (apparent), tarball ${(install.tarballBytes / 1e6).toFixed(2)} MB` +
        `${warnings.length === 0 ? ", no warning" : `, ${warnings.length} warning lines`}` +
        `${install.bytes > MAX_SANDBOX_INSTALL_BYTES ? `: OVER the ${MAX_SANDBOX_INSTALL_BYTES / 1e6} MB budget` : ""}`,
    );
    for (const line of warnings) console.log(`  ${line}`);
  }
  mkdirSync(new URL("./results/", import.meta.url), { recursive: true });
  writeFileSync(new URL("./results/cold-latest.json", import.meta.url), `${JSON.stringify(results, null, 2)}\n`);
}

if (process.argv[2] === "--child") await child(process.argv[3], process.argv[4], process.argv[5]);
else await main();
