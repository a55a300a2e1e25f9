/**
 * The post-prelude image of the installed module, made once by the build instead of in every process: booting a VM
 * (the prelude) takes 300-650 ms in a fresh process on a loaded machine, most of it V8 compiling QuickJS's hot
 * functions while they run for the first time, where a VM made from the image takes 3-6 ms. The image is used only
 * for the module, prelude, engine files and quickjs-wasi it was made with (its key) and only when its bytes are the
 * ones written (its digest); anything else, or no file, boots as before. Node only (it reads files): the portable
 * entry never imports it.
 *
 * Every VM of a process is made from one image already; with this one, the VMs of every process of one build are.
 * The only value the boot draws at random is a 4-byte word `_initialize` stores beside `errno`, which nothing in the
 * module reads; Math.random is reseeded per execution (random.ts).
 */
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { sha256Hex } from "../platform/platform.ts";
import { imageOfPages, type MemoryPages } from "./image.ts";
import { PRELUDE_SOURCE } from "./prelude.ts";
import { type EntryName, GuestVm, type VmImage } from "./vm.ts";
import { loadQuickJSWasm } from "./wasm/load.ts";
import { moduleDigestOf } from "./wasm/module-digest.ts";

const DATA_FILE = new URL("./quickjs-image.bin", import.meta.url);
const HEADER_FILE = new URL("./quickjs-image.json", import.meta.url);
const EXTENSION = import.meta.url.endsWith(".ts") ? ".ts" : ".js";
/** The files whose code makes the image (the boot, the capture, the limits it reads): a change to one is a new key. */
const BOOT_FILES = ["vm", "image", "limits", "prelude"].map(
  (name) => new URL(`./${name}${EXTENSION}`, import.meta.url),
);
/** The stack guard the image is made with; a VM made from it gets its own (the reset applies it). */
const BUILD_STACK_SIZE = 256 * 1024;
const ENTRY_NAMES: readonly EntryName[] = ["configure", "prepare", "start", "settle"];

/** The image as the build writes it: its header (JSON) and its pages' bytes. */
export interface PrebuiltImage {
  header: PrebuiltImageHeader;
  /** In a SharedArrayBuffer, so that every worker of the process reads the one copy. */
  data: Uint8Array;
}

export interface PrebuiltImageHeader extends Omit<MemoryPages, "data"> {
  /** See imageKey. */
  key: string;
  /** SHA-256 of the data and of this header without `digest`. */
  digest: string;
  entries: Record<EntryName, number>;
  versions: Record<string, string>;
}

/** What the image is valid for: the module's digest, the prelude, the engine files that boot it, quickjs-wasi's version. */
function imageKey(moduleDigest: string): string {
  const require = createRequire(import.meta.url);
  const { version } = require("quickjs-wasi/package.json") as { version: string };
  return sha256Hex(
    JSON.stringify({
      module: moduleDigest,
      prelude: sha256Hex(PRELUDE_SOURCE),
      engine: sha256Hex(Buffer.concat(BOOT_FILES.map((file) => readFileSync(file)))),
      "quickjs-wasi": version,
    }),
  );
}

function digestOf(header: Omit<PrebuiltImageHeader, "digest">, data: Uint8Array): string {
  const { key, byteLength, stackPointer, runtimePtr, contextPtr, ranges, entries, versions } = header;
  const fields = JSON.stringify({ key, byteLength, stackPointer, runtimePtr, contextPtr, ranges, entries, versions });
  return sha256Hex(Buffer.concat([Buffer.from(fields), data]));
}

/** Read once per process: null when there is none, or none that checks out. */
let cached: { key: string; image: PrebuiltImage | null } | undefined;

/**
 * The build's image for `module`, or undefined when the module is another (a digest that differs, none) or the
 * files are missing, stale (another key) or altered (another digest). `dir` is for tests.
 */
export function prebuiltImage(module: WebAssembly.Module, dir?: URL): PrebuiltImage | undefined {
  const moduleDigest = moduleDigestOf(module);
  if (moduleDigest === undefined) return undefined;
  if (dir === undefined && cached?.key === moduleDigest) return cached.image ?? undefined;
  const image = readImage(moduleDigest, dir);
  if (dir === undefined) cached = { key: moduleDigest, image: image ?? null };
  return image;
}

function readImage(moduleDigest: string, dir: URL | undefined): PrebuiltImage | undefined {
  let header: PrebuiltImageHeader;
  let bytes: Buffer;
  try {
    header = JSON.parse(readFileSync(dir ? new URL("quickjs-image.json", dir) : HEADER_FILE, "utf8"));
    if (header === null || typeof header !== "object" || header.key !== imageKey(moduleDigest)) return undefined;
    bytes = readFileSync(dir ? new URL("quickjs-image.bin", dir) : DATA_FILE);
  } catch {
    return undefined;
  }
  if (typeof header.digest !== "string" || digestOf(header, bytes) !== header.digest) return undefined;
  const data = new Uint8Array(new SharedArrayBuffer(bytes.byteLength));
  data.set(bytes);
  const prebuilt = { header, data };
  return vmImageOf(prebuilt) ? prebuilt : undefined;
}

/** The image a VM is made from, or undefined when the header does not describe one. */
export function vmImageOf(prebuilt: PrebuiltImage): VmImage | undefined {
  const { header, data } = prebuilt;
  const { entries, versions } = header;
  if (entries === null || typeof entries !== "object" || versions === null || typeof versions !== "object") {
    return undefined;
  }
  if (!ENTRY_NAMES.every((name) => Number.isInteger(entries[name]))) return undefined;
  if (!Object.values(versions).every((v) => typeof v === "string")) return undefined;
  for (const field of ["byteLength", "stackPointer", "runtimePtr", "contextPtr"] as const) {
    if (!Number.isInteger(header[field]) || header[field] < 0) return undefined;
  }
  if (!Array.isArray(header.ranges) || !header.ranges.every(Number.isInteger)) return undefined;
  const image = imageOfPages({ ...header, data });
  if (image === undefined) return undefined;
  return {
    ...image,
    entries: { ...entries },
    preludeHash: sha256Hex(PRELUDE_SOURCE),
    versions: { ...versions },
  };
}

/** Boots a VM of the installed module and writes its image beside this file (run by `npm run build`). */
export async function writePrebuiltImage(): Promise<void> {
  const module = loadQuickJSWasm();
  const moduleDigest = moduleDigestOf(module);
  if (moduleDigest === undefined) throw new Error("the installed module carries no digest");
  const { vm, image } = await GuestVm.boot({ module, maxStackSize: BUILD_STACK_SIZE });
  const pages = vm.pages(image.byteLength);
  vm.dispose();
  if (pages === undefined) throw new Error("the image's pages could not be read");
  const { data, ...layout } = pages;
  const unsigned = { key: imageKey(moduleDigest), ...layout, entries: image.entries, versions: image.versions };
  const header: PrebuiltImageHeader = { ...unsigned, digest: digestOf(unsigned, data) };
  writeFileSync(DATA_FILE, data);
  writeFileSync(HEADER_FILE, `${JSON.stringify(header)}\n`);
}
