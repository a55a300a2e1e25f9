/**
 * The sandbox whose VMs run in another isolate, usually a Durable Object of a separately deployed Worker
 * (cloudflare/): tools, call records and the deadline stay with the caller, and each tool call travels back to it.
 * `serveCodemodeRemote` is the other end, for a remote of your own.
 */
import {
  DEFAULT_INTERRUPT_BUDGET,
  DEFAULT_REMOTE_MEMORY_LIMIT_BYTES,
  INLINE_MAX_STACK_SIZE,
  MAX_INTERRUPT_BUDGET,
} from "../engine/limits.ts";
import { integerOption, refuseUnknownOptions } from "../platform/options.ts";
import { CodemodeSandboxBase, checkOptions, memoryOption } from "../sandbox/base.ts";
import { checkWasm } from "../sandbox/module.ts";
import type { CodemodeSandboxBaseOptions } from "../types.ts";
import type { CodemodeRemote } from "./channel.ts";
import { RemoteLauncher } from "./launcher.ts";
import {
  type CodemodeRemoteExchange,
  type CodemodeRemoteRequest,
  checkRemoteRequest,
  RemoteVmSide,
} from "./vm-side.ts";

/** Time `warm()` gives a cold object to boot and run its first script. */
export const REMOTE_WARM_TIMEOUT_MS = 30_000;

export interface RemoteCodemodeSandboxOptions extends CodemodeSandboxBaseOptions {
  /**
   * Picks the object that runs an execution; called once per execution. One object per session
   * (`env.CODEMODE_SANDBOX.getByName(sessionId)`) keeps a session's scripts together, one per execution
   * (`getByName(crypto.randomUUID())`) runs each on its own.
   */
  remote: () => CodemodeRemote;
}

/**
 * Runs each execution on the remote object `remote()` picks, in one RPC. Its memory limit and interrupt budget are
 * capped by the object's own (`maxMemoryLimitBytes`, `maxInterruptBudget`); the interrupt budget defaults to
 * `DEFAULT_INTERRUPT_BUDGET`, since a remote VM that computes reads a clock that stands still.
 */
export class RemoteCodemodeSandbox extends CodemodeSandboxBase {
  constructor(options: RemoteCodemodeSandboxOptions) {
    if (options === null || typeof options !== "object") {
      throw new TypeError("RemoteCodemodeSandbox options must be an object with remote: () => stub");
    }
    checkOptions(options, "RemoteCodemodeSandbox", ["remote"]);
    const { remote, ...rest } = options;
    // The VMs' memory is the object's (capped by its maxMemoryLimitBytes), not this host's: taking the option would
    // promise a bound it does not keep.
    if (rest.maxTotalMemoryBytes !== undefined) {
      throw new TypeError(
        "maxTotalMemoryBytes does not apply to RemoteCodemodeSandbox: its VMs run in the remote object, whose maxMemoryLimitBytes caps each",
      );
    }
    if (typeof remote !== "function") {
      throw new TypeError(
        "remote must be a function that returns the Durable Object to run an execution on, for example () => env.CODEMODE_SANDBOX.getByName(sessionId)",
      );
    }
    super({ interruptBudget: DEFAULT_INTERRUPT_BUDGET, ...rest }, new RemoteLauncher(remote));
  }

  /**
   * Runs one trivial execution on the object `remote()` picks, so that it has booted its VMs before the first real
   * one (the object keeps them warm itself from then on); rejects when it cannot.
   */
  async warm(): Promise<void> {
    const result = await this.execute("return 1", { timeoutMs: REMOTE_WARM_TIMEOUT_MS });
    if (!result.ok) throw new Error(`warm(): the remote sandbox did not run a trivial script: ${result.error.message}`);
  }
}

export interface CodemodeServeOptions {
  /** Compiled QuickJS module, or a promise of one: `cloudflareQuickJSWasm` on Workers, `loadQuickJSWasm()` on Node. */
  wasm: WebAssembly.Module | Promise<WebAssembly.Module>;
  /** The most interrupt polls one run may compute through, and the budget of one that asks for none. Default: `DEFAULT_INTERRUPT_BUDGET`. */
  maxInterruptBudget?: number;
  /** The most memory one run's VM may use. Default: `DEFAULT_REMOTE_MEMORY_LIMIT_BYTES`. */
  maxMemoryLimitBytes?: number;
}

const SERVE_OPTION_KEYS = ["wasm", "maxInterruptBudget", "maxMemoryLimitBytes"];

/**
 * The remote end of `RemoteCodemodeSandbox` for a remote of your own: serves one `execute(request, exchange)` RPC on
 * a VM booted for it and released when the host ends the session (`CodemodeSandboxDurableObject` keeps its VMs warm
 * instead). Resolves then; rejects on bad options, a request that is not `RemoteCodemodeSandbox`'s, or a host that
 * breaks the protocol.
 */
export async function serveCodemodeRemote(
  request: CodemodeRemoteRequest,
  exchange: CodemodeRemoteExchange,
  options: CodemodeServeOptions,
): Promise<void> {
  if (options === null || typeof options !== "object") {
    throw new TypeError("serveCodemodeRemote options must be an object with wasm, a compiled QuickJS module");
  }
  refuseUnknownOptions(options, "serveCodemodeRemote", SERVE_OPTION_KEYS);
  const maxInterruptBudget =
    integerOption(options.maxInterruptBudget, "maxInterruptBudget", 1, MAX_INTERRUPT_BUDGET) ??
    DEFAULT_INTERRUPT_BUDGET;
  const maxMemoryLimitBytes =
    memoryOption(options.maxMemoryLimitBytes, "maxMemoryLimitBytes") ?? DEFAULT_REMOTE_MEMORY_LIMIT_BYTES;
  checkWasm(options.wasm);
  // Before a VM boots for it.
  checkRemoteRequest(request);
  const module = await options.wasm;
  if (!(module instanceof WebAssembly.Module)) {
    throw new TypeError("serveCodemodeRemote: wasm did not resolve to a WebAssembly.Module");
  }
  const side = new RemoteVmSide({ module, maxStackSize: INLINE_MAX_STACK_SIZE, maxVms: 1 });
  try {
    await side.serve(request, exchange, { maxInterruptBudget, maxMemoryLimitBytes });
  } finally {
    side.close();
  }
}
