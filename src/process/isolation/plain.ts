/**
 * The plain runtime (only with `allowDegraded`): a child process with an empty environment and a V8 heap cap, and
 * nothing else: no namespaces, seccomp or rlimits. This is the macOS fallback, and what a Linux host without bwrap
 * gets.
 */

import type { ChildPlan } from "../channel.ts";
import type { ChildFiles } from "./child-files.ts";
import { nodeFlags } from "./child-limits.ts";
import type { ProcessProtections, ResolvedIsolation } from "./launch.ts";

export function plainIsolation(c: {
  files: ChildFiles;
  childArgs: string[];
  heapMb: number;
  missing: string[];
}): ResolvedIsolation {
  const plan = (): ChildPlan => ({
    command: c.files.node,
    args: [...nodeFlags(c.heapMb, null), ...c.childArgs],
    env: {},
    fds: [],
  });
  const protections: ProcessProtections = {
    runtime: "plain",
    missing: c.missing,
    emptyEnvironment: true,
    heapCapMb: c.heapMb,
    namespaces: [],
    minimalReadOnlyRoot: false,
    noNetwork: false,
    seccomp: null,
    deniedSyscalls: [],
    execDenied: false,
    rlimits: null,
    separateKernel: false,
    hostUid: typeof process.getuid === "function" ? process.getuid() : null,
  };
  return { plan, protections };
}
