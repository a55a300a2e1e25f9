/**
 * The QuickJS protocol: Airlock's VM side running in a process or sandbox of your own, reached over a duplex channel
 * of JSON messages. See PROTOCOL.md next to this file for the messages and their rules.
 *
 * Host side: `ProtocolLauncher` is a launcher of the sandbox core over a transport that `launch()` returns; it
 * multiplexes runs over one connection and replaces a connection that broke the protocol, closed, or did not stop a
 * run in time. VM side: `serveQuickJsProtocol(transport)` runs Airlock's VM runner behind any transport.
 */
import { INLINE_MAX_STACK_SIZE } from "../engine/limits.ts";
import {
  type CallOutcome,
  parseVmEvent,
  type RunRequest,
  type StopReason,
  sandboxFailure,
  type VmEvent,
} from "../engine/protocol.ts";
import { VmRunner } from "../engine/runner.ts";
import { loadQuickJSWasm } from "../engine/wasm.ts";
import {
  armStopGrace,
  failRuns,
  type LaunchedRun,
  type Launcher,
  type LaunchRequest,
  type RunEntry,
} from "../host/launcher.ts";
import { PROGRAM_CONFIGURATION } from "../host/program.ts";

/** Name and version of the message protocol; either side refuses a peer that announces another. */
export const QUICKJS_PROTOCOL = "airlock.quickjs";
export const QUICKJS_PROTOCOL_VERSION = 1;
/** Version of the run, settle, stop and busy messages this protocol carries (announced as `engine`); 2 added `busy`. */
export const QUICKJS_ENGINE_VERSION = 2;
/** The host also takes a VM side of engine 1: one that never says it is busy, so a stop it cannot read closes it. */
const ACCEPTED_ENGINE_VERSIONS: readonly number[] = [1, QUICKJS_ENGINE_VERSION];
/** Time a launched VM side has to announce itself. */
export const PROTOCOL_BOOT_TIMEOUT_MS = 15_000;
/** Time the VM side has to end a run it was told to stop, before the connection is closed. */
export const PROTOCOL_STOP_GRACE_MS = 500;

/** A run as the protocol carries it: programs only, so `tools` and `globals` are always empty. */
export type QuickJsRunRequest = Omit<RunRequest, "configuration"> & { tools: never[]; globals: never[] };

/** Host -> VM side. */
export type QuickJsHostMessage =
  | { type: "run"; request: QuickJsRunRequest }
  | { type: "settle"; exec: number; id: number; outcome: CallOutcome; seq: null; now: null }
  | { type: "stop"; exec: number; reason: StopReason };

/** VM side -> host. A program run only ever emits `call` and `done` events. */
export type QuickJsVmMessage =
  | { type: "ready"; protocol: typeof QUICKJS_PROTOCOL; version: number; engine: number }
  | { type: "failed"; message: string }
  /** The run whose turn has computed for LONG_TURN_MS (null: that turn ended); engine 2 and later. */
  | { type: "busy"; exec: number | null }
  | Extract<VmEvent, { type: "call" | "done" }>;

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
}

/** A run on a connection; `sent` once its `run` message went out (a run stopped before that is never sent). */
interface ProtocolRunEntry extends RunEntry {
  sent: boolean;
}

const READY_FIELDS = ["type", "protocol", "version", "engine"];

/**
 * The handshake, with exact fields: this protocol, its version, and an accepted version of the run messages, which it
 * returns (undefined: not a handshake the host takes).
 */
function readyEngine(message: unknown): number | undefined {
  if (typeof message !== "object" || message === null || Array.isArray(message)) return undefined;
  const m = message as Record<string, unknown>;
  const ok =
    Object.keys(m).every((key) => READY_FIELDS.includes(key)) &&
    m.type === "ready" &&
    m.protocol === QUICKJS_PROTOCOL &&
    m.version === QUICKJS_PROTOCOL_VERSION &&
    ACCEPTED_ENGINE_VERSIONS.includes(m.engine as number);
  return ok ? (m.engine as number) : undefined;
}

class Connection {
  readonly runs = new Map<number, ProtocolRunEntry>();
  readonly ready: Promise<void>;
  dead = false;
  /** Runs told to stop whose end has not arrived yet; new runs go to another connection meanwhile. */
  stopping = 0;
  /** The lowest and highest run ids sent to this VM side (each connection's runs are sent in id order). */
  firstSent = 0;
  lastSent = 0;
  /** The run whose turn the VM side said has been computing for a while (a `busy` message); null otherwise. */
  busyExec: number | null = null;
  /** The engine version the VM side announced; 1 never sends `busy`. */
  private engine = 0;
  /** No longer the launcher's current connection: closed once its last run ended. */
  private retired = false;
  private booted = false;
  private transport: QuickJsProtocolTransport | undefined;
  private bootTimer: ReturnType<typeof setTimeout> | undefined;
  private markReady!: () => void;
  private markFailed!: () => void;

  constructor(launch: () => QuickJsProtocolTransport | Promise<QuickJsProtocolTransport>) {
    this.ready = new Promise<void>((resolve, reject) => {
      this.markReady = resolve;
      this.markFailed = () => reject(new Error("the VM side is not available"));
    });
    this.ready.catch(() => {});
    this.bootTimer = setTimeout(
      () => this.kill("the VM side did not announce itself in time"),
      PROTOCOL_BOOT_TIMEOUT_MS,
    );
    Promise.resolve()
      .then(launch)
      .then(
        (transport) => {
          if (typeof transport !== "object" || transport === null) {
            this.kill("launch() did not return { send, onMessage, onClose?, close }");
            return;
          }
          // Whatever was launched is ended when the connection is killed, also when the rest of it is unusable.
          if (typeof transport.close === "function") this.transport = transport;
          if (this.dead) {
            this.closeTransport();
            return;
          }
          const wrong = ["send", "onMessage", "onClose", "close"].find((key) => {
            const value = (transport as unknown as Record<string, unknown>)[key];
            return typeof value !== "function" && (key !== "onClose" || value !== undefined);
          });
          if (wrong !== undefined) {
            this.kill(`launch() returned a transport whose ${wrong} is not a function`);
            return;
          }
          // A handler that cannot be registered leaves the connection deaf or blind: it fails like a failed launch().
          let registering = "onMessage";
          try {
            transport.onMessage((message) => this.onMessage(message));
            registering = "onClose";
            transport.onClose?.(() => this.kill("the VM side closed the connection"));
          } catch {
            this.kill(`launch() returned a transport whose ${registering}() threw`);
          }
        },
        () => this.kill("launch() failed"),
      )
      // A transport whose getters throw: never an unhandled rejection that takes the host down.
      .catch(() => this.kill("launch() returned a transport that could not be used"));
  }

  private onMessage(message: unknown): void {
    if (this.dead) return;
    if (!this.booted) {
      const engine = readyEngine(message);
      if (engine !== undefined) {
        this.engine = engine;
        this.booted = true;
        clearTimeout(this.bootTimer);
        this.markReady();
      } else {
        const m = message as { type?: unknown } | null;
        this.kill(m?.type === "failed" ? "the VM side could not boot" : "the VM side speaks another protocol");
      }
      return;
    }
    const m = message as Record<string, unknown> | null;
    if (typeof m === "object" && m !== null && !Array.isArray(m) && m.type === "busy") {
      this.onBusy(m);
      return;
    }
    let event: VmEvent;
    try {
      event = parseVmEvent(message);
      if (event.type !== "call" && event.type !== "done") throw new Error("unexpected event");
    } catch {
      this.kill("the VM side broke the protocol");
      return;
    }
    const entry = this.runs.get(event.exec);
    if (!entry?.sent) {
      // Late traffic of a run the host ended is expected; a run id it never sent to this VM side is not.
      const late = !entry && this.firstSent > 0 && event.exec >= this.firstSent && event.exec <= this.lastSent;
      if (!late) this.kill("the VM side sent a message for a run it was never sent");
      return;
    }
    if (event.type === "done") this.finishRun(event.exec, entry);
    entry.onEvent(event);
  }

  /** A `busy` message: exact fields, and exec null or a run open on this connection; anything else breaks it. */
  private onBusy(m: Record<string, unknown>): void {
    const unknown = Object.keys(m).find((key) => key !== "type" && key !== "exec");
    const exec = m.exec;
    let wrong: string | undefined;
    if (this.engine < 2) wrong = `a busy message from a VM side of engine ${this.engine}, which has none`;
    else if (unknown !== undefined) wrong = `a busy message with an unknown field "${unknown}"`;
    else if (exec !== null && typeof exec !== "number") wrong = "a busy message whose exec is not a number or null";
    else if (exec !== null && !this.runs.get(exec)?.sent) wrong = `a busy message for run ${exec}, not open here`;
    if (wrong !== undefined) {
      this.kill(`the VM side broke the protocol: ${wrong}`);
      return;
    }
    this.busyExec = exec as number | null;
  }

  /** Whether the VM side computes an open run other than `exec`: a stop of `exec` waits behind that turn. */
  computesAnother(exec: number): boolean {
    const busy = this.busyExec;
    return busy !== null && busy !== exec && this.runs.has(busy);
  }

  finishRun(exec: number, entry: RunEntry): void {
    this.runs.delete(exec);
    if (this.busyExec === exec) this.busyExec = null;
    if (entry.stopTimer) {
      clearTimeout(entry.stopTimer);
      this.stopping--;
    }
    if (this.retired && this.runs.size === 0) this.kill("the connection was retired");
  }

  /** Stops taking runs; the connection closes once its open runs have ended. */
  retire(): void {
    this.retired = true;
    if (this.runs.size === 0) this.kill("the connection was retired");
  }

  send(message: QuickJsHostMessage): void {
    if (this.dead || !this.transport) return;
    try {
      this.transport.send(message);
    } catch {
      this.kill("the connection to the VM side failed");
    }
  }

  private closeTransport(): void {
    try {
      Promise.resolve(this.transport?.close()).catch(() => {});
    } catch {
      // A transport that cannot close is dropped.
    }
  }

  /** Closes the connection once and fails its open runs with a sandbox error. */
  kill(reason: string): void {
    if (this.dead) return;
    this.dead = true;
    clearTimeout(this.bootTimer);
    this.markFailed();
    this.closeTransport();
    failRuns(this.runs, reason);
  }
}

/** A launcher of the sandbox core whose VM side is reached through `launch()`. */
export class ProtocolLauncher implements Launcher {
  private lastExec = 0;
  private connection: Connection | undefined;
  private closed = false;

  constructor(private readonly launchTransport: () => QuickJsProtocolTransport | Promise<QuickJsProtocolTransport>) {}

  /**
   * The connection new runs go to. One that is waiting for a stopped run to end may be about to be closed, so it is
   * retired and a new one launched: a run never lands on a VM side that is busy with a run it was told to stop.
   */
  private current(): Connection {
    const connection = this.connection;
    if (!connection || connection.dead || connection.stopping > 0) {
      if (connection && !connection.dead) connection.retire();
      this.connection = new Connection(this.launchTransport);
    }
    return this.connection as Connection;
  }

  launch(request: LaunchRequest, onEvent: (event: VmEvent) => void): LaunchedRun {
    const exec = ++this.lastExec;
    if (this.closed) {
      queueMicrotask(() => onEvent(sandboxFailure(exec, "the adapter is closed")));
      return { settle: () => {}, stop: () => {} };
    }
    const connection = this.current();
    const entry: ProtocolRunEntry = { onEvent, sent: false };
    connection.runs.set(exec, entry);
    connection.ready.then(
      () => {
        if (!connection.runs.has(exec)) return;
        entry.sent = true;
        if (connection.firstSent === 0) connection.firstSent = exec;
        connection.lastSent = exec;
        const { configuration: _, ...run } = request;
        connection.send({ type: "run", request: { ...run, tools: [], globals: [], exec, slot: 0 } });
      },
      () => {},
    );
    return {
      settle: (id, outcome) => {
        if (connection.runs.has(exec)) connection.send({ type: "settle", exec, id, outcome, seq: null, now: null });
      },
      stop: (reason) => {
        if (!connection.runs.has(exec) || entry.stopTimer) return;
        if (!entry.sent) {
          // The VM side has not seen the run (it may still be booting): dropped, with nothing to stop or wait for.
          connection.finishRun(exec, entry);
          return;
        }
        connection.send({ type: "stop", exec, reason });
        connection.stopping++;
        // A VM side busy computing cannot read the stop; it is closed if the run does not end in time, unless it
        // said it computes another open run, whose own deadline bounds the wait: the stop then gets more time.
        armStopGrace(
          entry,
          PROTOCOL_STOP_GRACE_MS,
          () => connection.computesAnother(exec),
          () => connection.kill("the VM side did not stop a run in time"),
        );
      },
    };
  }

  async close(): Promise<void> {
    this.closed = true;
    this.connection?.kill("the adapter is closed");
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

function isHostMessage(value: unknown): value is QuickJsHostMessage {
  if (typeof value !== "object" || value === null) return false;
  const m = value as Record<string, unknown>;
  if (m.type === "run") {
    const r = m.request as Record<string, unknown> | null;
    return (
      typeof r === "object" &&
      r !== null &&
      typeof r.exec === "number" &&
      typeof r.code === "string" &&
      typeof r.memoryLimitBytes === "number" &&
      typeof r.program === "object" &&
      r.program !== null
    );
  }
  if (m.type === "settle")
    return typeof m.exec === "number" && typeof m.id === "number" && typeof m.outcome === "object";
  if (m.type === "stop") return typeof m.exec === "number" && (m.reason === "timeout" || m.reason === "aborted");
  return false;
}

/** The runner's request for a program run of the protocol. */
function programRequest(request: QuickJsRunRequest): RunRequest {
  const { tools: _tools, globals: _globals, ...run } = request;
  return { ...run, configuration: PROGRAM_CONFIGURATION };
}

/**
 * Runs Airlock's VM side behind a transport: announces itself with a `ready` message, then runs the programs the
 * host sends. Only program runs are accepted. Returns a handle whose `close()` releases the VMs.
 */
export function serveQuickJsProtocol(
  transport: QuickJsServerTransport,
  options: ServeQuickJsProtocolOptions = {},
): { readonly ready: Promise<void>; close(): void } {
  const runner = new VmRunner({
    module: loadQuickJSWasm(options.wasmPath),
    maxStackSize: options.maxStackSize ?? INLINE_MAX_STACK_SIZE,
    maxVms: options.maxVms ?? 8,
    emit: (event) => transport.send(event as QuickJsVmMessage),
    // Sent from inside the turn: a transport that writes synchronously (stdout to a pipe) delivers it while the turn
    // computes, so the host gives a stop queued behind it more time instead of closing the connection.
    onLongTurn: (exec) => {
      try {
        transport.send({ type: "busy", exec });
      } catch {
        // Only a hint: a transport that cannot send it now must not break the turn (the host then closes on grace).
      }
    },
  });
  let isReady = false;
  const ready = runner.init().then(() => {
    isReady = true;
  });
  transport.onMessage((message) => {
    if (!isHostMessage(message)) return;
    // Only programs: a request without a program would get the script environment.
    if (message.type === "run" && message.request.program === null) return;
    const command =
      message.type === "run" ? { type: "run" as const, request: programRequest(message.request) } : message;
    if (isReady) runner.handle(command);
    else
      ready.then(
        () => runner.handle(command),
        () => {},
      );
  });
  ready.then(
    () =>
      transport.send({
        type: "ready",
        protocol: QUICKJS_PROTOCOL,
        version: QUICKJS_PROTOCOL_VERSION,
        engine: QUICKJS_ENGINE_VERSION,
      }),
    () => transport.send({ type: "failed", message: "the VM could not boot" }),
  );
  return Object.freeze({ ready, close: () => runner.close() });
}
