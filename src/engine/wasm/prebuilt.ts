/**
 * QuickJS's module with its writes instrumented, made once by the build instead of at every process start: the
 * rewrite takes 50-100 ms in a fresh process (its code has not been optimised yet), which every CLI run and every
 * process-tier child would pay. The file is used only for the exact source bytes it was made from and the exact
 * rewriter that made it (both digests are kept beside it); anything else, or no file, is rewritten as before, with
 * the same result.
 */
import { createHash } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { catchableOutOfMemory } from "./catchable-oom.ts";
import { pollInterruptsOften } from "./interrupt-poll.ts";
import { tickLoops } from "./loop-ticks.ts";
import { instrumentWrites } from "./write-tracking.ts";

const MODULE_FILE = new URL("./quickjs-tracked.wasm", import.meta.url);
const DIGESTS_FILE = new URL("./quickjs-tracked.json", import.meta.url);
/** The rewriters' own files, as they are run (their digest tells a prebuilt module made by older rewriters). */
const EXTENSION = import.meta.url.endsWith(".ts") ? ".ts" : ".js";
const REWRITER_FILES = ["catchable-oom", "loop-ticks", "interrupt-poll", "write-tracking", "binary"].map(
  (name) => new URL(`./${name}${EXTENSION}`, import.meta.url),
);

interface Digests {
  source: string;
  rewriter: string;
  module: string;
}

const sha256 = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");
const rewriterDigest = () => sha256(Buffer.concat(REWRITER_FILES.map((file) => readFileSync(file))));

/** The prebuilt instrumented module for `source`, or undefined when there is none for exactly these bytes. */
export function prebuiltTrackedModule(source: Uint8Array): Uint8Array<ArrayBuffer> | undefined {
  let digests: Digests;
  let bytes: Buffer;
  try {
    digests = JSON.parse(readFileSync(DIGESTS_FILE, "utf8")) as Digests;
    if (digests.source !== sha256(source) || digests.rewriter !== rewriterDigest()) return undefined;
    bytes = readFileSync(MODULE_FILE);
  } catch {
    return undefined;
  }
  // A module file that does not match its digest (a torn copy) is not used.
  if (sha256(bytes) !== digests.module) return undefined;
  return new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength) as Uint8Array<ArrayBuffer>;
}

/** Writes the instrumented module of the installed quickjs-wasi beside this file (run by `npm run build`). */
export function writePrebuiltTrackedModule(): void {
  const source = readFileSync(createRequire(import.meta.url).resolve("quickjs-wasi/quickjs.wasm"));
  const module = instrumentWrites(pollInterruptsOften(tickLoops(catchableOutOfMemory(source))));
  writeFileSync(MODULE_FILE, module);
  const digests: Digests = {
    source: sha256(source),
    rewriter: rewriterDigest(),
    module: sha256(module),
  };
  writeFileSync(DIGESTS_FILE, `${JSON.stringify(digests, null, 2)}\n`);
}
