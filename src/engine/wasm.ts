import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { instrumentWrites } from "./write-tracking.ts";

const modules = new Map<string, WebAssembly.Module>();

/**
 * Reads QuickJS's wasm, instruments its memory writes (see write-tracking.ts: resets then restore only the pages an
 * execution wrote) and compiles it, once per path; every VM of the process instantiates the same compiled module.
 * `path` defaults to the file in the installed `quickjs-wasi` package.
 */
export function loadQuickJSWasm(path?: string): WebAssembly.Module {
  const resolved = path ?? createRequire(import.meta.url).resolve("quickjs-wasi/quickjs.wasm");
  let module = modules.get(resolved);
  if (!module) {
    module = new WebAssembly.Module(instrumentWrites(readFileSync(resolved)));
    modules.set(resolved, module);
  }
  return module;
}
