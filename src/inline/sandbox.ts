/**
 * The sandbox on the calling thread, for any runtime with WebAssembly (the portable entry): it needs no worker, no
 * file and no `node:` module, only a compiled QuickJS module.
 */
import {
  DEFAULT_INTERRUPT_BUDGET,
  DEFAULT_REMOTE_MEMORY_LIMIT_BYTES,
  INLINE_MAX_STACK_SIZE,
} from "../engine/limits.ts";
import { DeferredLauncher } from "../host/deferred.ts";
import type { Launcher } from "../host/launcher.ts";
import { budgetOption, CodemodeSandboxBase, checkCount, checkOptions } from "../sandbox/base.ts";
import type { CodemodeSandboxBaseOptions } from "../types.ts";
import { InlineLauncher } from "./launcher.ts";

/** VMs one thread keeps for executions that wait on tools at the same time. */
export const DEFAULT_VMS_PER_THREAD = 64;

export interface InlineCodemodeSandboxOptions extends CodemodeSandboxBaseOptions {
  /**
   * Compiled QuickJS module (or a promise of it). On Node and Bun the default is the installed binary, from
   * `loadQuickJSWasm()`; elsewhere (Workers) it is required: `createInlineCodemodeSandbox` passes the one Wrangler
   * compiled.
   */
  wasm?: WebAssembly.Module | Promise<WebAssembly.Module>;
  /** VMs kept on this thread for concurrent executions; default `DEFAULT_VMS_PER_THREAD`. */
  maxVms?: number;
}

/** The default module where the platform can read it from disk (set by the Node entry, worker/sandbox.ts). */
let defaultModule: (() => WebAssembly.Module) | undefined;

export function useDefaultQuickJSWasm(load: () => WebAssembly.Module): void {
  defaultModule = load;
}

/**
 * Runs executions on the calling thread. A script that computes blocks the caller until it awaits a tool or its
 * deadline (or interrupt budget) interrupts it, inside a long built-in too (loop-ticks.ts); only a single bulk copy or
 * fill of the memory (a few milliseconds) runs to its end.
 */
export class InlineCodemodeSandbox extends CodemodeSandboxBase {
  private readonly inline: InlineLauncher | DeferredLauncher<InlineLauncher>;

  constructor(options: InlineCodemodeSandboxOptions = {}) {
    checkOptions(options, "InlineCodemodeSandbox", ["wasm", "maxVms"]);
    const maxVms = checkCount(options.maxVms, "maxVms") ?? DEFAULT_VMS_PER_THREAD;
    const budget = budgetOption(options);
    const make = (module: WebAssembly.Module) =>
      new InlineLauncher({ module, maxStackSize: INLINE_MAX_STACK_SIZE, maxVms, budget });
    const inline = withModule(options.wasm, make, "InlineCodemodeSandbox");
    super(onWorkers() ? { ...WORKERS_DEFAULTS, ...options } : options, inline);
    this.inline = inline;
  }

  async warm(): Promise<void> {
    await this.inline.warm();
    if (this.inline instanceof DeferredLauncher) await this.inline.inner?.warm();
    await this.warmHost();
  }
}

/** Cloudflare Workers (they say so in `navigator.userAgent`). */
function onWorkers(): boolean {
  return (globalThis as { navigator?: { userAgent?: unknown } }).navigator?.userAgent === "Cloudflare-Workers";
}

/**
 * The defaults on Workers, as in the Durable Object: clocks stand still while a script computes, so no deadline stops
 * it and an interrupt budget must (pi-codemode's default); an isolate has 128 MB in all.
 */
const WORKERS_DEFAULTS = {
  interruptBudget: DEFAULT_INTERRUPT_BUDGET,
  memoryLimitBytes: DEFAULT_REMOTE_MEMORY_LIMIT_BYTES,
};

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
