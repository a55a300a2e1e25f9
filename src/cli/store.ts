/** The `--store` file: a JSON object the script reads with `load()`, written back after a successful run. */
import { randomBytes } from "node:crypto";
import { readFile, rename, rm, writeFile } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import type { CodemodeStoreWrites } from "../index.ts";
import { UsageError } from "./args.ts";

export type StoreObject = Record<string, unknown>;

/** Reads the store file; a missing file is an empty store, anything but a JSON object is a usage error. */
export async function readStore(path: string, shown: string): Promise<StoreObject> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return {};
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

/** Writes the store atomically: a temporary file next to it, then a rename over it. */
export async function writeStore(path: string, store: StoreObject): Promise<void> {
  const temp = join(dirname(path), `.${basename(path)}.${process.pid}.${randomBytes(4).toString("hex")}.tmp`);
  try {
    await writeFile(temp, `${JSON.stringify(store, null, 2)}\n`, { flag: "wx" });
    await rename(temp, path);
  } catch (error) {
    await rm(temp, { force: true });
    throw error;
  }
}
