/**
 * The host's end of one VM side, whatever runs it: a worker thread, a child process, a remote object, a transport of
 * your own. The host peer (peer.ts) is the only user of a channel; each place a VM runs writes one.
 */
import type { HostCommand } from "../engine/protocol.ts";

/** Memory a VM side in the same process shares with the host. */
export interface SharedState {
  /** Stop flags by slot (see StopCode). */
  stopFlags: Int32Array;
  /** Commands handled by slot (see RunnerOptions.handled). */
  handled: Int32Array;
  /** Milliseconds computed by slot (see RunnerOptions.computed). */
  computed: Int32Array;
  /** The turn word (see RunnerOptions.turn). */
  turn: Int32Array;
  /** What the turn word's start times count from. */
  turnEpochMs: number;
  /**
   * The CPU time the VM side's thread has computed so far in ms, where the system tells (worker/thread-clock.ts): a turn's
   * length is then the time it computed, not the time it also waited for a core.
   */
  cpuMs?(): number | undefined;
}

/** The host's end of the channel to one VM side. */
export interface HostChannel {
  /** Sends commands, in order, as one batch. */
  send(commands: HostCommand[]): void;
  /**
   * Receives the VM side's messages, unchecked (the peer checks them). The handlers are assigned by the peer right
   * after the channel opens, as on the MCP SDK's `Transport`: a channel calls each that is set, and holds nothing back
   * for one that is not.
   */
  onmessage?: (message: unknown) => void;
  /** The VM side is gone by itself (exited, closed, failed): `reason` says how. */
  onclose?: (reason: string) => void;
  /** The channel found that the VM side broke the protocol (a frame that is not JSON, say): the peer kills it. */
  onerror?: (reason: string) => void;
  /** Ends the VM side for good (terminate the thread, kill the process, close the transport); resolves once gone. */
  kill(): Promise<void>;
  /** Whether the channel keeps the host process alive (it does while runs are open). */
  ref?(on: boolean): void;
  /** Set for a VM side in this process: the peer then stops runs and reads turns through shared memory. */
  shared?: SharedState;
  /**
   * A command built from one execution's input (its request, a call's answer) that the channel cannot carry (over
   * its frame limit) is that execution's fault: `send` throws a RangeError for it, and the peer fails that run alone.
   */
}
