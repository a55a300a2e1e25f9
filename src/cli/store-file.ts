/** The `--store` file: a JSON object the script reads with `load()`, written back after a successful run. */
import { randomBytes } from "node:crypto";
import { chmod, lstat, readFile, readlink, realpath, rename, rm, stat, writeFile } from "node:fs/promises";
import { basename, dirname, join, resolve } from "node:path";
import type { CodemodeStoreWrites } from "../index.ts";
import { UsageError } from "./args.ts";

export type StoreObject = Record<string, unknown>;

/** Symlinks followed before giving up, as the kernel does (ELOOP). */
const MAX_LINKS = 40;

/**
 * The file the store lives in: `path` with its symlinks followed, also when the last one points at a file that does
 * not exist yet (the store then creates that file, not a plain file in the link's place).
 */
export async function storeFile(path: string, shown: string): Promise<string> {
  let current = path;
  for (let links = 0; links <= MAX_LINKS; links++) {
    try {
      return await realpath(current);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
    }
    const entry = await lstat(current).catch(() => undefined);
    if (!entry?.isSymbolicLink()) return current;
    current = resolve(dirname(current), await readlink(current));
  }
  throw new UsageError(`--store ${shown}: too many levels of symbolic links`);
}

/** Reads the store file; a missing file is an empty store, anything but a JSON object is a usage error. */
export async function readStore(path: string, shown: string): Promise<StoreObject> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") {
      // A missing file starts empty, but its directory must exist: the write comes only after the script ran.
      const file = await storeFile(path, shown);
      const dir = await stat(dirname(file)).catch(() => undefined);
      if (!dir?.isDirectory()) {
        const named = file === path ? dirname(shown) : `${dirname(file)} (where the link points)`;
        throw new UsageError(`--store ${shown}: directory ${named} does not exist`);
      }
      return {};
    }
    throw new UsageError(`--store ${shown}: cannot read the file: ${(error as Error).message}`);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (error) {
    throw new UsageError(`--store ${shown} is not valid JSON: ${(error as Error).message}`);
  }
  if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) {
    const found = parsed === null ? "null" : Array.isArray(parsed) ? "an array" : `a ${typeof parsed}`;
    throw new UsageError(`--store ${shown} must hold a JSON object, found ${found}`);
  }
  return parsed as StoreObject;
}

/** The store after a run's writes: keys set, then keys deleted. Keys such as `__proto__` stay plain data. */
export function applyStoreWrites(store: StoreObject, writes: CodemodeStoreWrites): StoreObject {
  const next: StoreObject = {};
  const put = (key: string, value: unknown) =>
    Object.defineProperty(next, key, { value, enumerable: true, writable: true, configurable: true });
  for (const key of Object.keys(store)) put(key, store[key]);
  for (const key of Object.keys(writes.set)) put(key, writes.set[key]);
  for (const key of writes.delete) delete next[key];
  return next;
}

/**
 * Writes the store atomically: a temporary file next to it, then a rename over it. A symlink is written through to
 * its target (created if it does not exist), and an existing file keeps its mode (the rename would otherwise leave
 * the temporary file's).
 */
export async function writeStore(path: string, store: StoreObject): Promise<void> {
  const target = await storeFile(path, path);
  const existing = await stat(target).catch(() => undefined);
  const mode = existing === undefined ? undefined : existing.mode & 0o7777;
  const temp = join(dirname(target), `.${basename(target)}.${process.pid}.${randomBytes(4).toString("hex")}.tmp`);
  try {
    // Created with the file's mode (never wider, whatever the umask), then set to it exactly.
    await writeFile(temp, `${JSON.stringify(store, null, 2)}\n`, { flag: "wx", mode });
    if (mode !== undefined) await chmod(temp, mode);
    await rename(temp, target);
  } catch (error) {
    await rm(temp, { force: true });
    // Node's message ends with the syscall and the temporary file's name, which means nothing to the user.
    throw new Error((error as Error).message.replace(/, \w+ '.*$/s, ""));
  }
}
