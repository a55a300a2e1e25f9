/**
 * The QuickJS module a sandbox runs: the `wasm` option (a compiled module, or a promise of one), or the installed
 * binary where the platform can read it from disk (the Node entry registers that default, worker/sandbox.ts).
 */
import type { VmImage } from "../engine/vm.ts";
import { DeferredLauncher } from "../host/deferred.ts";
import type { Launcher } from "../host/launcher.ts";

/** The default module where the platform can read it from disk (set by the Node entry, worker/sandbox.ts). */
let defaultModule: (() => WebAssembly.Module) | undefined;
/** The post-prelude image the build made for a module, where the platform can read it (engine/prebuilt-image.ts). */
let defaultImage: ((module: WebAssembly.Module) => VmImage | undefined) | undefined;

export function useDefaultQuickJSWasm(
  load: () => WebAssembly.Module,
  image?: (module: WebAssembly.Module) => VmImage | undefined,
): void {
  defaultModule = load;
  defaultImage = image;
}

/** The build's post-prelude image for `module` (the installed one, however it was loaded), or undefined. */
export function prebuiltImageFor(module: WebAssembly.Module): VmImage | undefined {
  return defaultImage?.(module);
}

/** The launcher at once for a module (or the default one), or once a promised module has compiled. */
export function withModule<L extends Launcher>(
  wasm: WebAssembly.Module | Promise<WebAssembly.Module> | undefined,
  make: (module: WebAssembly.Module) => L,
  sandbox: string,
): L | DeferredLauncher<L> {
  if (wasm === undefined) {
    if (!defaultModule) {
      throw new TypeError(
        `${sandbox} needs the wasm option here (a compiled QuickJS module): this platform cannot read the installed one from disk`,
      );
    }
    return make(defaultModule());
  }
  checkWasm(wasm);
  if (wasm instanceof WebAssembly.Module) return make(wasm);
  return new DeferredLauncher(Promise.resolve(wasm).then(make));
}

/** Throws unless `wasm` is a compiled module or a promise (of one, checked where it is awaited). */
export function checkWasm(wasm: unknown): asserts wasm is WebAssembly.Module | Promise<WebAssembly.Module> {
  if (wasm instanceof WebAssembly.Module) return;
  if (typeof (wasm as Promise<unknown>)?.then !== "function") {
    throw new TypeError("wasm must be a WebAssembly.Module or a promise of one, for example loadQuickJSWasm()");
  }
}
