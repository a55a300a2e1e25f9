/**
 * The VM side of remote sandboxes (a Durable Object, or any isolate reached by RPC): the one serve loop (serve.ts),
 * kept warm across requests, with each request a session of its own. A session is one host peer's channel: the host
 * makes one RPC per execution, `execute(request, exchange)` (pi-codemode's name and arguments), whose `exchange`
 * function the session calls with the messages it has for that host and which answers with the host's next commands
 * (it waits for some, or a while); the request carries what pi's does besides the script: the interrupt budget.
 * Stops and answers so reach a computing VM at its next exchange; a VM that never yields is ended by its interrupt
 * budget.
 *
 * Every run's limits are capped by the VM side's own (its memory limit and interrupt budget), whatever the host asks
 * for. Sessions are strangers: each sees its own run ids, and nothing of one reaches another.
 *
 * An exchange carries at most MAX_EXCHANGE_BYTES of messages (an RPC carries at most 32 MiB): more go in the next
 * exchanges, in order, and a call that alone would not fit is refused in the script (see rpc-bytes.ts).
 */
import { MAX_INTERRUPT_BUDGET } from "../engine/limits.ts";
import {
  type HostCommand,
  PROTOCOL_NAME,
  PROTOCOL_VERSION,
  ProtocolError,
  parseHostCommand,
  type VmMessage,
} from "../engine/protocol.ts";
import { MAX_EXCHANGE_BYTES, rpcBytes } from "../engine/rpc-bytes.ts";
import { serveVm, type VmServer } from "../engine/serve.ts";

/**
 * The host's side of a session: takes the session's messages (in order) and resolves to its next commands, or to
 * null when the host has closed the session. Over Workers RPC it is a function of the caller's, called back.
 */
export type CodemodeRemoteExchange = (messages: CodemodeRemoteMessage[]) => Promise<CodemodeRemoteReply>;

/** pi-codemode's names for the exchange and what crosses it (the messages are Airlock's protocol, protocol.ts). */
export type CodemodeRemoteMessage = VmMessage;
export type CodemodeRemoteReply = unknown[] | null;

/**
 * The first argument of the RPC: what the session asks for before its first run. The script and the rest of the run's
 * options travel in the exchange (the run command), which pi-codemode's request carries as `data`.
 */
export interface CodemodeRemoteRequest {
  /** Interrupt budget the host asks for (pi-codemode's unit, see BUDGET_SHARES); the VM side may only lower it. */
  interruptBudget?: number;
}

/** Commands one exchange may answer with; more is a broken host. */
export const MAX_COMMANDS_PER_EXCHANGE = 100_000;

export interface RemoteLimits {
  /** The most memory one run's VM may use. */
  maxMemoryLimitBytes: number;
  /** The most interrupt polls one run may compute through; also the budget of a run that asks for none. */
  maxInterruptBudget: number;
}

export interface RemoteVmSideOptions {
  module: WebAssembly.Module;
  maxStackSize: number;
  /** VMs kept for runs at once (runs beyond wait for one). */
  maxVms: number;
}

interface Session {
  /** Messages for the host not sent yet. */
  outbox: VmMessage[];
  /** Sends what the outbox holds soon (unset once the session ended). */
  flush: (() => void) | undefined;
  /** The host's run ids by the VM side's, and back. */
  toHost: Map<number, number>;
  toLocal: Map<number, number>;
}

export class RemoteVmSide {
  private readonly server: VmServer;
  /** What the serve loop announced (`ready` or `failed`), replayed to every session as its handshake. */
  private announcement: VmMessage | undefined;
  private readonly announced: Promise<void>;
  /** Sessions by the VM side's run ids. */
  private readonly byLocal = new Map<number, Session>();
  private lastLocal = 0;

  constructor(options: RemoteVmSideOptions) {
    let markAnnounced!: () => void;
    this.announced = new Promise((resolve) => {
      markAnnounced = resolve;
    });
    this.server = serveVm(
      {
        send: (messages) => {
          for (const message of messages) this.route(message, markAnnounced);
        },
      },
      {
        module: options.module,
        maxStackSize: options.maxStackSize,
        maxVms: options.maxVms,
        maxMessageBytes: MAX_EXCHANGE_BYTES,
      },
    );
  }

  private route(message: VmMessage, markAnnounced: () => void): void {
    if (message.type === "ready" || message.type === "failed") {
      this.announcement = message;
      markAnnounced();
      return;
    }
    if (!("exec" in message) || message.exec === null) return;
    const session = this.byLocal.get(message.exec);
    if (!session) return;
    const hostExec = session.toHost.get(message.exec) as number;
    if (message.type === "done") {
      this.byLocal.delete(message.exec);
      session.toHost.delete(message.exec);
      session.toLocal.delete(hostExec);
    }
    session.outbox.push({ ...message, exec: hostExec });
    session.flush?.();
  }

  /**
   * Serves one host until it closes the session; the runs it leaves open are stopped. One exchange always waits at
   * the host for its commands; messages that come meanwhile (a run that waited for a VM starts) go in another, and
   * the host then answers the waiting one at once. A request that is not a `CodemodeRemoteRequest` is refused (the
   * promise rejects) before anything is sent.
   */
  async serve(request: unknown, exchange: CodemodeRemoteExchange, limits: RemoteLimits): Promise<void> {
    const asked = checkRemoteRequest(request);
    if (typeof exchange !== "function") throw new TypeError("exchange must be a function");
    const capped: RemoteLimits =
      asked === undefined ? limits : { ...limits, maxInterruptBudget: Math.min(asked, limits.maxInterruptBudget) };
    await this.announced;
    const announcement = this.announcement as VmMessage;
    if (announcement.type !== "ready") {
      await exchange([announcement]);
      return;
    }
    const session: Session = { outbox: [], flush: undefined, toHost: new Map(), toLocal: new Map() };
    try {
      await new Promise<void>((resolve, reject) => {
        let inflight = 0;
        let ended = false;
        let scheduled = false;
        const end = (error?: unknown) => {
          if (ended) return;
          ended = true;
          session.flush = undefined;
          if (error === undefined) resolve();
          else reject(error);
        };
        const send = (messages: VmMessage[]) => {
          inflight++;
          exchange(messages).then((commands) => {
            inflight--;
            if (ended) return;
            if (commands === null) {
              end();
              return;
            }
            try {
              if (!Array.isArray(commands) || commands.length > MAX_COMMANDS_PER_EXCHANGE) {
                throw new ProtocolError("the host answered an exchange with something other than a list of commands");
              }
              for (const raw of commands) this.receive(session, parseHostCommand(raw), capped);
            } catch (error) {
              end(error);
              return;
            }
            flush();
          }, end);
        };
        // What a batch of commands' turns produced is queued within this task: one exchange carries it, or several
        // back to back when it is more than one may carry (each wakes the one before it at the host).
        const flush = () => {
          if (ended || scheduled) return;
          scheduled = true;
          queueMicrotask(() => {
            scheduled = false;
            if (ended) return;
            if (session.outbox.length === 0) {
              if (inflight === 0) send([]);
              return;
            }
            while (session.outbox.length > 0) send(takeExchange(session.outbox));
          });
        };
        session.flush = flush;
        send([{ type: "ready", protocol: PROTOCOL_NAME, version: PROTOCOL_VERSION, versions: announcement.versions }]);
      });
    } finally {
      for (const [local] of session.toHost) {
        this.byLocal.delete(local);
        this.server.receive({ type: "stop", exec: local, reason: "aborted" });
      }
    }
  }

  private receive(session: Session, command: HostCommand, limits: RemoteLimits): void {
    if (command.type === "run") {
      const hostExec = command.request.exec;
      if (session.toLocal.has(hostExec)) throw new ProtocolError("the host sent a run id twice");
      const local = ++this.lastLocal;
      session.toLocal.set(hostExec, local);
      session.toHost.set(local, hostExec);
      this.byLocal.set(local, session);
      const request = command.request;
      const asked = request.interruptBudget;
      this.server.receive({
        type: "run",
        request: {
          ...request,
          exec: local,
          slot: 0,
          memoryLimitBytes: Math.min(request.memoryLimitBytes, limits.maxMemoryLimitBytes),
          interruptBudget: asked === null ? limits.maxInterruptBudget : Math.min(asked, limits.maxInterruptBudget),
        },
      });
      return;
    }
    const local = session.toLocal.get(command.exec);
    // A command for a run that ended (a stop racing its done) is dropped, as a VM side drops one for a gone run.
    if (local === undefined) return;
    this.server.receive({ ...command, exec: local });
  }

  close(): void {
    this.server.close();
  }
}

/**
 * The interrupt budget a session's request asks for, if any; throws a TypeError naming what is wrong with any other
 * request, and one that says so for a request of pi-codemode's own client, whose protocol differs.
 */
export function checkRemoteRequest(request: unknown): number | undefined {
  if (request === null || typeof request !== "object" || Array.isArray(request)) {
    throw new TypeError("the request of a remote sandbox session must be an object, { interruptBudget? }");
  }
  if ("data" in request) {
    throw new TypeError(
      "the request comes from pi-codemode's RemoteCodemodeSandbox, whose protocol Airlock's VM side does not speak: use RemoteCodemodeSandbox from airlock-codemode/portable",
    );
  }
  const unknown = Object.keys(request).find((key) => key !== "interruptBudget");
  if (unknown !== undefined) {
    throw new TypeError(
      `the request of a remote sandbox session has no field "${unknown.slice(0, 64)}" (it takes interruptBudget)`,
    );
  }
  const budget = (request as CodemodeRemoteRequest).interruptBudget;
  if (budget === undefined) return undefined;
  if (typeof budget !== "number" || !Number.isSafeInteger(budget) || budget < 1 || budget > MAX_INTERRUPT_BUDGET) {
    throw new TypeError(`the request's interruptBudget must be an integer between 1 and ${MAX_INTERRUPT_BUDGET}`);
  }
  return budget;
}

/**
 * Takes from the front of `outbox` the messages one exchange carries: as many as fit in MAX_EXCHANGE_BYTES, and at
 * least one (the run refuses a call, output or result that alone would not fit).
 */
export function takeExchange<T>(outbox: T[]): T[] {
  let bytes = 0;
  let count = 0;
  while (count < outbox.length) {
    bytes += rpcBytes(outbox[count]);
    if (bytes > MAX_EXCHANGE_BYTES && count > 0) break;
    count++;
  }
  return outbox.splice(0, count);
}
