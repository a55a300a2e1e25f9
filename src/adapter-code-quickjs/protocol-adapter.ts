/**
 * The protocol adapter: programs run on Airlock's VM side inside a process, container or remote sandbox the host
 * launches, over the versioned message protocol of transport/PROTOCOL.md. Airlock's own container adapter is made here too,
 * with a check that says why its container cannot run programs.
 */

import {
  type AvailabilityCheck,
  makeSandboxAdapter,
  type SandboxAdapter,
  type SandboxExecuteRequest,
  type SandboxQualification,
} from "../code-mode/adapter.ts";
import { hostMemoryBudget } from "../host/memory-budget.ts";
import { countOption } from "../host/pool-options.ts";
import { optionKeys, refuseUnknownOptions } from "../platform/options.ts";
import { CONFIG_OPTION_ERRORS, configError } from "../tools/errors.ts";
import type { QuickJsProtocolTransport } from "../transport/channel.ts";
import { PROTOCOL_MAX_CONNECTIONS, ProtocolLauncher } from "../transport/launcher.ts";
import { executeOnLauncher, QUICKJS_LANGUAGES } from "./execute-on-launcher.ts";

/** An adapter that owns threads or connections: `close()` releases them (pending executions fail). */
export type ClosableSandboxAdapter = SandboxAdapter & { close(): Promise<void> };

export interface QuickJsProtocolAdapterOptions {
  id: string;
  version: string;
  /** Default `test`: declare `production` only for an outer sandbox whose guarantees you documented and tested. */
  qualification?: SandboxQualification;
  /**
   * Starts the VM side (a process, container or remote sandbox running `serveQuickJsProtocol`) and returns the
   * host's end of its message channel. Called on first use and again after a connection was closed or broke the
   * protocol.
   */
  launch(): QuickJsProtocolTransport | Promise<QuickJsProtocolTransport>;
  /**
   * VM sides (connections) at most: one is launched on first use, and another each time work arrives while every one
   * computes (a program waits behind no CPU-bound program), up to this; extra ones are closed again once idle.
   * Default `PROTOCOL_MAX_CONNECTIONS`.
   */
  maxPoolSize?: number;
  /** Default: always available. */
  isAvailable?(): boolean | Promise<boolean>;
}

const PROTOCOL_OPTION_KEYS = optionKeys<QuickJsProtocolAdapterOptions>({
  id: true,
  version: true,
  qualification: true,
  launch: true,
  maxPoolSize: true,
  isAvailable: true,
});

/** Runs programs on Airlock's VM side inside a sandbox of your own, over the versioned protocol of transport/PROTOCOL.md. */
export function createQuickJsProtocolAdapter(options: QuickJsProtocolAdapterOptions): ClosableSandboxAdapter {
  if (typeof options !== "object" || options === null) {
    throw configError("createQuickJsProtocolAdapter needs { id, version, launch }");
  }
  refuseUnknownOptions(options, "createQuickJsProtocolAdapter", PROTOCOL_OPTION_KEYS, CONFIG_OPTION_ERRORS);
  const { isAvailable } = options;
  if (isAvailable !== undefined && typeof isAvailable !== "function")
    throw configError("isAvailable must be a function");
  return makeProtocolAdapter(options, isAvailable === undefined ? () => true : () => isAvailable.call(options));
}

/**
 * A protocol adapter whose availability is `isAvailable`, or, for Airlock's own adapters, `check`, which says why
 * not in Airlock's words. A closed adapter is unavailable.
 */
export function makeProtocolAdapter(
  options: Omit<QuickJsProtocolAdapterOptions, "isAvailable">,
  isAvailable: () => boolean | Promise<boolean>,
  check?: AvailabilityCheck,
): ClosableSandboxAdapter {
  const { launch } = options;
  if (typeof launch !== "function") throw configError("launch must be a function");
  const maxPoolSize = countOption(options.maxPoolSize, "maxPoolSize", CONFIG_OPTION_ERRORS) ?? PROTOCOL_MAX_CONNECTIONS;
  let closed = false;
  const launcher = new ProtocolLauncher(() => launch.call(options), hostMemoryBudget(), maxPoolSize);
  const closedCheck: AvailabilityCheck | undefined =
    check === undefined ? undefined : async () => (closed ? "the adapter was closed" : check());
  return makeSandboxAdapter(
    {
      id: options.id,
      version: options.version,
      qualification: options.qualification ?? "test",
      languages: QUICKJS_LANGUAGES,
      deterministic: true,
      snapshots: true,
      isAvailable: () => (closed ? false : isAvailable()),
      execute: (request: SandboxExecuteRequest) => executeOnLauncher(launcher, request),
    },
    {
      close: async () => {
        closed = true;
        await launcher.close();
      },
    },
    closedCheck,
  );
}
