/**
 * The `gvisor` runtime: the same child under runsc (gVisor's user-space kernel) with no network, an OCI bundle whose
 * root holds the same files read-only (and an empty read-only /tmp), the same rlimits, and the same launch helper
 * inside, which loads the base and exec rules as one filter (runsc takes no BPF program from outside).
 */
import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ChildPlan } from "../channel.ts";
import { nodeFlags } from "./child-limits.ts";
import {
  type Common,
  deniedList,
  HELPER_EXIT_REASONS,
  HELPER_PATH,
  helperParts,
  NOBODY,
  type ProcessProtections,
  type ResolvedIsolation,
  withParentDeathSignal,
} from "./launch.ts";

export function gvisorIsolation(c: Common & { runsc: string }): ResolvedIsolation {
  const plan = (): ChildPlan => {
    // gVisor takes no BPF program from outside: the helper loads the base rules together with the exec rules.
    const parts = helperParts(c.arch, c.limits, true);
    const dir = mkdtempSync(join(tmpdir(), "airlock-runsc-"));
    const rootfs = join(dir, "rootfs");
    mkdirSync(rootfs);
    writeFileSync(join(dir, "exec"), parts.elf, { mode: 0o555 });
    const id = `airlock-${randomUUID()}`;
    const spec = ociSpec(c, rootfs, join(dir, "exec"), HELPER_PATH);
    writeFileSync(join(dir, "config.json"), JSON.stringify(spec));
    const state = join(dir, "state");
    mkdirSync(state);
    const global = ["--root", state, "--network", "none", "--ignore-cgroups"];
    return {
      ...withParentDeathSignal(c.runsc, [...global, "run", "--bundle", dir, id]),
      env: {},
      fds: [],
      stdinPrefix: parts.config,
      exitReasons: HELPER_EXIT_REASONS,
      cleanup: async () => {
        await new Promise<void>((resolve) => {
          const del = spawn(c.runsc, [...global, "delete", "--force", id], { env: {}, stdio: "ignore" });
          const timer = setTimeout(() => del.kill("SIGKILL"), 10_000);
          del.once("exit", () => resolve());
          del.once("error", () => resolve());
          del.once("exit", () => clearTimeout(timer));
        });
        rmSync(dir, { recursive: true, force: true });
      },
    };
  };
  const protections: ProcessProtections = {
    runtime: "gvisor",
    missing: [],
    emptyEnvironment: true,
    heapCapMb: c.heapMb,
    namespaces: ["gVisor sandbox (user-space kernel)", "pid", "net", "ipc", "uts", "mount"],
    minimalReadOnlyRoot: true,
    noNetwork: true,
    seccomp: c.arch,
    deniedSyscalls: deniedList(),
    execDenied: true,
    rlimits: c.limits,
    separateKernel: true,
    hostUid: 0,
  };
  return { plan, protections };
}

/** The OCI runtime spec of a gVisor child. */
function ociSpec(c: Common, rootfs: string, helperFile: string, helperPath: string) {
  const mounts = [
    { destination: "/proc", type: "proc", source: "proc" },
    ...c.files.binds.map((b) => ({
      destination: b.dest,
      type: "bind",
      source: b.source,
      options: ["rbind", "ro", "nosuid", "nodev"],
    })),
    { destination: helperPath, type: "bind", source: helperFile, options: ["bind", "ro", "nosuid", "nodev"] },
    // runsc gives a container a writable tmpfs at /tmp unless the spec mounts one: make it empty and read-only.
    { destination: "/tmp", type: "tmpfs", source: "tmpfs", options: ["ro", "nosuid", "nodev", "noexec", "size=4k"] },
  ];
  return {
    ociVersion: "1.0.2",
    process: {
      terminal: false,
      user: { uid: NOBODY, gid: NOBODY },
      args: [helperPath, c.files.node, ...nodeFlags(c.heapMb, c.wasmPages), ...c.childArgs],
      env: [],
      cwd: "/",
      capabilities: { bounding: [], effective: [], inheritable: [], permitted: [], ambient: [] },
      noNewPrivileges: true,
      rlimits: [],
    },
    root: { path: rootfs, readonly: true },
    hostname: "airlock",
    mounts,
    linux: {
      namespaces: [{ type: "pid" }, { type: "network" }, { type: "ipc" }, { type: "uts" }, { type: "mount" }],
    },
  };
}
