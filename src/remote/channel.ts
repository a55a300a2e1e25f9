/**
 * The channel to a VM side in another isolate reached by RPC (a Cloudflare Durable Object). The host makes one RPC to
 * the object (`execute(request, exchange)`, as pi-codemode names it), and hands it an `exchange` function that the
 * object calls back with its messages and that answers with the host's commands. Tools, call records and the deadline
 * stay here; only the VM is remote. A deadline or an abort ends the execution here at once (host/execution.ts), and
 * the remote VM stops at its next exchange. An answer carries at most MAX_EXCHANGE_BYTES of
 * commands, the rest going with the next; a command that alone would not fit is refused (`send` throws a RangeError).
 */
import { MAX_EXCHANGE_BYTES, rpcBytes } from "../engine/rpc-bytes.ts";
import type { HostChannel } from "../host/channel.ts";
import { type CodemodeRemoteExchange, type CodemodeRemoteRequest, takeExchange } from "./vm-side.ts";

/** What the remote object offers: its RPC method (the Durable Object's `execute`; pi-codemode's `CodemodeRemote`). */
export interface CodemodeRemote {
  execute(request: CodemodeRemoteRequest, exchange: CodemodeRemoteExchange): PromiseLike<unknown>;
}

/** Longest an exchange waits for the host's next commands before it answers with none (the object then asks again). */
export const REMOTE_POLL_MS = 1_000;
/** Time the remote object has to announce itself (a cold object boots its VMs first). */
export const REMOTE_BOOT_TIMEOUT_MS = 30_000;
/** Messages one exchange may carry. */
const MAX_MESSAGES_PER_EXCHANGE = 1_000_000;
/** Characters of a remote failure's message that reach the result. */
const MAX_FAILURE_CHARS = 300;

/** Opens a session with one remote object: the RPC starts at once, and ends when the channel is killed. */
export function openRemoteChannel(stub: CodemodeRemote, request: CodemodeRemoteRequest): HostChannel {
  let closed = false;
  const outbox: unknown[] = [];
  let waiter: (() => void) | undefined;
  const wake = () => {
    const resolve = waiter;
    waiter = undefined;
    resolve?.();
  };
  const end = (how: "closed" | "broken", reason: string) => {
    if (closed) return;
    closed = true;
    wake();
    if (how === "broken") channel.onerror?.(reason);
    else channel.onclose?.(reason);
  };
  const exchange: CodemodeRemoteExchange = async (messages) => {
    if (closed) return null;
    // A new exchange while one waits: the VM side has news. The waiting one answers now (with what there is), and
    // this one waits in its place, so that one exchange at most waits at a time.
    wake();
    if (!Array.isArray(messages) || messages.length > MAX_MESSAGES_PER_EXCHANGE) {
      end("broken", "the remote sandbox broke the protocol: an exchange did not carry a list of messages");
      return null;
    }
    for (const message of messages) {
      if (closed) return null;
      channel.onmessage?.(message);
    }
    if (!closed && outbox.length === 0) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(wake, REMOTE_POLL_MS);
        waiter = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
    if (closed) return null;
    // What is left goes with the next exchange, which the VM side makes at once.
    return takeExchange(outbox);
  };
  // The peer sets its handlers right after opening; the RPC starts once they are there.
  queueMicrotask(() => {
    if (closed) return;
    let served: PromiseLike<unknown>;
    try {
      served = stub.execute(request, exchange);
    } catch (error) {
      end("closed", failure(error));
      return;
    }
    Promise.resolve(served).then(
      () => end("closed", "the remote sandbox ended the session"),
      (error: unknown) => end("closed", failure(error)),
    );
  });
  const channel: HostChannel = {
    send(commands) {
      if (closed) return;
      for (const command of commands) {
        const bytes = rpcBytes(command);
        if (bytes > MAX_EXCHANGE_BYTES) {
          throw new RangeError(
            `a command of ${bytes} bytes is over the limit of ${MAX_EXCHANGE_BYTES} bytes of one exchange (MAX_EXCHANGE_BYTES)`,
          );
        }
      }
      for (const command of commands) outbox.push(command);
      wake();
    },
    async kill() {
      closed = true;
      wake();
    },
  };
  return channel;
}

function failure(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error);
  return `the remote sandbox failed: ${message.slice(0, MAX_FAILURE_CHARS)}`;
}
