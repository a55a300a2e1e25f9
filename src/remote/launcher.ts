/**
 * The remote launcher: a channel and a peer per execution, and no pool. `remote()` picks the object for each
 * execution; memory, placement and warm VMs are the object's business.
 */
import { sandboxFailure, UNSEEDED, type VmEvent } from "../engine/protocol.ts";
import type { LaunchedRun, Launcher, LaunchRequest } from "../host/launcher.ts";
import { HostPeer } from "../host/peer.ts";
import { REMOTE_STOP_GRACE_MS, tooLargeAnswer } from "../host/pool.ts";
import { type CodemodeRemote, openRemoteChannel, REMOTE_BOOT_TIMEOUT_MS } from "./channel.ts";
import type { CodemodeRemoteRequest } from "./vm-side.ts";

/** Runs every execution on the object `remote()` picks for it, in a session of its own. */
export class RemoteLauncher implements Launcher {
  private readonly peers = new Set<HostPeer>();
  private closed = false;

  constructor(private readonly remote: () => CodemodeRemote) {}

  launch(request: LaunchRequest, onEvent: (event: VmEvent) => void): LaunchedRun {
    const exec = 1;
    let done = false;
    const finish = (event: Extract<VmEvent, { type: "done" }>) => {
      if (done) return;
      done = true;
      onEvent(event);
    };
    const fail = (message: string) => queueMicrotask(() => finish(sandboxFailure(exec, message)));
    let stub: CodemodeRemote;
    try {
      if (this.closed) throw new Error("the sandbox is closed");
      stub = this.remote();
      if (stub === null || typeof stub !== "object" || typeof stub.execute !== "function") {
        throw new Error(
          "remote() must return the stub of a CodemodeSandboxDurableObject (or another object with execute(request, exchange))",
        );
      }
    } catch (error) {
      fail(`could not reach the remote sandbox: ${(error as Error).message ?? String(error)}`);
      return { settle: () => {}, stop: () => {}, capture: () => {} };
    }
    // The run's own budget goes with the run; the request carries it too, as pi-codemode's does, for the object to see.
    const session: CodemodeRemoteRequest =
      request.interruptBudget === null ? {} : { interruptBudget: request.interruptBudget };
    const peer = new HostPeer(openRemoteChannel(stub, session), {
      bootTimeoutMs: REMOTE_BOOT_TIMEOUT_MS,
      stopGraceMs: REMOTE_STOP_GRACE_MS,
      capacity: 1,
      what: "remote sandbox",
      onGone: (gone, reason) => {
        this.peers.delete(gone);
        finish(sandboxFailure(exec, reason));
      },
    });
    this.peers.add(peer);
    const sent = peer.launch(request, UNSEEDED, exec, (event) => {
      if (event.type !== "done") {
        onEvent(event);
        return;
      }
      finish(event);
      // The run is over: the session ends, and the object's VM goes back to its pool.
      peer.kill("the run ended", "closed");
    });
    if (sent !== true) {
      peer.kill(sent, "closed");
      fail(`the execution is too large to send to the remote sandbox: ${sent}`);
    }
    return {
      settle: (id, outcome, seq, now) => {
        const refused = peer.settle(exec, id, outcome, seq, now);
        if (refused === undefined) return;
        // The call fails in the script instead, as on the other launchers.
        peer.settle(exec, id, tooLargeAnswer("remote object", refused), seq, now);
      },
      stop: (reason) => peer.stop(exec, reason),
      capture: () => peer.capture(exec),
    };
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const peer of [...this.peers]) peer.kill("the sandbox is closed", "closed");
  }
}
