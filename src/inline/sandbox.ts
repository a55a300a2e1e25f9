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
import { countOption, DEFAULT_VMS_PER_THREAD } from "../host/pool-options.ts";
import { budgetOption, CodemodeSandboxBase, checkOptions } from "../sandbox/base.ts";
import { prebuiltImageFor, withModule } from "../sandbox/module.ts";
import type { CodemodeSandboxBaseOptions } from "../types.ts";
import { InlineLauncher } from "./launcher.ts";

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

/**
 * Runs executions on the calling thread. A script that computes blocks the caller until it awaits a tool or its
 * deadline (or interrupt budget) interrupts it, inside a long built-in too (loop-ticks.ts); only a single bulk copy or
 * fill of the memory (a few milliseconds) runs to its end.
 */
export class InlineCodemodeSandbox extends CodemodeSandboxBase {
  private readonly inline: InlineLauncher | DeferredLauncher<InlineLauncher>;

  constructor(options: InlineCodemodeSandboxOptions = {}) {
    checkOptions(options, "InlineCodemodeSandbox", ["wasm", "maxVms"]);
    const maxVms = countOption(options.maxVms, "maxVms") ?? DEFAULT_VMS_PER_THREAD;
    const budget = budgetOption(options);
    const make = (module: WebAssembly.Module) =>
      new InlineLauncher({
        module,
        maxStackSize: INLINE_MAX_STACK_SIZE,
        maxVms,
        budget,
        image: prebuiltImageFor(module),
      });
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
