/**
 * `airlock-codemode/adapter-code-quickjs`: code-mode adapters that run programs in QuickJS.
 *
 * - `createQuickJsSandboxAdapter()` runs them on a warm pool of worker threads of this process (qualified
 *   `production`), which grows up to `maxPoolSize` while programs compute: each program gets a fresh VM with a hard
 *   heap cap, a stack guard, a CPU limit that excludes time spent waiting on tools, and no globals beyond standard
 *   JavaScript and its `tools` argument. A worker that does not stop in time is terminated. It protects the host from the program's code; it does not protect against a flaw in
 *   QuickJS or V8 itself. For that, run the VM side in an outer sandbox of your own with the protocol adapter.
 * - `createQuickJsProtocolAdapter({ id, version, qualification, launch, maxPoolSize })` runs them on Airlock's VM side
 *   in processes or sandboxes you launch (up to `maxPoolSize` at once), over the message protocol of transport/PROTOCOL.md;
 *   `serveQuickJsProtocol` is that VM side.
 */
import { makeSandboxAdapter, type SandboxExecuteRequest } from "../code-mode/adapter.ts";
import { loadQuickJSWasm } from "../engine/wasm/load.ts";
import { hostMemoryBudget } from "../host/memory-budget.ts";
import { cores, countOption, maxPoolSizeOption } from "../host/pool-options.ts";
import { optionKeys, refuseUnknownOptions } from "../platform/options.ts";
import { CONFIG_OPTION_ERRORS, configError } from "../tools/errors.ts";
import { WorkerPool } from "../worker/launcher.ts";
import { executeOnLauncher, QUICKJS_LANGUAGES } from "./execute-on-launcher.ts";
import type { ClosableSandboxAdapter } from "./protocol-adapter.ts";

export {
  PROTOCOL_NAME as QUICKJS_PROTOCOL,
  PROTOCOL_VERSION as QUICKJS_PROTOCOL_VERSION,
} from "../engine/protocol.ts";
export type { QuickJsHostMessage, QuickJsProtocolTransport, QuickJsRunRequest } from "../transport/channel.ts";
export { PROTOCOL_MAX_CONNECTIONS } from "../transport/launcher.ts";
export {
  type QuickJsServerTransport,
  type QuickJsVmMessage,
  type ServeQuickJsProtocolOptions,
  serveQuickJsProtocol,
} from "../transport/vm-side.ts";
export {
  type ClosableSandboxAdapter,
  createQuickJsProtocolAdapter,
  type QuickJsProtocolAdapterOptions,
} from "./protocol-adapter.ts";

export const QUICKJS_ADAPTER_ID = "airlock.quickjs";
export const QUICKJS_ADAPTER_VERSION = "1";
/** Default VMs per worker: executions of one worker that can wait on tools at once. */
export const DEFAULT_QUICKJS_VMS_PER_WORKER = 8;

export interface QuickJsSandboxAdapterOptions {
  /** Worker threads kept; default the smallest of 2, the machine's available parallelism and `maxPoolSize`. */
  poolSize?: number;
  /**
   * Worker threads at most: the pool grows past `poolSize` when every worker computes (a program waits behind no
   * CPU-bound program) and shrinks back when idle. Default `MAX_POOL_SIZE_PER_CORE` per core, at least `poolSize`.
   */
  maxPoolSize?: number;
  /** Default `DEFAULT_QUICKJS_VMS_PER_WORKER`. */
  maxVmsPerWorker?: number;
  /** Path of QuickJS's wasm; default the file of the installed `quickjs-wasi`. */
  wasmPath?: string;
}

const SANDBOX_OPTION_KEYS = optionKeys<QuickJsSandboxAdapterOptions>({
  poolSize: true,
  maxPoolSize: true,
  maxVmsPerWorker: true,
  wasmPath: true,
});

/**
 * Runs programs on a worker pool of this process, created on first use and shared by every execution of this
 * adapter. Call `close()` when done; a closed adapter is unavailable, and programs never fall back to the host.
 */
export function createQuickJsSandboxAdapter(options: QuickJsSandboxAdapterOptions = {}): ClosableSandboxAdapter {
  if (typeof options !== "object" || options === null) throw configError("options must be an object");
  // A misspelt option (`poolsize`, `maxVms`) must not leave its default in place unnoticed.
  refuseUnknownOptions(options, "createQuickJsSandboxAdapter", SANDBOX_OPTION_KEYS, CONFIG_OPTION_ERRORS);
  const givenMax = countOption(options.maxPoolSize, "maxPoolSize", CONFIG_OPTION_ERRORS) ?? Number.POSITIVE_INFINITY;
  const size = countOption(options.poolSize, "poolSize", CONFIG_OPTION_ERRORS) ?? Math.min(2, cores(), givenMax);
  const maxSize = maxPoolSizeOption(options.maxPoolSize, size, CONFIG_OPTION_ERRORS);
  const maxVmsPerWorker =
    countOption(options.maxVmsPerWorker, "maxVmsPerWorker", CONFIG_OPTION_ERRORS) ?? DEFAULT_QUICKJS_VMS_PER_WORKER;
  const wasmPath = options.wasmPath;
  if (wasmPath !== undefined && typeof wasmPath !== "string") throw configError("wasmPath must be a string");
  let pool: WorkerPool | undefined;
  let closed = false;
  const getPool = (): WorkerPool => {
    pool ??= new WorkerPool({
      module: loadQuickJSWasm(wasmPath),
      size,
      maxSize,
      maxVmsPerWorker,
      budget: hostMemoryBudget(),
    });
    return pool;
  };
  return makeSandboxAdapter(
    {
      id: QUICKJS_ADAPTER_ID,
      version: QUICKJS_ADAPTER_VERSION,
      qualification: "production",
      languages: QUICKJS_LANGUAGES,
      deterministic: true,
      snapshots: true,
      isAvailable: () => {
        if (closed) return false;
        try {
          loadQuickJSWasm(wasmPath);
          return true;
        } catch {
          return false;
        }
      },
      execute: (request: SandboxExecuteRequest) =>
        closed ? Promise.resolve({ status: "failed", reason: "sandbox_error" }) : executeOnLauncher(getPool(), request),
    },
    {
      close: async () => {
        closed = true;
        const open = pool;
        pool = undefined;
        await open?.close();
      },
    },
  );
}
