/**
 * A VM side written by the test, for the QuickJS protocol adapter: it speaks the handshake and answers the host's
 * messages as the test says, so that a test can send what Airlock's own VM side never would.
 */
import {
  QUICKJS_PROTOCOL,
  QUICKJS_PROTOCOL_VERSION,
  type QuickJsHostMessage,
  type QuickJsProtocolTransport,
} from "airlock-codemode/adapter-code-quickjs";

/** A VM side written by the test: `answer` sees every host message and may reply. */
export function fakeLaunch(
  answer: (message: QuickJsHostMessage, reply: (message: unknown) => void) => void,
  hello?: unknown,
  helloDelayMs = 1,
) {
  const state = { launches: 0, closes: 0, runsSent: 0, sent: [] as QuickJsHostMessage[] };
  const launch = (): QuickJsProtocolTransport => {
    state.launches++;
    let deliver: (message: unknown) => void = () => {};
    const reply = (message: unknown) => setTimeout(() => deliver(message), 1);
    const ready = { type: "ready", protocol: QUICKJS_PROTOCOL, version: QUICKJS_PROTOCOL_VERSION, versions: {} };
    setTimeout(() => deliver(hello ?? ready), helloDelayMs);
    return {
      send: (message) => {
        state.sent.push(message);
        if (message.type === "run") state.runsSent++;
        answer(message, reply);
      },
      onMessage: (handler) => {
        deliver = handler;
      },
      close: () => {
        state.closes++;
      },
    };
  };
  return { state, launch };
}

/** A `done` message of a run that returned `value` (the program wrapper's `{ j }` envelope). */
export const doneMessage = (exec: number, value: unknown) => ({
  type: "done",
  exec,
  result: {
    ok: true,
    reason: "returned",
    value: JSON.stringify({ j: JSON.stringify(value) }),
    writes: undefined,
    cpuMs: 0,
    during: null,
  },
});

/** A `done` message of a run the VM side stopped. */
export const stoppedMessage = (exec: number, reason: "aborted" | "timeout") => ({
  type: "done",
  exec,
  result: {
    ok: false,
    reason: reason === "aborted" ? "stopped" : "deadline",
    error: { kind: reason, message: "stopped" },
    cpuMs: 0,
    during: null,
  },
});
