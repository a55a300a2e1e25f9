/**
 * `airlock-codemode/cloudflare`: everything of `airlock-codemode/portable`, and for the sandbox Worker the Durable
 * Object that runs the VMs of `RemoteCodemodeSandbox` and the sandbox on the calling thread, with QuickJS compiled by
 * Wrangler. The agent's Worker imports `airlock-codemode/portable`, which bundles no QuickJS.
 */
import { DurableObject } from "cloudflare:workers";
import {
  DEFAULT_INTERRUPT_BUDGET,
  DEFAULT_REMOTE_MEMORY_LIMIT_BYTES,
  INLINE_MAX_STACK_SIZE,
} from "../engine/limits.ts";
// QuickJS as the build rewrote it (catchable out-of-memory errors, tracked writes): a compiled module on Workers,
// which refuse to compile wasm at run time.
import quickjs from "../engine/wasm/quickjs-tracked.wasm";
import { InlineCodemodeSandbox, type InlineCodemodeSandboxOptions } from "../inline/sandbox.ts";
import { type CodemodeRemoteExchange, type CodemodeRemoteRequest, RemoteVmSide } from "../remote/vm-side.ts";

export * from "../portable.ts";

/** VMs an object keeps for executions at once (more wait for one): three of the default limit fit in 128 MB. */
export const DEFAULT_REMOTE_VMS = 3;

/** The QuickJS module the bundler compiled (pi-codemode's name), for `serveCodemodeRemote` or `InlineCodemodeSandbox`. */
export const cloudflareQuickJSWasm: WebAssembly.Module = quickjs;

/**
 * The sandbox Worker's Durable Object: stateless (it never touches its storage), it runs each execution a
 * `RemoteCodemodeSandbox` sends it on a warm VM reset to its post-prelude image. It caps every request at its own
 * limits, whatever the client asks for; a subclass changes them, or overrides `execute` and calls
 * `super.execute(request, exchange)`, as with pi-codemode's object.
 */
export class CodemodeSandboxDurableObject<Env = unknown> extends DurableObject<Env> {
  /** The most memory one execution's VM may use. */
  protected maxMemoryLimitBytes = DEFAULT_REMOTE_MEMORY_LIMIT_BYTES;
  /** The most interrupt polls one execution may compute through (keep it below the Worker's `cpu_ms`). */
  protected maxInterruptBudget = DEFAULT_INTERRUPT_BUDGET;
  /**
   * This object's VMs, booted on its first request and kept warm (see remote/vm-side.ts). Not shared with the other
   * objects of the isolate: Workers refuse I/O on behalf of another object, and a VM freed by one object's run would
   * start another's queued run in the wrong object's context.
   */
  private vmSide: RemoteVmSide | undefined;

  /**
   * The RPC a `RemoteCodemodeSandbox` makes once per execution (see remote/channel.ts); it resolves when the client ends
   * the session, and rejects a request that is not `RemoteCodemodeSandbox`'s (pi-codemode's client's among them).
   */
  execute(request: CodemodeRemoteRequest, exchange: CodemodeRemoteExchange): Promise<void> {
    this.vmSide ??= new RemoteVmSide({
      module: quickjs,
      maxStackSize: INLINE_MAX_STACK_SIZE,
      maxVms: DEFAULT_REMOTE_VMS,
    });
    return this.vmSide.serve(request, exchange, {
      maxMemoryLimitBytes: this.maxMemoryLimitBytes,
      maxInterruptBudget: this.maxInterruptBudget,
    });
  }
}

export type CreateInlineCodemodeSandboxOptions = Omit<InlineCodemodeSandboxOptions, "wasm">;

/**
 * The sandbox on the calling thread with the QuickJS module the bundler compiled: for a stateless Worker that serves
 * one request, where blocking it is acceptable. Its interrupt budget defaults to `DEFAULT_INTERRUPT_BUDGET` and its
 * memory limit to 32 MiB, as in the Durable Object.
 */
export function createInlineCodemodeSandbox(options: CreateInlineCodemodeSandboxOptions = {}): InlineCodemodeSandbox {
  if (options === null || typeof options !== "object") throw new TypeError("options must be an object");
  if ("wasm" in options)
    throw new TypeError("createInlineCodemodeSandbox passes its own wasm: use InlineCodemodeSandbox");
  return new InlineCodemodeSandbox({
    interruptBudget: DEFAULT_INTERRUPT_BUDGET,
    memoryLimitBytes: DEFAULT_REMOTE_MEMORY_LIMIT_BYTES,
    ...options,
    wasm: quickjs,
  });
}
