import { readFileSync } from "node:fs";
import { createRequire } from "node:module";

const modules = new Map<string, WebAssembly.Module>();

/**
 * Reads and compiles QuickJS's wasm once per path; every VM of the process instantiates the same compiled module.
 * `path` defaults to the file in the installed `quickjs-wasi` package.
 */
export function loadQuickJSWasm(path?: string): WebAssembly.Module {
  const resolved = path ?? createRequire(import.meta.url).resolve("quickjs-wasi/quickjs.wasm");
  let module = modules.get(resolved);
  if (!module) {
    module = new WebAssembly.Module(readFileSync(resolved));
    modules.set(resolved, module);
  }
  return module;
}
