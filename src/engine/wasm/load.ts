import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { refuseUnknownOptions } from "../../platform/options.ts";
import { WasmRewriteError } from "./binary.ts";
import { catchableOutOfMemory } from "./catchable-oom.ts";
import { pollInterruptsOften } from "./interrupt-poll.ts";
import { tickLoops } from "./loop-ticks.ts";
import { withModuleDigest } from "./module-digest.ts";
import { prebuiltTrackedModule } from "./prebuilt.ts";
import { instrumentWrites } from "./write-tracking.ts";

export interface LoadQuickJSWasmOptions {
  /**
   * Instrument the module's memory writes so that a reset restores only what an execution wrote (see
   * write-tracking.ts); default true. False loads the module as it is: resets then restore its whole image.
   */
  trackWrites?: boolean;
}

const modules = new Map<string, WebAssembly.Module>();
/**
 * The installed package's wasm file, resolved once: adapters ask for the module on every execution (their
 * availability check), and a package resolution reads the file system (about 0.1-0.2 ms each time).
 */
let installedPath: string | undefined;
const installedWasmPath = (): string => {
  installedPath ??= createRequire(import.meta.url).resolve("quickjs-wasi/quickjs.wasm");
  return installedPath;
};

/**
 * Reads QuickJS's wasm, makes its out-of-memory errors catchable (see catchable-oom.ts), makes its built-ins
 * pre-emptible (loop-ticks.ts) and its interrupt polls more frequent (interrupt-poll.ts), instruments its memory
 * writes, adds the digest of the result (module-digest.ts) and compiles it, once per path; every VM of the process
 * instantiates the same compiled module. `path` defaults to the file in the installed `quickjs-wasi` package. A
 * module whose writes cannot all be tracked is refused with the reason, unless `trackWrites` is false.
 */
export function loadQuickJSWasm(path?: string, options: LoadQuickJSWasmOptions = {}): WebAssembly.Module {
  if (path !== undefined && typeof path !== "string") throw new TypeError("loadQuickJSWasm: path must be a string");
  if (options === null || typeof options !== "object")
    throw new TypeError("loadQuickJSWasm: options must be an object");
  refuseUnknownOptions(options, "loadQuickJSWasm", ["trackWrites"]);
  const trackWrites = options.trackWrites ?? true;
  if (typeof trackWrites !== "boolean") throw new TypeError("loadQuickJSWasm: trackWrites must be a boolean");
  const resolved = path ?? installedWasmPath();
  const key = `${trackWrites ? "tracked" : "plain"}:${resolved}`;
  let module = modules.get(key);
  if (!module) {
    const bytes = readFileSync(resolved);
    // The digest of the bytes that run goes with them: a VM's snapshot is bound to it (module-digest.ts).
    module = new WebAssembly.Module(
      withModuleDigest(trackWrites ? instrument(bytes, resolved) : patch(bytes, resolved)),
    );
    modules.set(key, module);
  }
  return module;
}

function instrument(bytes: Uint8Array, path: string): Uint8Array<ArrayBuffer> {
  const prebuilt = prebuiltTrackedModule(bytes);
  if (prebuilt) return prebuilt;
  const patched = patch(bytes, path);
  try {
    return instrumentWrites(patched);
  } catch (error) {
    if (!(error instanceof WasmRewriteError)) throw error;
    throw new WasmRewriteError(
      `cannot track the writes of ${path}: ${error.message}; load it with { trackWrites: false } to reset by whole image`,
    );
  }
}

/** The rewrites every module gets, tracked or not (prebuilt.ts makes the same). */
function patch(bytes: Uint8Array, path: string): Uint8Array<ArrayBuffer> {
  try {
    return pollInterruptsOften(tickLoops(catchableOutOfMemory(bytes)));
  } catch (error) {
    if (!(error instanceof WasmRewriteError)) throw error;
    throw new WasmRewriteError(`cannot prepare the engine ${path}: ${error.message}`);
  }
}
