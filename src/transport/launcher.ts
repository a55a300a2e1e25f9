/**
 * The QuickJS protocol: Airlock's VM side running in a process or sandbox of your own, reached over a duplex channel
 * of JSON messages. It is the one protocol every VM side of Airlock speaks (engine/protocol.ts); see PROTOCOL.md next
 * to this file for the messages and their rules.
 *
 * Host side: `ProtocolLauncher` is the scheduler (host/pool.ts) over transports that `launch()` returns: each is one
 * VM side, checked by the host peer like a worker or a child; more are launched when every one computes, and one that
 * breaks the protocol, closes, or does not stop a run in time is closed, its other runs rebuilt on another. VM side:
 * `serveQuickJsProtocol(transport)` runs the one serve loop behind any transport.
 */
import { INLINE_MAX_STACK_SIZE } from "../engine/limits.ts";
import type { HostCommand, RunRequest, VmEvent, VmMessage } from "../engine/protocol.ts";
import { serveVm } from "../engine/serve.ts";
import { loadQuickJSWasm } from "../engine/wasm/load.ts";
import type { LaunchedRun, Launcher, LaunchRequest } from "../host/launcher.ts";
import type { GuestMemoryBudget } from "../host/memory-budget.ts";
import type { HostChannel } from "../host/peer.ts";
import { PeerPool, REMOTE_STOP_GRACE_MS } from "../host/pool.ts";

export { PROTOCOL_NAME as QUICKJS_PROTOCOL, PROTOCOL_VERSION as QUICKJS_PROTOCOL_VERSION } from "../engine/protocol.ts";

/** Time a launched VM side has to announce itself. */
export const PROTOCOL_BOOT_TIMEOUT_MS = 15_000;
/** Default `maxPoolSize` of the protocol adapter: VM sides it launches at most at once, when every one computes. */
export const PROTOCOL_MAX_CONNECTIONS = 4;
/** Runs one VM side takes at once. */
const RUNS_PER_CONNECTION = 64;

/** A run as the protocol carries it. */
export type QuickJsRunRequest = RunRequest;
/** Host -> VM side. */
export type QuickJsHostMessage = HostCommand;
/** VM side -> host. */
export type QuickJsVmMessage = VmMessage;

/** The host's end of a connection that `launch()` returns. Messages are plain JSON-compatible objects. */
export interface QuickJsProtocolTransport {
  send(message: QuickJsHostMessage): void;
  onMessage(handler: (message: unknown) => void): void;
  /** Called when the other end went away (the process exited, the socket closed). */
  onClose?(handler: () => void): void;
  /** Ends the connection and whatever runs the VM side (kill the process or sandbox). */
  close(): void | Promise<void>;
}

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

/** A transport of the user's as a channel of the host peer; `launch()` may return it later, or fail. */
function openTransportChannel(launch: () => QuickJsProtocolTransport | Promise<QuickJsProtocolTransport>): HostChannel {
  let transport: QuickJsProtocolTransport | undefined;
  let queued: HostCommand[] | undefined = [];
  let deliver: (message: unknown) => void = () => {};
  let closeHandler: (reason: string) => void = () => {};
  let dead = false;
  const fail = (reason: string) => {
    if (dead) return;
    closeHandler(reason);
  };
  const closeTransport = () => {
    try {
      Promise.resolve(transport?.close()).catch(() => {});
    } catch {
      // A transport that cannot close is dropped.
    }
  };
  const send = (command: HostCommand) => {
    try {
      transport?.send(command);
    } catch {
      fail("the connection to the VM side failed");
    }
  };
  Promise.resolve()
    .then(launch)
    .then(
      (launched) => {
        if (typeof launched !== "object" || launched === null) {
          fail("launch() did not return { send, onMessage, onClose?, close }");
          return;
        }
        // Whatever was launched is ended when the connection is killed, also when the rest of it is unusable.
        if (typeof launched.close === "function") transport = launched;
        if (dead) {
          closeTransport();
          return;
        }
        const wrong = ["send", "onMessage", "onClose", "close"].find((key) => {
          const value = (launched as unknown as Record<string, unknown>)[key];
          return typeof value !== "function" && (key !== "onClose" || value !== undefined);
        });
        if (wrong !== undefined) {
          fail(`launch() returned a transport whose ${wrong} is not a function`);
          return;
        }
        // A handler that cannot be registered leaves the connection deaf or blind: it fails like a failed launch().
        let registering = "onMessage";
        try {
          launched.onMessage((message) => {
            if (!dead) deliver(message);
          });
          registering = "onClose";
          launched.onClose?.(() => fail("the VM side closed the connection"));
        } catch {
          fail(`launch() returned a transport whose ${registering}() threw`);
          return;
        }
        for (const command of queued ?? []) send(command);
        queued = undefined;
      },
      () => fail("launch() failed"),
    )
    // A transport whose getters throw: never an unhandled rejection that takes the host down.
    .catch(() => fail("launch() returned a transport that could not be used"));
  return {
    send(commands) {
      if (dead) return;
      if (queued) queued.push(...commands);
      else for (const command of commands) send(command);
    },
    onMessage(handler) {
      deliver = handler;
    },
    onClose(handler) {
      closeHandler = handler;
    },
    async kill() {
      dead = true;
      queued = undefined;
      closeTransport();
    },
  };
}

/** A launcher of the sandbox core whose VM sides are reached through `launch()`, launched on first use. */
export class ProtocolLauncher implements Launcher {
  private readonly pool: PeerPool;

  constructor(
    launchTransport: () => QuickJsProtocolTransport | Promise<QuickJsProtocolTransport>,
    budget: GuestMemoryBudget,
    maxConnections = PROTOCOL_MAX_CONNECTIONS,
  ) {
    this.pool = new PeerPool({
      open: () => openTransportChannel(launchTransport),
      size: 1,
      lazy: true,
      maxSize: maxConnections,
      capacity: RUNS_PER_CONNECTION,
      what: "VM side",
      budget,
      bootTimeoutMs: PROTOCOL_BOOT_TIMEOUT_MS,
      stopGraceMs: REMOTE_STOP_GRACE_MS,
      closedMessage: "the adapter is closed",
      // A VM side of the user's may be anything, and far away: no warm-up runs of Airlock's own on it.
      warmRuns: 0,
    });
  }

  launch(request: LaunchRequest, onEvent: (event: VmEvent) => void): LaunchedRun {
    return this.pool.launch(request, onEvent);
  }

  close(): Promise<void> {
    return this.pool.close();
  }
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
