/**
 * The `bwrap` runtime (Linux, the default): bubblewrap with new user, pid, net, ipc, uts, cgroup and mount
 * namespaces; a read-only root holding only node, its libraries, Airlock's dist and the quickjs-wasi package; no
 * /home, /root, /tmp or /dev; `--die-with-parent`, `--new-session`, `--clearenv`; the base seccomp filter
 * (`--seccomp FD`); then the launch helper sets the rlimits, loads the exec filter and starts node with an empty
 * environment.
 */
import { spawnSync } from "node:child_process";
import type { ChildPlan } from "../channel.ts";
import type { ChildFiles } from "./child-files.ts";
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

const NAMESPACE_ARGS = [
  "--unshare-user",
  "--unshare-pid",
  "--unshare-net",
  "--unshare-ipc",
  "--unshare-uts",
  "--unshare-cgroup-try",
  "--uid",
  String(NOBODY),
  "--gid",
  String(NOBODY),
  "--hostname",
  "airlock",
  "--die-with-parent",
  "--new-session",
  "--clearenv",
];

function bindArgs(files: ChildFiles): string[] {
  return files.binds.flatMap((b) => ["--ro-bind", b.source, b.dest]);
}

const probeCache = new Map<string, string | undefined>();

/** Starts bwrap once with the namespaces the children use; returns why it failed, or undefined. */
export function probeBwrap(bwrap: string, files: ChildFiles, uid: number | undefined): string | undefined {
  const key = JSON.stringify([bwrap, files.node, uid]);
  if (probeCache.has(key)) return probeCache.get(key);
  const result = spawnSync(bwrap, [...NAMESPACE_ARGS, ...bindArgs(files), "--", files.node, "-e", "0"], {
    encoding: "utf8",
    env: {},
    timeout: 20_000,
    ...(uid !== undefined ? { uid, gid: uid } : {}),
  });
  const failure =
    result.status === 0
      ? undefined
      : `bwrap could not create the sandbox's namespaces (${(result.stderr || result.error?.message || `exit ${result.status}`).trim().slice(0, 300)}); ` +
        "unprivileged user namespaces must be enabled: sysctl kernel.unprivileged_userns_clone=1 (Debian) or " +
        "kernel.apparmor_restrict_unprivileged_userns=0 (Ubuntu 24.04+), and user.max_user_namespaces > 0";
  probeCache.set(key, failure);
  return failure;
}

export function bwrapIsolation(
  c: Common & { bwrap: string; uid: number | undefined; gid: number | undefined },
): ResolvedIsolation {
  const plan = (): ChildPlan => {
    const parts = helperParts(c.arch, c.limits);
    return {
      ...withParentDeathSignal(c.bwrap, [
        ...NAMESPACE_ARGS,
        "--disable-userns",
        ...bindArgs(c.files),
        "--perms",
        "0555",
        "--ro-bind-data",
        "4",
        HELPER_PATH,
        "--seccomp",
        "3",
        "--remount-ro",
        "/",
        "--chdir",
        "/",
        "--",
        HELPER_PATH,
        c.files.node,
        ...nodeFlags(c.heapMb, c.wasmPages),
        ...c.childArgs,
      ]),
      env: {},
      ...(c.uid !== undefined ? { uid: c.uid, gid: c.gid } : {}),
      // fd 3: the base filter; fd 4: the helper itself; stdin starts with the helper's configuration.
      fds: [parts.base, parts.elf],
      stdinPrefix: parts.config,
      exitReasons: HELPER_EXIT_REASONS,
    };
  };
  const protections: ProcessProtections = {
    runtime: "bwrap",
    missing: [],
    emptyEnvironment: true,
    heapCapMb: c.heapMb,
    namespaces: ["user", "pid", "net", "ipc", "uts", "mount", "cgroup"],
    minimalReadOnlyRoot: true,
    noNetwork: true,
    seccomp: c.arch,
    deniedSyscalls: deniedList(),
    execDenied: true,
    rlimits: c.limits,
    separateKernel: false,
    hostUid: c.uid ?? (typeof process.getuid === "function" ? process.getuid() : null),
  };
  return { plan, protections };
}
