/**
 * The files a child sees and the binaries that start it: node, its shared libraries, Airlock's dist and the
 * quickjs-wasi package, bound read-only at their own paths (from a readable copy where the sandbox's user cannot read
 * them), and where bwrap, runsc and setpriv are.
 */
import { spawnSync } from "node:child_process";
import {
  accessSync,
  chmodSync,
  constants,
  cpSync,
  existsSync,
  lstatSync,
  mkdtempSync,
  readdirSync,
  realpathSync,
  rmSync,
  statSync,
} from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { delimiter, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

export interface ChildFiles {
  node: string;
  child: string;
  /** Directories and files bound read-only; `own` marks Airlock's files (as opposed to node and its libraries). */
  binds: { source: string; dest: string; own?: boolean }[];
}

/** Where Airlock's own files are: the package root (package.json, dist) and the quickjs-wasi package. */
export function airlockFiles(nodePath: string): ChildFiles {
  const child = fileURLToPath(new URL("../vm-side.js", import.meta.url));
  const distDir = dirname(dirname(child));
  const root = dirname(distDir);
  const wasm = createRequire(import.meta.url).resolve("quickjs-wasi/quickjs.wasm");
  const quickjs = dirname(wasm);
  const binds: ChildFiles["binds"] = [
    { source: distDir, dest: distDir, own: true },
    { source: join(root, "package.json"), dest: join(root, "package.json"), own: true },
    { source: realpathSync(quickjs), dest: quickjs, own: true },
  ];
  const node = realpathSync(nodePath);
  binds.push({ source: node, dest: node });
  for (const lib of sharedLibraries(node)) binds.push(lib);
  return { node, child, binds };
}

/** The real path of a node script run instead of Airlock's child entry, its directory bound read-only too. */
export function bindEntry(files: ChildFiles, entry: string): string {
  if (!entry.startsWith("/")) throw new TypeError("the child entry must be an absolute path");
  if (!existsSync(entry)) throw new Error(`the child entry ${entry} does not exist`);
  const real = realpathSync(entry);
  const dir = dirname(real);
  if (!files.binds.some((b) => dir === b.dest || dir.startsWith(`${b.dest}/`))) {
    files.binds.push({ source: dir, dest: dir, own: true });
  }
  return real;
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
/** A staging directory is named for the process that made it: `airlock-files-<pid>-<random>`. */
const STAGING_PREFIX = "airlock-files-";
const STAGING_NAME = new RegExp(`^${STAGING_PREFIX}(\\d+)-\\w+$`);

/**
 * Removes the staging directories of this user's processes that are gone: a process removes its own at exit, but one
 * that is killed (SIGKILL, a crash) cannot, and each copy is several megabytes.
 */
export function removeStaleStaging(dir = tmpdir()): string[] {
  const removed: string[] = [];
  const uid = process.getuid?.();
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return removed;
  }
  for (const name of names) {
    const pid = STAGING_NAME.exec(name)?.[1];
    if (pid === undefined || Number(pid) === process.pid || processAlive(Number(pid))) continue;
    const path = join(dir, name);
    try {
      const st = lstatSync(path);
      // Only real directories of this user: never a link, never another user's.
      if (!st.isDirectory() || st.uid !== uid) continue;
      rmSync(path, { recursive: true, force: true });
      removed.push(path);
    } catch {
      // Removed meanwhile by another process sweeping too.
    }
  }
  return removed;
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: it exists, as another user's.
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

/**
 * A host running as root starts the children as an unprivileged user, whose process limit the kernel enforces (it
 * does not for root, not even inside a user namespace). When that user cannot read Airlock's files where they are
 * (a checkout under a private directory), the host copies them once into a private-to-root but world-readable
 * directory, and the sandbox binds the copy at the original path.
 */
export function stageFor(files: ChildFiles, uid: number, gid: number): void {
  for (const bind of files.binds) {
    if (!bind.own || accessibleBy(bind.source, uid, gid)) continue;
    let copy = staged.get(bind.source);
    if (!copy) {
      if (!stagingRoot) {
        removeStaleStaging();
        stagingRoot = mkdtempSync(join(tmpdir(), `${STAGING_PREFIX}${process.pid}-`));
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

export function findBinary(name: string, explicit: string | undefined): string | undefined {
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
