/**
 * The launcher of VM sides of your own: the scheduler (host/pool.ts) over the transports that `launch()` returns. Each
 * is one VM side; more are launched when every one computes, and one that breaks the protocol, closes, or does not
 * stop a run in time is closed, its other runs rebuilt on another.
 */
import type { VmEvent } from "../engine/protocol.ts";
import type { LaunchedRun, Launcher, LaunchRequest } from "../host/launcher.ts";
import type { GuestMemoryBudget } from "../host/memory-budget.ts";
import { PeerPool, REMOTE_STOP_GRACE_MS } from "../host/pool.ts";
import { openTransportChannel, type QuickJsProtocolTransport } from "./channel.ts";

/** Time a launched VM side has to announce itself. */
export const PROTOCOL_BOOT_TIMEOUT_MS = 15_000;
/** Default `maxPoolSize` of the protocol adapter: VM sides it launches at most at once, when every one computes. */
export const PROTOCOL_MAX_CONNECTIONS = 4;
/** Runs one VM side takes at once. */
const RUNS_PER_CONNECTION = 64;

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
