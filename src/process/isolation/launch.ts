/**
 * What the runtimes of the process tier share when they launch a child: what each is given (Common) and hands back
 * (a plan per child and the protections it reports), the launch helper's parts and exit reasons, and the
 * parent-death signal.
 */
import { randomBytes } from "node:crypto";
import type { ChildPlan } from "../channel.ts";
import { type ChildFiles, findBinary } from "./child-files.ts";
import { helperLimits, type ProcessLimits } from "./child-limits.ts";
import { HELPER_EXIT, helperConfig, helperElf } from "./helper.ts";
import { baseFilter, DENIED_SYSCALLS, encodeFilter, execFilter, type SeccompArch } from "./seccomp.ts";

export type ProcessRuntime = "bwrap" | "gvisor" | "plain";

/** What a child of this sandbox runs under. */
export interface ProcessProtections {
  runtime: ProcessRuntime;
  /** Protections asked for (or implied by the platform) that are not active; empty unless `allowDegraded`. */
  missing: string[];
  /** The child's environment is empty. */
  emptyEnvironment: boolean;
  /** V8 heap cap of the child's own JavaScript, in MiB. */
  heapCapMb: number;
  /** Namespaces of its own (bwrap), or the separate kernel's (gVisor). */
  namespaces: string[];
  /** Only node, its libraries and Airlock's files are visible, read-only. */
  minimalReadOnlyRoot: boolean;
  /** No network interface but loopback (or none at all). */
  noNetwork: boolean;
  /** The architecture of the seccomp filters, or null when none is loaded. */
  seccomp: SeccompArch | null;
  /** Syscalls the filters refuse (plus clone with namespace flags, execve after start-up, raising rlimits). */
  deniedSyscalls: string[];
  /** execve is refused once node runs. */
  execDenied: boolean;
  rlimits: Required<ProcessLimits> | null;
  /** Runs behind gVisor's user-space kernel. */
  separateKernel: boolean;
  /** Host user the outermost process runs as. */
  hostUid: number | null;
}

export interface ResolvedIsolation {
  plan: () => ChildPlan;
  protections: ProcessProtections;
}

/** What a runtime that loads the launch helper is given. */
export interface Common {
  wasmPages: number;
  files: ChildFiles;
  childArgs: string[];
  limits: Required<ProcessLimits>;
  heapMb: number;
  arch: SeccompArch;
}

/** The user and group a child runs as inside the sandbox, and on the host by default when the host runs as root. */
export const NOBODY = 65534;
/** Where the launch helper is inside the sandbox. */
export const HELPER_PATH = "/.airlock-exec";

/** The files and descriptors of the helper for one child: ELF, configuration (with a fresh secret), base filter. */
export function helperParts(arch: SeccompArch, limits: Required<ProcessLimits>, withBase = false) {
  const secretBytes = randomBytes(24);
  const secret = [0, 1, 2].map((i) => secretBytes.readBigUInt64LE(i * 8));
  const words = [0, 1, 2, 3, 4, 5].map((i) => secretBytes.readUInt32LE(i * 4));
  return {
    elf: helperElf(arch),
    config: helperConfig(secret, helperLimits(limits), encodeFilter(execFilter(arch, words, withBase))),
    base: encodeFilter(baseFilter(arch)),
  };
}

/** Exit statuses of the helper, as the reason a child could not start. */
export const HELPER_EXIT_REASONS: Record<number, string> = {
  [HELPER_EXIT.read]: "the launch helper could not read its configuration",
  [HELPER_EXIT.shortConfig]: "the launch helper got an incomplete configuration",
  [HELPER_EXIT.noNewPrivs]: "the launch helper could not set no_new_privs",
  [HELPER_EXIT.seccomp]: "the launch helper could not load the exec filter",
  [HELPER_EXIT.exec]: "the launch helper could not start node",
  ...Object.fromEntries(
    ["cpu", "file size", "stack", "core", "processes", "open files", "memlock", "address space"].map((name, slot) => [
      HELPER_EXIT.rlimit + slot,
      `the launch helper could not set the ${name} rlimit`,
    ]),
  ),
};

/** What the helper's filters refuse, as `protections.deniedSyscalls` names it. */
export function deniedList(): string[] {
  return [
    ...DENIED_SYSCALLS,
    "clone with namespace flags",
    "clone3 (ENOSYS)",
    "io_uring (ENOSYS)",
    "execve after start-up",
    "execveat",
    "setrlimit/prlimit64 (setting)",
  ];
}

/**
 * Node cannot give a spawned process a parent-death signal; util-linux's setpriv can, and keeps it across its exec of
 * the runtime. So if the host dies, bwrap or runsc is killed too (bwrap's own --die-with-parent covers the rest).
 */
export function withParentDeathSignal(command: string, args: string[]): { command: string; args: string[] } {
  const setpriv = findBinary("setpriv", undefined);
  return setpriv ? { command: setpriv, args: ["--pdeathsig", "KILL", "--", command, ...args] } : { command, args };
}
