/**
 * Decides how the children of a ProcessCodemodeSandbox are isolated, checks that it is available, and builds the
 * command that starts each child:
 *
 * - `bwrap` (Linux, the default; bwrap.ts): bubblewrap's namespaces, a minimal read-only root, the base seccomp
 *   filter, then the launch helper's rlimits and exec filter.
 * - `gvisor` (gvisor.ts): the same child under runsc, gVisor's user-space kernel.
 * - plain (only with `allowDegraded`; plain.ts): a child process with an empty environment and a V8 heap cap, and
 *   nothing else. This is the macOS fallback, and what a Linux host without bwrap gets.
 *
 * Nothing is downgraded silently: when a protection asked for is unavailable, construction throws an error naming
 * what is missing and how to install it, unless `allowDegraded` is set; `protections` reports what is active.
 */
import { integerOption, refuseUnknownOptions } from "../../platform/options.ts";
import type { ChildConfig } from "../vm-side.ts";
import { bwrapIsolation, probeBwrap } from "./bwrap.ts";
import { airlockFiles, bindEntry, findBinary, stageFor } from "./child-files.ts";
import { checkLimits, DEFAULT_HEAP_MB, type ProcessLimits, wasmPagesFor } from "./child-limits.ts";
import { gvisorIsolation } from "./gvisor.ts";
import { NOBODY, type ResolvedIsolation } from "./launch.ts";
import { plainIsolation } from "./plain.ts";
import { currentSeccompArch } from "./seccomp.ts";

export {
  DEFAULT_LIMITS,
  NODE_ADDRESS_SPACE_BYTES,
  type ProcessLimits,
  WASM_MEMORY_HEADROOM_BYTES,
} from "./child-limits.ts";
export type { ProcessProtections, ProcessRuntime, ResolvedIsolation } from "./launch.ts";

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
  const wasmPages = wasmPagesFor(config.memoryLimitBytes);
  const limits = checkLimits(options.limits, wasmPages, config.maxVms);
  const heapMb = integerOption(options.heapMb, "isolation.heapMb", 16, Infinity) ?? DEFAULT_HEAP_MB;
  const nodePath = options.nodePath ?? process.execPath;
  if (!nodePath.startsWith("/")) throw new TypeError("isolation.nodePath must be absolute");
  const files = airlockFiles(nodePath);
  const childConfig: ChildConfig = { maxVms: config.maxVms, retireCpuMs: Math.floor(limits.cpuSeconds * 800) };
  const entry = config.entry !== undefined ? bindEntry(files, config.entry) : files.child;
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
      const failure = probeBwrap(bwrap, files, uid);
      if (failure) missing.push(failure);
      else return bwrapIsolation({ bwrap, files, childArgs, limits, heapMb, arch, wasmPages, uid, gid });
    }
  }
  if (!options.allowDegraded) throw new IsolationUnavailableError(missing);
  return plainIsolation({ files, childArgs, heapMb, missing });
}
