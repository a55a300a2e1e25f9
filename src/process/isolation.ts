/**
 * Decides how the children of a ProcessCodemodeSandbox are isolated, checks that it is available, and builds the
 * command that starts each child:
 *
 * - `bwrap` (Linux, the default): bubblewrap with new user, pid, net, ipc, uts, cgroup and mount namespaces; a
 *   read-only root holding only node, its libraries, Airlock's dist and the quickjs-wasi package; no /home, /root,
 *   /tmp or /dev; `--die-with-parent`, `--new-session`, `--clearenv`; the base seccomp filter (`--seccomp FD`); then
 *   the launch helper sets the rlimits, loads the exec filter and starts node with an empty environment.
 * - `gvisor`: the same child under runsc (gVisor's user-space kernel) with no network, an OCI bundle whose root holds
 *   the same files read-only (and an empty read-only /tmp), the same rlimits, and the same helper inside, which loads
 *   the base and exec rules as one filter (runsc takes no BPF program from outside).
 * - plain (only with `allowDegraded`): a child process with an empty environment and a V8 heap cap, and nothing else:
 *   no namespaces, seccomp or rlimits. This is the macOS fallback, and what a Linux host without bwrap gets.
 *
 * Nothing is downgraded silently: when a protection asked for is unavailable, construction throws an error naming
 * what is missing and how to install it, unless `allowDegraded` is set; `protections` reports what is active.
 */
import { spawn, spawnSync } from "node:child_process";
import { randomBytes, randomUUID } from "node:crypto";
import {
  accessSync,
  chmodSync,
  constants,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  realpathSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { delimiter, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { refuseUnknownOptions } from "../options.ts";
import type { ChildConfig } from "./child.ts";
import { HELPER_EXIT, type HelperLimit, helperConfig, helperElf, RLIMIT } from "./helper.ts";
import type { ChildPlan } from "./pool.ts";
import {
  baseFilter,
  currentSeccompArch,
  DENIED_SYSCALLS,
  encodeFilter,
  execFilter,
  type SeccompArch,
} from "./seccomp.ts";

export interface ProcessLimits {
  /** RLIMIT_CPU of a child, in seconds of CPU time over its whole life (it retires itself at 80%). Default 600. */
  cpuSeconds?: number;
  /**
   * RLIMIT_AS of a child, in bytes. Default: NODE_ADDRESS_SPACE_BYTES for node itself plus, for each VM a child may
   * keep, its wasm memory's reservation (the VM memory limit plus WASM_MEMORY_HEADROOM_BYTES).
   */
  addressSpaceBytes?: number;
  /** RLIMIT_NOFILE of a child. Default 64. */
  openFiles?: number;
  /** RLIMIT_NPROC of a child (processes and threads of the sandbox's user). Default 32. */
  processes?: number;
}

export interface ProcessIsolationOptions {
  /** `bwrap` (default on Linux) or `gvisor` (runsc). */
  runtime?: "bwrap" | "gvisor";
  /** Start the children with whatever protection is available instead of failing construction. */
  allowDegraded?: boolean;
  limits?: ProcessLimits;
  /** V8 heap cap of a child's own JavaScript, in MiB (the VMs' memory is capped separately). Default 256. */
  heapMb?: number;
  /** Absolute paths of the binaries; defaults: the running node, and bwrap/runsc from the usual system locations. */
  nodePath?: string;
  bwrapPath?: string;
  runscPath?: string;
  /** Host user and group the children run as when the host runs as root (default 65534, nobody). */
  uid?: number;
  gid?: number;
}

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

/**
 * Address space node needs for itself (measured: ~1.0 GiB of reservations right after start, code space and heap
 * included), with room for its heap to grow to the cap.
 */
export const NODE_ADDRESS_SPACE_BYTES = 2 * 1024 * 1024 * 1024;
/** A VM's wasm memory beyond its heap limit: the QuickJS stack, static data and allocator slack. */
export const WASM_MEMORY_HEADROOM_BYTES = 64 * 1024 * 1024;
const WASM_PAGE = 65536;
export const DEFAULT_LIMITS: Omit<Required<ProcessLimits>, "addressSpaceBytes"> = {
  cpuSeconds: 600,
  openFiles: 64,
  processes: 32,
};
const DEFAULT_HEAP_MB = 256;
/** RLIMIT_STACK of a child; V8 is told it has a little less (CHILD_STACK_KB) on the main thread. */
const CHILD_STACK_BYTES = 16 * 1024 * 1024;
const CHILD_STACK_KB = 7800;
const NOBODY = 65534;

/** An isolation that cannot be had, with what to do about it. */
export class IsolationUnavailableError extends Error {
  override readonly name = "IsolationUnavailableError";
  constructor(readonly missing: string[]) {
    super(
      `process isolation is not available: ${missing.join("; ")}. ` +
        "Pass isolation: { allowDegraded: true } to run with what is available (see sandbox.protections).",
    );
  }
}

export interface ResolvedIsolation {
  plan: () => ChildPlan;
  protections: ProcessProtections;
}

interface Files {
  node: string;
  child: string;
  /** Directories and files bound read-only; `own` marks Airlock's files (as opposed to node and its libraries). */
  binds: { source: string; dest: string; own?: boolean }[];
}

/** Where Airlock's own files are: the package root (package.json, dist) and the quickjs-wasi package. */
function airlockFiles(nodePath: string): Files {
  const child = fileURLToPath(new URL("./child.js", import.meta.url));
  const distDir = dirname(dirname(child));
  const root = dirname(distDir);
  const wasm = createRequire(import.meta.url).resolve("quickjs-wasi/quickjs.wasm");
  const quickjs = dirname(wasm);
  const binds: Files["binds"] = [
    { source: distDir, dest: distDir, own: true },
    { source: join(root, "package.json"), dest: join(root, "package.json"), own: true },
    { source: realpathSync(quickjs), dest: quickjs, own: true },
  ];
  const node = realpathSync(nodePath);
  binds.push({ source: node, dest: node });
  for (const lib of sharedLibraries(node)) binds.push(lib);
  return { node, child, binds };
}

/** Whether `uid`/`gid` (without capabilities) can reach and read `path`: search on every ancestor, read at the end. */
function accessibleBy(path: string, uid: number, gid: number): boolean {
  const parts = path.split("/").filter(Boolean);
  let current = "/";
  for (let i = 0; i <= parts.length; i++) {
    let st: ReturnType<typeof statSync>;
    try {
      st = statSync(current);
    } catch {
      return false;
    }
    const last = i === parts.length;
    const need = st.isDirectory() ? (last ? 5 : 1) : 4;
    const bits = st.uid === uid ? (st.mode >> 6) & 7 : st.gid === gid ? (st.mode >> 3) & 7 : st.mode & 7;
    if ((bits & need) !== need) return false;
    if (!last) current = join(current, parts[i] as string);
  }
  return true;
}

const staged = new Map<string, string>();
let stagingRoot: string | undefined;

/**
 * A host running as root starts the children as an unprivileged user, whose process limit the kernel enforces (it
 * does not for root, not even inside a user namespace). When that user cannot read Airlock's files where they are
 * (a checkout under a private directory), the host copies them once into a private-to-root but world-readable
 * directory, and the sandbox binds the copy at the original path.
 */
function stageFor(files: Files, uid: number, gid: number): void {
  for (const bind of files.binds) {
    if (!bind.own || accessibleBy(bind.source, uid, gid)) continue;
    let copy = staged.get(bind.source);
    if (!copy) {
      if (!stagingRoot) {
        stagingRoot = mkdtempSync(join(tmpdir(), "airlock-files-"));
        chmodSync(stagingRoot, 0o755);
        const root = stagingRoot;
        process.once("exit", () => rmSync(root, { recursive: true, force: true }));
      }
      copy = join(stagingRoot, String(staged.size));
      cpSync(bind.source, copy, { recursive: true, dereference: true });
      makeReadable(copy);
      staged.set(bind.source, copy);
    }
    bind.source = copy;
  }
}

function makeReadable(path: string): void {
  const st = statSync(path);
  chmodSync(path, st.isDirectory() ? 0o755 : 0o644);
  if (st.isDirectory()) for (const name of readdirSync(path)) makeReadable(join(path, name));
}

const libraryCache = new Map<string, { source: string; dest: string }[]>();

/** Node's shared libraries as ldd names them (bound at that path from their real file). */
function sharedLibraries(node: string): { source: string; dest: string }[] {
  const cached = libraryCache.get(node);
  if (cached) return cached;
  const out: { source: string; dest: string }[] = [];
  const ldd = spawnSync("ldd", [node], { encoding: "utf8", env: {}, timeout: 10_000 });
  if (ldd.status === 0) {
    for (const line of ldd.stdout.split("\n")) {
      const match = /(?:=>\s*)?(\/\S+)\s+\(0x/.exec(line);
      if (match?.[1] && existsSync(match[1])) out.push({ source: realpathSync(match[1]), dest: match[1] });
    }
  }
  if (out.length === 0) {
    // A static node, or no ldd: the system library directories instead.
    for (const dir of ["/lib", "/lib64", "/usr/lib", "/usr/lib64"]) {
      if (existsSync(dir)) out.push({ source: realpathSync(dir), dest: dir });
    }
  }
  libraryCache.set(node, out);
  return out;
}

function findBinary(name: string, explicit: string | undefined): string | undefined {
  if (explicit !== undefined) {
    if (!explicit.startsWith("/")) throw new TypeError(`the path of ${name} must be absolute`);
    return isExecutable(explicit) ? explicit : undefined;
  }
  const dirs = ["/usr/bin", "/usr/local/bin", "/bin", "/usr/sbin", ...(process.env.PATH ?? "").split(delimiter)];
  for (const dir of dirs) {
    if (!dir.startsWith("/")) continue;
    const candidate = join(dir, name);
    if (isExecutable(candidate)) return candidate;
  }
  return undefined;
}

function isExecutable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

const ISOLATION_KEYS: readonly (keyof ProcessIsolationOptions)[] = [
  "runtime",
  "allowDegraded",
  "limits",
  "heapMb",
  "nodePath",
  "bwrapPath",
  "runscPath",
  "uid",
  "gid",
];

function checkLimits(limits: ProcessLimits | undefined, wasmPages: number, maxVms: number): Required<ProcessLimits> {
  if (limits !== undefined && (limits === null || typeof limits !== "object")) {
    throw new TypeError("isolation.limits must be an object");
  }
  const out = { ...DEFAULT_LIMITS, addressSpaceBytes: NODE_ADDRESS_SPACE_BYTES + maxVms * wasmPages * WASM_PAGE };
  if (limits !== undefined) refuseUnknownOptions(limits, "isolation.limits", Object.keys(out));
  for (const key of Object.keys(out) as (keyof ProcessLimits)[]) {
    const value = limits?.[key];
    if (value === undefined) continue;
    if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 1) {
      throw new RangeError(`isolation.limits.${key} must be a positive integer, got ${String(value)}`);
    }
    out[key] = value;
  }
  if (out.addressSpaceBytes < 2 * 1024 * 1024 * 1024) {
    throw new RangeError("isolation.limits.addressSpaceBytes must be at least 2 GiB: node alone reserves about 1 GiB");
  }
  if (out.openFiles < 16) throw new RangeError("isolation.limits.openFiles must be at least 16");
  if (out.processes < 12) throw new RangeError("isolation.limits.processes must be at least 12: node runs ~10 threads");
  return out;
}

function helperLimits(limits: Required<ProcessLimits>): HelperLimit[] {
  const same = (resource: number, value: number | bigint) => ({ resource, soft: BigInt(value), hard: BigInt(value) });
  return [
    { resource: RLIMIT.CPU, soft: BigInt(limits.cpuSeconds), hard: BigInt(limits.cpuSeconds + 5) },
    same(RLIMIT.FSIZE, 0),
    same(RLIMIT.STACK, CHILD_STACK_BYTES),
    same(RLIMIT.CORE, 0),
    same(RLIMIT.NPROC, limits.processes),
    same(RLIMIT.NOFILE, limits.openFiles),
    same(RLIMIT.MEMLOCK, 0),
    same(RLIMIT.AS, limits.addressSpaceBytes),
  ];
}

/** The files and descriptors of the helper for one child: ELF, configuration (with a fresh secret), base filter. */
function helperParts(arch: SeccompArch, limits: Required<ProcessLimits>, withBase = false) {
  const secretBytes = randomBytes(24);
  const secret = [0, 1, 2].map((i) => secretBytes.readBigUInt64LE(i * 8));
  const words = [0, 1, 2, 3, 4, 5].map((i) => secretBytes.readUInt32LE(i * 4));
  return {
    elf: helperElf(arch),
    config: helperConfig(secret, helperLimits(limits), encodeFilter(execFilter(arch, words, withBase))),
    base: encodeFilter(baseFilter(arch)),
  };
}

/**
 * Node's flags in a child. With an address space limit, wasm memories must not reserve what they never use: by
 * default V8 reserves 10 GiB per memory for guard regions (the trap handler), or else the whole 4 GiB a 32-bit memory
 * may reach. Without the trap handler and with a page cap, each VM reserves exactly its cap, and bounds checks are
 * explicit (measured here: no visible difference per execution).
 */
function nodeFlags(heapMb: number, wasmPages: number | null): string[] {
  return [
    `--max-old-space-size=${heapMb}`,
    `--stack-size=${CHILD_STACK_KB}`,
    "--no-addons",
    "--disallow-code-generation-from-strings",
    ...(wasmPages !== null ? ["--disable-wasm-trap-handler", `--wasm-max-mem-pages=${wasmPages}`] : []),
  ];
}

const probeCache = new Map<string, string | undefined>();

/** Starts bwrap once with the namespaces the children use; returns why it failed, or undefined. */
function probeBwrap(bwrap: string, node: string, binds: string[], uid: number | undefined): string | undefined {
  const key = JSON.stringify([bwrap, node, uid]);
  if (probeCache.has(key)) return probeCache.get(key);
  const result = spawnSync(bwrap, [...NAMESPACE_ARGS, ...binds, "--", node, "-e", "0"], {
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

/**
 * Node cannot give a spawned process a parent-death signal; util-linux's setpriv can, and keeps it across its exec of
 * the runtime. So if the host dies, bwrap or runsc is killed too (bwrap's own --die-with-parent covers the rest).
 */
function withParentDeathSignal(command: string, args: string[]): { command: string; args: string[] } {
  const setpriv = findBinary("setpriv", undefined);
  return setpriv ? { command: setpriv, args: ["--pdeathsig", "KILL", "--", command, ...args] } : { command, args };
}

function bindArgs(files: Files): string[] {
  return files.binds.flatMap((b) => ["--ro-bind", b.source, b.dest]);
}

export interface IsolationConfig {
  maxVms: number;
  memoryLimitBytes: number;
  /** A node script to run instead of Airlock's child entry; its directory is bound read-only too. */
  entry?: string;
  /** Arguments after the entry, instead of the child's configuration. */
  entryArgs?: string[];
}

export function resolveIsolation(options: ProcessIsolationOptions, config: IsolationConfig): ResolvedIsolation {
  if (options === null || typeof options !== "object") throw new TypeError("isolation must be an object");
  // A misspelt protection must not pass for its default.
  refuseUnknownOptions(options, "isolation", ISOLATION_KEYS);
  const runtime = options.runtime ?? "bwrap";
  if (runtime !== "bwrap" && runtime !== "gvisor") throw new TypeError(`isolation.runtime must be "bwrap" or "gvisor"`);
  const wasmPages = Math.min(65536, Math.ceil((config.memoryLimitBytes + WASM_MEMORY_HEADROOM_BYTES) / WASM_PAGE));
  const limits = checkLimits(options.limits, wasmPages, config.maxVms);
  const heapMb = options.heapMb ?? DEFAULT_HEAP_MB;
  if (!Number.isInteger(heapMb) || heapMb < 16) throw new RangeError("isolation.heapMb must be an integer >= 16");
  const nodePath = options.nodePath ?? process.execPath;
  if (!nodePath.startsWith("/")) throw new TypeError("isolation.nodePath must be absolute");
  const files = airlockFiles(nodePath);
  const childConfig: ChildConfig = { maxVms: config.maxVms, retireCpuMs: Math.floor(limits.cpuSeconds * 800) };
  let entry = files.child;
  if (config.entry !== undefined) {
    if (!config.entry.startsWith("/")) throw new TypeError("the child entry must be an absolute path");
    if (!existsSync(config.entry)) throw new Error(`the child entry ${config.entry} does not exist`);
    entry = realpathSync(config.entry);
    const dir = dirname(entry);
    if (!files.binds.some((b) => dir === b.dest || dir.startsWith(`${b.dest}/`))) {
      files.binds.push({ source: dir, dest: dir, own: true });
    }
  }
  const childArgs = [entry, ...(config.entryArgs ?? [JSON.stringify(childConfig)])];
  const isRoot = typeof process.getuid === "function" && process.getuid() === 0;
  const uid = isRoot ? (options.uid ?? NOBODY) : undefined;
  const gid = isRoot ? (options.gid ?? options.uid ?? NOBODY) : undefined;
  if (uid !== undefined && gid !== undefined && runtime === "bwrap") stageFor(files, uid, gid);
  const arch = currentSeccompArch();
  const missing: string[] = [];

  if (process.platform !== "linux") {
    missing.push(
      `namespaces, seccomp and rlimits are Linux-only (this is ${process.platform}); a plain child process with an empty environment and a heap cap is what remains`,
    );
  } else if (arch === undefined) {
    missing.push(
      `seccomp filters and the rlimit helper are defined for x86-64 and arm64 only (this is ${process.arch})`,
    );
  }

  if (process.platform === "linux" && runtime === "gvisor") {
    const runsc = findBinary("runsc", options.runscPath);
    if (!runsc) missing.push("gVisor's runsc is not installed: apt-get install runsc (Debian bookworm and later)");
    else if (!isRoot) missing.push("runsc needs the host to run as root to start sandboxes");
    if (missing.length === 0 && runsc && arch) {
      return gvisorIsolation({ runsc, files, childArgs, limits, heapMb, arch, wasmPages });
    }
  }
  if (process.platform === "linux" && runtime === "bwrap" && arch) {
    const bwrap = findBinary("bwrap", options.bwrapPath);
    if (!bwrap) {
      missing.push("bubblewrap is not installed: apt-get install bubblewrap (Debian/Ubuntu) or dnf install bubblewrap");
    } else {
      const failure = probeBwrap(bwrap, files.node, bindArgs(files), uid);
      if (failure) missing.push(failure);
      else return bwrapIsolation({ bwrap, files, childArgs, limits, heapMb, arch, wasmPages, uid, gid });
    }
  }
  if (!options.allowDegraded) throw new IsolationUnavailableError(missing);
  return plainIsolation({ files, childArgs, heapMb, missing });
}

interface Common {
  wasmPages: number;
  files: Files;
  childArgs: string[];
  limits: Required<ProcessLimits>;
  heapMb: number;
  arch: SeccompArch;
}

function deniedList(): string[] {
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

function bwrapIsolation(c: Common & { bwrap: string; uid: number | undefined; gid: number | undefined }) {
  const helperPath = "/.airlock-exec";
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
        helperPath,
        "--seccomp",
        "3",
        "--remount-ro",
        "/",
        "--chdir",
        "/",
        "--",
        helperPath,
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

function gvisorIsolation(c: Common & { runsc: string }): ResolvedIsolation {
  const helperPath = "/.airlock-exec";
  const plan = (): ChildPlan => {
    // gVisor takes no BPF program from outside: the helper loads the base rules together with the exec rules.
    const parts = helperParts(c.arch, c.limits, true);
    const dir = mkdtempSync(join(tmpdir(), "airlock-runsc-"));
    const rootfs = join(dir, "rootfs");
    mkdirSync(rootfs);
    writeFileSync(join(dir, "exec"), parts.elf, { mode: 0o555 });
    const id = `airlock-${randomUUID()}`;
    const spec = ociSpec(c, rootfs, join(dir, "exec"), helperPath);
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

function plainIsolation(c: { files: Files; childArgs: string[]; heapMb: number; missing: string[] }) {
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
