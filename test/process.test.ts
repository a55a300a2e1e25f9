/**
 * The process tier: the framed channel (malformed traffic from a child fails its executions), a child killed
 * mid-execution, the construction checks (no silent downgrade), and what `protections` reports. Behaviour shared with
 * the other launchers runs in sandbox/security/deterministic.test.ts through test/helpers/sandboxes.ts.
 */
import {
  type CodemodeTool,
  IsolationUnavailableError,
  MAX_VALUE_CHARS,
  ProcessCodemodeSandbox,
  type ProcessCodemodeSandboxOptions,
} from "airlock-codemode";
import { afterEach, describe, expect, it } from "vitest";
import { REMOTE_STOP_GRACE_MS } from "../dist/host/pool.js";
import { hasSystemTool } from "./helpers/system-tools.ts";

const badChild = new URL("./fixtures/process/bad-child.mjs", import.meta.url);
const open: ProcessCodemodeSandbox[] = [];
// bad-child.mjs calls the tool "noop": a call of a tool the run does not offer would fail it before the protocol
// break a case is about.
const noop = { name: "noop", execute: () => null };
const make = (options: ProcessCodemodeSandboxOptions = {}) => {
  const sandbox = new ProcessCodemodeSandbox({ poolSize: 1, tools: [noop], ...options });
  open.push(sandbox);
  return sandbox;
};
afterEach(async () => {
  await Promise.all(open.splice(0).map((s) => s.close()));
});

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};
/** Most of these tests start children under bubblewrap; without it only the construction checks run. */
const bwrap = hasSystemTool("bwrap");

const until = async (condition: () => boolean, what: string) => {
  const started = Date.now();
  while (!condition()) {
    if (Date.now() - started > 20_000) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
};

describe.runIf(bwrap)("the child channel (framed, strictly validated)", () => {
  it.each([
    ["an unknown field", "unknown-field", /broke the protocol: done has an unknown field "extra"/],
    ["an oversized frame", "oversized", /broke the protocol: a frame of 209715200 bytes is over the limit/],
    ["a frame that is not JSON", "not-json", /broke the protocol: a frame is not JSON/],
    ["a duplicate call id", "duplicate-id", /broke the protocol: a call id is repeated or out of order/],
    ["idle for a run that is not deterministic", "idle-out-of-order", /idle arrived for a run that is not/],
    ["started after other events", "started-out-of-order", /started arrived out of order/],
    ["a second ready", "ready-again", /sent "ready" after it announced itself/],
    ["a message for an execution it was never given", "unknown-exec", /for a run it was never sent/],
    ["an exit mid-execution", "exit", /the child process exited with code 9/],
    ["busy for an execution it was never given", "busy-unknown", /said it computes a run it does not have/],
    ["busy with an unknown field", "busy-extra", /busy has an unknown field "extra"/],
  ])(
    "kills the child once on %s, fails the execution with a sandbox error, and replaces it",
    async (_, code, message) => {
      const sandbox = make({ childEntry: badChild, timeoutMs: 10_000 });
      await sandbox.warm();
      const [pid] = sandbox.pids;
      const result = await sandbox.execute(code);
      expect(!result.ok && result.error.kind).toBe("sandbox");
      expect(!result.ok && result.error.message).toMatch(message);
      const next = await sandbox.execute("fine");
      expect(next.ok && next.value).toBe(1);
      expect(sandbox.processCount).toBe(1);
      expect(sandbox.pids).not.toContain(pid);
      expect(alive(pid as number)).toBe(false);
    },
  );

  it("kills a child that sends a second done for a finished execution", async () => {
    const sandbox = make({ childEntry: badChild, timeoutMs: 10_000 });
    await sandbox.warm();
    const [pid] = sandbox.pids;
    const result = await sandbox.execute("done-twice");
    expect(result.ok && result.value).toBe(1);
    await until(() => !alive(pid as number), "the child to be killed");
    const next = await sandbox.execute("fine");
    expect(next.ok && next.value).toBe(1);
  });

  it("fails every open execution of a child that breaks the protocol, and only once", async () => {
    const sandbox = make({ childEntry: badChild, timeoutMs: 10_000 });
    const results = await Promise.all([
      sandbox.execute("silent"),
      sandbox.execute("silent"),
      sandbox.execute("duplicate-id"),
    ]);
    expect(results.map((r) => !r.ok && r.error.kind)).toEqual(["sandbox", "sandbox", "sandbox"]);
    expect(new Set(results.map((r) => !r.ok && r.error.message)).size).toBe(1);
  });

  it("drops a flood on stderr without failing or buffering it", async () => {
    const sandbox = make({ childEntry: badChild, timeoutMs: 10_000 });
    const result = await sandbox.execute("stderr-flood");
    expect(result.ok && result.value).toBe(1);
  });

  it("kills a child that does not stop a run in time", async () => {
    const sandbox = make({ childEntry: badChild, timeoutMs: 100 });
    await sandbox.warm();
    const [pid] = sandbox.pids;
    const result = await sandbox.execute("silent");
    expect(!result.ok && result.error.kind).toBe("timeout");
    await until(() => !alive(pid as number), "the child to be killed");
    // The replacement's boot is not part of the next execution's 100 ms.
    await sandbox.warm();
    const next = await sandbox.execute("fine");
    expect(next.ok && next.value).toBe(1);
  });

  it("waits for a stopped run behind another run's long turn, and kills the child once that run is stopped too", async () => {
    const sandbox = make({ childEntry: badChild, timeoutMs: 10_000 });
    await sandbox.warm();
    const [pid] = sandbox.pids;
    // The first run's turn holds the child (it said so); the second's stop cannot be read until that turn ends.
    const holding = sandbox.execute("busy-silent", { timeoutMs: 1_500 });
    const stopped = await sandbox.execute("silent", { timeoutMs: 100 });
    expect(!stopped.ok && stopped.error.kind).toBe("timeout");
    await new Promise((resolve) => setTimeout(resolve, REMOTE_STOP_GRACE_MS * 3));
    // Before, the child was killed 250 ms after the second stop, failing the first run with it.
    expect(alive(pid as number)).toBe(true);
    // The holding run's own stop is not answered either: that is the run that does not stop, and the child goes.
    const held = await holding;
    expect(!held.ok && held.error.kind).toBe("timeout");
    await new Promise((resolve) => setTimeout(resolve, REMOTE_STOP_GRACE_MS + 200));
    expect(alive(pid as number)).toBe(false);
    expect((await sandbox.execute("fine")).ok).toBe(true);
  });

  it("sends a new execution to a child that is not stopping a run, which may get it killed", async () => {
    const sandbox = make({ childEntry: badChild, poolSize: 2, timeoutMs: 10_000 });
    await sandbox.warm();
    // The first child holds two runs; the second one run, which times out and is never answered.
    const held = [sandbox.execute("silent"), sandbox.execute("silent", { timeoutMs: 100 }), sandbox.execute("silent")];
    expect(await held[1]).toMatchObject({ ok: false, error: { kind: "timeout" } });
    // Before, this went to the second child (fewer runs), which was killed 250 ms after the stop, failing it.
    const next = await sandbox.execute("slow");
    expect(next).toMatchObject({ ok: true, value: 1 });
  });

  it("kills a child whose stopped run is the one it says it computes", async () => {
    const sandbox = make({ childEntry: badChild, timeoutMs: 100 });
    await sandbox.warm();
    const [pid] = sandbox.pids;
    const result = await sandbox.execute("busy-silent");
    expect(!result.ok && result.error.kind).toBe("timeout");
    await new Promise((resolve) => setTimeout(resolve, REMOTE_STOP_GRACE_MS + 200));
    expect(alive(pid as number)).toBe(false);
  });

  it("reports a child that cannot boot as a sandbox error and does not respawn it in a loop", async () => {
    const sandbox = make({ childEntry: new URL("./fixtures/process/no-boot.mjs", import.meta.url) });
    await expect(sandbox.warm()).rejects.toThrow(/exited with code 3/);
    const result = await sandbox.execute("return 1");
    expect(!result.ok && result.error.kind).toBe("sandbox");
  });
});

describe.runIf(bwrap)("a child killed mid-execution", () => {
  let opened = false;
  let hangCalls = 0;
  const waiting: (() => void)[] = [];
  const tools: CodemodeTool[] = [
    {
      name: "hang",
      execute: async () => {
        hangCalls++;
        if (!opened) await new Promise<void>((resolve) => waiting.push(resolve));
        return "answered";
      },
    },
  ];

  it("fails the run it computed, rebuilds the runs parked on tools in a new child, and never calls their tools again", async () => {
    const sandbox = make({ tools, timeoutMs: 20_000 });
    await sandbox.warm();
    const [pid] = sandbox.pids as [number];
    const pending = [sandbox.execute("return await tools.hang();"), sandbox.execute("return [await tools.hang(), 1];")];
    while (hangCalls < 2) await new Promise((resolve) => setTimeout(resolve, 10));
    // A run that computes: the child is busy in the VM (and has said so) when it is killed.
    const computing = sandbox.execute("while (true) {}");
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    process.kill(pid, "SIGKILL");
    expect(await computing).toEqual({
      ok: false,
      error: { kind: "sandbox", message: "the child process exited with signal SIGKILL" },
      output: [],
      calls: [],
    });
    opened = true;
    for (const resolve of waiting.splice(0)) resolve();
    expect((await Promise.all(pending)).map((r) => r.ok && r.value)).toEqual(["answered", ["answered", 1]]);
    expect(hangCalls).toBe(2);
    expect(sandbox.poolStats).toMatchObject({ lost: 1, moved: 2 });
    const next = await sandbox.execute("return 6 * 7;");
    expect(next.ok && next.value).toBe(42);
    expect(sandbox.processCount).toBe(1);
    expect(sandbox.pids).not.toContain(pid);
  });

  it("does not kill a child whose stopped run waits behind another run that computes within its deadline", async () => {
    // One child at most: the queued run can neither move nor go to a spare, and waits behind the busy one.
    const sandbox = make({ timeoutMs: 20_000, maxPoolSize: 1 });
    await sandbox.warm();
    const [pid] = sandbox.pids;
    // Computes for several stop graces (REMOTE_STOP_GRACE_MS), well within its own deadline.
    const busy = sandbox.execute("const t = Date.now(); while (Date.now() - t < 1500) {} return 'done';");
    const controller = new AbortController();
    const queued = sandbox.execute("return 'never ran'", { signal: controller.signal });
    // Once the busy run's child has said it computes (within milliseconds of its turn, or more on a loaded machine).
    setTimeout(() => controller.abort(), 600);
    expect(await queued).toMatchObject({ ok: false, error: { kind: "aborted" } });
    // Before, the child was killed when the queued run had not stopped 250 ms later, ending the busy run with it.
    expect(await busy).toMatchObject({ ok: true, value: "done" });
    expect(sandbox.pids).toEqual([pid]);
    expect((await sandbox.execute("return 1")).ok).toBe(true);
  });

  it("retires a child that used most of its CPU rlimit, before the rlimit ends it", async () => {
    // cpuSeconds 2: the child asks to retire past 1.6 s of CPU (its boot counts too); RLIMIT_CPU would kill it at 2 s.
    const sandbox = make({ isolation: { limits: { cpuSeconds: 2 } } });
    await sandbox.warm();
    const [first] = sandbox.pids as [number];
    let spun = 0;
    while (sandbox.pids.includes(first) && spun++ < 20) {
      // Short bursts: the check after each run sees the threshold crossed well before the rlimit.
      const result = await sandbox.execute("while (true) {}", { timeoutMs: 200 });
      expect(!result.ok && result.error.kind).toBe("timeout");
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    expect(sandbox.pids).not.toContain(first);
    expect(sandbox.processCount).toBe(1);
    const next = await sandbox.execute("return 1;");
    expect(next.ok && next.value).toBe(1);
  });

  it("close() ends every child", async () => {
    const sandbox = make({ poolSize: 2 });
    await sandbox.warm();
    const pids = sandbox.pids;
    expect(pids).toHaveLength(2);
    const running = sandbox.execute("while (true) {}", { timeoutMs: 60_000 });
    await sandbox.close();
    expect(!(await running).ok).toBe(true);
    expect(pids.filter(alive)).toEqual([]);
  });
});

describe.runIf(bwrap)("an execution too large for one frame", () => {
  const hang: CodemodeTool = {
    name: "hang",
    execute: (_args, { signal }) =>
      new Promise((resolve) => signal.addEventListener("abort", () => resolve("aborted"))),
  };
  const bystander = async (sandbox: ProcessCodemodeSandbox) => {
    const controller = new AbortController();
    const result = sandbox.execute("return await tools.hang();", { signal: controller.signal });
    return { result, end: () => controller.abort() };
  };

  it("fails alone when its request is over the frame limit; the child and its other runs go on", async () => {
    const sandbox = make({ tools: [hang], timeoutMs: 20_000 });
    await sandbox.warm();
    const [pid] = sandbox.pids;
    const other = await bystander(sandbox);
    // Each control character is escaped to six bytes in the frame: 23 M of them make a frame over 128 MiB.
    const big = await sandbox.execute(`//${"\u0001".repeat(23_000_000)}\nreturn 1;`);
    expect(!big.ok && big.error).toEqual({
      kind: "sandbox",
      message: expect.stringMatching(
        /^the execution is too large to send to the child process: a frame of \d+ bytes is over the limit of 134217728$/,
      ),
    });
    other.end();
    expect(await other.result).toMatchObject({ ok: false, error: { kind: "aborted" } });
    const next = await sandbox.execute("return 1;");
    expect(next.ok && next.value).toBe(1);
    expect(sandbox.pids).toEqual([pid]);
  });

  it("fails only the call whose answer is over the frame limit", async () => {
    const sandbox = make({ tools: [hang], timeoutMs: 20_000 });
    await sandbox.warm();
    const [pid] = sandbox.pids;
    const other = await bystander(sandbox);
    // Each within MAX_VALUE_CHARS, together more than a frame: 6 bytes per character of the message, 4 per quote.
    const message = "\u0001".repeat(MAX_VALUE_CHARS);
    const properties = { quotes: '"'.repeat(MAX_VALUE_CHARS / 2 - 10) };
    const run = sandbox.start("try { await tools.t(); } catch (e) { return e.message; }", {
      startedAt: 0,
      seed: 1,
      tools: [{ name: "t" }],
      onCall: (call) => run.deliver(1, 0, call.id, { ok: false, message, properties }),
    });
    const result = await run.result;
    expect(result.ok && result.value).toMatch(
      /^the answer to this call is too large to send to the sandbox's child process: a frame of \d+ bytes is over/,
    );
    other.end();
    expect(await other.result).toMatchObject({ ok: false, error: { kind: "aborted" } });
    expect(sandbox.pids).toEqual([pid]);
  });
});

describe("construction: no silent downgrade", () => {
  it.runIf(process.platform === "linux")("fails without bwrap, saying what is missing and how to install it", () => {
    expect(() => make({ isolation: { bwrapPath: "/nonexistent/bwrap" } })).toThrow(IsolationUnavailableError);
    expect(() => make({ isolation: { bwrapPath: "/nonexistent/bwrap" } })).toThrow(/apt-get install bubblewrap/);
  });

  it.runIf(process.platform === "linux")("fails without runsc for the gvisor runtime", () => {
    expect(() => make({ isolation: { runtime: "gvisor", runscPath: "/nonexistent/runsc" } })).toThrow(
      /apt-get install runsc/,
    );
  });

  it("runs a plain child with an empty environment when degraded is allowed, and says what is missing", async () => {
    const sandbox = make({ isolation: { bwrapPath: "/nonexistent/bwrap", allowDegraded: true } });
    expect(sandbox.protections).toMatchObject({
      runtime: "plain",
      emptyEnvironment: true,
      seccomp: null,
      rlimits: null,
      noNetwork: false,
    });
    expect(sandbox.protections.missing.join(" ")).toMatch(/bubblewrap|Linux-only/);
    const result = await sandbox.execute("return 1 + 1;");
    expect(result.ok && result.value).toBe(2);
  });

  it.runIf(bwrap)("checks its options", () => {
    expect(() => make({ isolation: { limits: { processes: 2 } } })).toThrow(/processes must be at least 12/);
    expect(() => make({ isolation: { limits: { addressSpaceBytes: 1e6 } } })).toThrow(/at least 2 GiB/);
    expect(() => make({ isolation: { runtime: "docker" as "bwrap" } })).toThrow(/runtime must be/);
    // A misspelt protection is refused, not run with its default.
    expect(() => make({ isolation: { limit: { processes: 16 } } as object })).toThrow(
      'isolation has no option "limit"',
    );
    expect(() => make({ isolation: { limits: { cpuSecs: 5 } } as object })).toThrow(
      'isolation.limits has no option "cpuSecs"',
    );
    expect(() => make({ poolSize: 0 })).toThrow(/poolSize/);
  });
});

describe.runIf(bwrap)("protections under bwrap", () => {
  it("reports namespaces, the minimal root, seccomp, exec denial and rlimits", () => {
    const sandbox = make();
    const p = sandbox.protections;
    expect(p.runtime).toBe("bwrap");
    expect(p.missing).toEqual([]);
    expect(p.namespaces).toEqual(expect.arrayContaining(["user", "pid", "net", "ipc", "uts", "mount"]));
    expect(p).toMatchObject({ emptyEnvironment: true, minimalReadOnlyRoot: true, noNetwork: true, execDenied: true });
    expect(p.seccomp).toBe(process.arch === "arm64" ? "aarch64" : "x86_64");
    expect(p.deniedSyscalls).toEqual(
      expect.arrayContaining(["socket", "ptrace", "mount", "unshare", "setns", "keyctl"]),
    );
    expect(p.rlimits).toMatchObject({ cpuSeconds: 600, openFiles: 64, processes: 32 });
  });

  it("applies the rlimits to the node process inside the sandbox (read from the host's /proc)", async () => {
    const sandbox = make({ isolation: { limits: { openFiles: 48, processes: 24, cpuSeconds: 300 } } });
    await sandbox.warm();
    const limits = await nodeLimits(sandbox.pids[0] as number);
    expect(limits["Max open files"]).toEqual(["48", "48"]);
    expect(limits["Max processes"]).toEqual(["24", "24"]);
    expect(limits["Max cpu time"]).toEqual(["300", "305"]);
    expect(limits["Max address space"]?.[0]).toBe(String(sandbox.protections.rlimits?.addressSpaceBytes));
    expect(limits["Max core file size"]).toEqual(["0", "0"]);
  });
});

/** Finds node under the sandbox's outermost process and parses its /proc/PID/limits. */
async function nodeLimits(root: number): Promise<Record<string, string[]>> {
  const { readFileSync, readdirSync } = await import("node:fs");
  const children = (pid: number): number[] =>
    readdirSync(`/proc/${pid}/task`).flatMap((tid) =>
      readFileSync(`/proc/${pid}/task/${tid}/children`, "utf8").trim().split(/\s+/).filter(Boolean).map(Number),
    );
  const queue = [root];
  while (queue.length > 0) {
    const pid = queue.shift() as number;
    const exe = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0")[0] ?? "";
    if (exe.endsWith("/node")) {
      const out: Record<string, string[]> = {};
      for (const line of readFileSync(`/proc/${pid}/limits`, "utf8").split("\n").slice(1)) {
        const match = /^(.+?)\s{2,}(\S+)\s+(\S+)/.exec(line);
        if (match) out[match[1] as string] = [match[2] as string, match[3] as string];
      }
      return out;
    }
    queue.push(...children(pid));
  }
  throw new Error("no node process under the sandbox");
}
