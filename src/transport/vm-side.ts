/**
 * Airlock's VM side behind a transport of your own: the one serve loop (engine/serve.ts) over any duplex channel of
 * JSON messages (PROTOCOL.md next to this file).
 */
import { INLINE_MAX_STACK_SIZE } from "../engine/limits.ts";
import type { VmMessage } from "../engine/protocol.ts";
import { serveVm } from "../engine/serve.ts";
import { loadQuickJSWasm } from "../engine/wasm/load.ts";

/** VM side -> host. */
export type QuickJsVmMessage = VmMessage;

/** The VM side's end of a connection. */
export interface QuickJsServerTransport {
  send(message: QuickJsVmMessage): void;
  onMessage(handler: (message: unknown) => void): void;
  /**
   * For a transport that reads several messages at once (a pipe's chunk): hands them over together, and a run stopped
   * among them is stopped before anything else of it is handled. Otherwise a run the host moved away while it waited
   * would first start, or take a call's answer, and compute a whole turn.
   */
  onMessages?(handler: (messages: unknown[]) => void): void;
}

export interface ServeQuickJsProtocolOptions {
  /** Path of QuickJS's wasm; default the file of the installed `quickjs-wasi`. */
  wasmPath?: string;
  /** VMs kept for runs that wait on tools at once; default 8. */
  maxVms?: number;
  /** QuickJS's stack guard; default the main-thread-safe `INLINE_MAX_STACK_SIZE`. */
  maxStackSize?: number;
}

/**
 * Runs Airlock's VM side behind a transport: announces itself with a `ready` message, then runs the programs the
 * host sends (only programs: a script run fails). Returns a handle whose `close()` releases the VMs.
 */
export function serveQuickJsProtocol(
  transport: QuickJsServerTransport,
  options: ServeQuickJsProtocolOptions = {},
): { readonly ready: Promise<void>; close(): void } {
  const server = serveVm(
    {
      send: (messages) => {
        for (const message of messages) transport.send(message);
      },
      // From inside the turn: a transport that writes synchronously (stdout to a pipe) delivers it while the turn
      // computes, so the host gives a stop queued behind it more time and moves the other runs away.
      sendNow: (message) => transport.send(message),
    },
    {
      module: loadQuickJSWasm(options.wasmPath),
      maxStackSize: options.maxStackSize ?? INLINE_MAX_STACK_SIZE,
      maxVms: options.maxVms ?? 8,
      programsOnly: true,
    },
  );
  transport.onMessage((message) => server.receive(message));
  transport.onMessages?.((messages) => server.receiveBatch(messages));
  return Object.freeze({ ready: server.ready, close: () => server.close() });
}
