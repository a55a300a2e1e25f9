/**
 * The process tier's denials (docs/security.md, What each launcher stops, and what it does not), proven from inside the
 * sandboxed child. Each probe starts through exactly the launch path of the pool's children (bwrap or runsc, the launch
 * helper, both seccomp filters, the rlimits, an empty environment), with a test-only program in the child's place, and
 * reports what the kernel answered. The assertions are on the errno (or on the file not being there), so that a denial
 * is proven, not inferred from silence.
 */
import { spawn } from "node:child_process";
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ChildPlan } from "../dist/process/channel.js";
import { resolveIsolation } from "../dist/process/isolation/resolve.js";
import { nativeProbeElf, readNativeProbe } from "./fixtures/process/native-probe.ts";
import { hasSystemTool } from "./helpers/system-tools.ts";

const probeScript = fileURLToPath(new URL("./fixtures/process/probe.mjs", import.meta.url));
const runtimes = [
  { runtime: "bwrap" as const, available: hasSystemTool("bwrap") },
  { runtime: "gvisor" as const, available: hasSystemTool("runsc") },
];

let dir: string;
let planted: string;
let nativeProbe: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "airlock-probe-"));
  chmodSync(dir, 0o755);
  planted = join(dir, "planted-secret.txt");
  writeFileSync(planted, "host secret", { mode: 0o644 });
  nativeProbe = join(dir, "native-probe");
  writeFileSync(nativeProbe, nativeProbeElf(), { mode: 0o755 });
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Starts a plan like the pool does and collects stdout until the process ends. */
function run(plan: ChildPlan): Promise<{ code: number | null; stdout: Buffer; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(plan.command, plan.args, {
      stdio: ["pipe", "pipe", "pipe", ...plan.fds.map(() => "pipe" as const)],
      env: plan.env,
      ...(plan.uid !== undefined ? { uid: plan.uid, gid: plan.gid } : {}),
    });
    plan.fds.forEach((data, i) => {
      const stream = child.stdio[3 + i] as NodeJS.WritableStream & { on: (e: string, f: () => void) => void };
      stream.on("error", () => {});
      stream.end(data);
    });
    child.stdin.on("error", () => {});
    if (plan.stdinPrefix) child.stdin.write(plan.stdinPrefix);
    const out: Buffer[] = [];
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => out.push(d));
    child.stderr.on("data", (d: Buffer) => {
      stderr = (stderr + d.toString()).slice(-4000);
    });
    const timer = setTimeout(() => child.kill("SIGKILL"), 60_000);
    child.on("error", reject);
    child.on("exit", async (code) => {
      clearTimeout(timer);
      child.stdin.destroy();
      await plan.cleanup?.();
      resolve({ code, stdout: Buffer.concat(out), stderr });
    });
  });
}

/** Puts `program` where node would be: after the helper in bwrap's command, or in the OCI spec's args for runsc. */
function replaceNode(plan: ChildPlan, program: string): ChildPlan {
  const args = [...plan.args];
  const bundle = args.indexOf("--bundle");
  if (bundle >= 0) {
    const specPath = join(args[bundle + 1] as string, "config.json");
    const spec = JSON.parse(readFileSync(specPath, "utf8"));
    spec.process.args = [spec.process.args[0], program];
    spec.mounts.push({ destination: program, type: "bind", source: program, options: ["bind", "ro"] });
    writeFileSync(specPath, JSON.stringify(spec));
    return plan;
  }
  const separator = args.lastIndexOf("--");
  args.splice(separator + 2, args.length, program);
  args.splice(args.indexOf("--remount-ro"), 0, "--ro-bind", program, program);
  return { ...plan, args };
}

// One describe per runtime, skipped where it is missing: a file whose suites are all left out would fail as empty.
for (const { runtime, available } of runtimes) {
  describe.runIf(available)(`the child's denials under ${runtime}`, () => probes(runtime));
}

function probes(runtime: "bwrap" | "gvisor"): void {
  const isolation = () =>
    resolveIsolation(
      // Room for the probe's worker threads: the process limit, not the address space, must be what stops them.
      { runtime, limits: { addressSpaceBytes: 64 * 1024 ** 3 } },
      { maxVms: 4, memoryLimitBytes: 64 * 1024 * 1024, entry: probeScript, entryArgs: [planted] },
    );

  let report: Record<string, unknown>;
  beforeAll(async () => {
    const { code, stdout, stderr } = await run(isolation().plan());
    expect(code, stderr).toBe(0);
    report = JSON.parse(stdout.toString());
  }, 90_000);

  it("cannot open a TCP or UDP socket, or even a unix socket", () => {
    expect(report.tcp).toBe("EPERM");
    expect(report.tcpListen).toBe("EPERM");
    expect(report.udp).toBe("EPERM");
    expect(report.unixSocket).toBe("EPERM");
  });

  it("cannot exec /bin/sh (not there) or anything else (refused by the exec filter)", () => {
    expect(report.shellExists).toBe(false);
    // seccomp answers before the path is looked up: EPERM even for a file that does not exist.
    expect(report.execShell).toBe("EPERM");
    expect(report.execNode).toBe("EPERM");
  });

  it("sees no host file outside its read-only root: not /etc/passwd, not a file planted in the host's /tmp", () => {
    expect(readFileSync(planted, "utf8")).toBe("host secret");
    expect(report.passwd).toBe("ENOENT");
    expect(report.planted).toBe("ENOENT");
    const root = report.root as string[];
    for (const gone of ["etc", "home", "root", "var", "opt", "srv", "mnt"]) expect(root).not.toContain(gone);
    // bwrap mounts no /tmp at all; gVisor's own /tmp is an empty read-only tmpfs inside its kernel.
    if (runtime === "bwrap") {
      // Only the helper, node's and its libraries' directories, and the top directory of Airlock's files.
      const top = (path: string) => path.split("/")[1] as string;
      const allowed = [".airlock-exec", "lib", "lib64", "usr", top(probeScript), top(process.execPath)];
      expect(root.filter((d) => !allowed.includes(d))).toEqual([]);
    }
    // Nothing of the host's /tmp is there; when Airlock itself lives under /tmp (a CI checkout), only the directory
    // leading to its own read-only files is.
    const ownDir = probeScript.startsWith("/tmp/") ? probeScript.split("/")[2] : undefined;
    const tmpEntries = report.tmp === "ENOENT" ? [] : (report.tmp as string[]);
    expect(Array.isArray(tmpEntries), String(report.tmp)).toBe(true);
    expect(tmpEntries.filter((name) => name !== ownDir)).toEqual([]);
  });

  it("cannot write anywhere", () => {
    expect(report.writeRoot).toMatch(/^(EROFS|EACCES|EPERM)$/);
    expect(report.mkdirTmp).toMatch(/^(EROFS|EACCES|EPERM|EEXIST)$/);
    expect(report.writeTmp).toMatch(/^(EROFS|EACCES|EPERM|ENOENT)$/);
    expect(report.writeOwnFiles).toMatch(/^(EROFS|EACCES|EPERM)$/);
  });

  it("has an empty environment", () => {
    expect(report.env).toEqual([]);
  });

  it("hits the process rlimit when it starts threads without end", () => {
    const threads = report.threads as { started: number; error: string };
    expect(threads.error).toBe("ERR_WORKER_INIT_FAILED");
    expect(threads.started).toBeGreaterThan(0);
    expect(threads.started).toBeLessThan(32);
  });

  it("hits the process rlimit in a fork bomb, and cannot raise an rlimit", async () => {
    const { code, stdout, stderr } = await run(replaceNode(isolation().plan(), nativeProbe));
    expect(code, stderr).toBe(0);
    const native = readNativeProbe(stdout);
    expect(native.raiseWithPrlimit).toBe(-1); // -EPERM
    expect(native.raiseWithSetrlimit).toBe(-1); // -EPERM
    expect(native.forkError).toBe(-11); // -EAGAIN: RLIMIT_NPROC
    expect(native.forks).toBeGreaterThan(0);
    expect(native.forks).toBeLessThan(32);
  }, 90_000);
}
