/**
 * The channel to a VM side of your own: a transport that `launch()` returns (a process, a container, a machine you
 * start), checked by the host peer like a worker or a child. The messages are those of engine/protocol.ts; PROTOCOL.md
 * next to this file says what they are and their rules.
 */
import type { HostCommand, RunRequest } from "../engine/protocol.ts";
import type { HostChannel } from "../host/channel.ts";

/** A run as the protocol carries it. */
export type QuickJsRunRequest = RunRequest;
/** Host -> VM side. */
export type QuickJsHostMessage = HostCommand;

/** The host's end of a connection that `launch()` returns. Messages are plain JSON-compatible objects. */
export interface QuickJsProtocolTransport {
  send(message: QuickJsHostMessage): void;
  onMessage(handler: (message: unknown) => void): void;
  /** Called when the other end went away (the process exited, the socket closed). */
  onClose?(handler: () => void): void;
  /** Ends the connection and whatever runs the VM side (kill the process or sandbox). */
  close(): void | Promise<void>;
}

/** A transport of the user's as a channel of the host peer; `launch()` may return it later, or fail. */
export function openTransportChannel(
  launch: () => QuickJsProtocolTransport | Promise<QuickJsProtocolTransport>,
): HostChannel {
  let transport: QuickJsProtocolTransport | undefined;
  let queued: HostCommand[] | undefined = [];
  let dead = false;
  const fail = (reason: string) => {
    if (dead) return;
    channel.onclose?.(reason);
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
            if (!dead) channel.onmessage?.(message);
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
  const channel: HostChannel = {
    send(commands) {
      if (dead) return;
      if (queued) queued.push(...commands);
      else for (const command of commands) send(command);
    },
    async kill() {
      dead = true;
      queued = undefined;
      closeTransport();
    },
  };
  return channel;
}
