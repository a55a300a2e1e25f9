/**
 * The one protocol between the host and a VM side, whatever separates them (a worker thread, a child process, a
 * container, a transport of the user's, an RPC stub): the messages, their exact fields, and the validators both ends
 * run. Values travel as JSON text inside the messages; the host parses them. The VM side runs the guest, so everything
 * it sends is checked like untrusted input (known type, exact fields, right types); the host's commands are checked
 * too, so that a VM side never acts on a message it misread.
 */

import { sha256Base64Url } from "../platform/platform.ts";
import type { CodemodeError, CodemodeOutputItem } from "../types.ts";
import { MAX_SNAPSHOT_BYTES } from "./limits.ts";

/** Name and version of the protocol; either side refuses a peer that announces another. */
export const PROTOCOL_NAME = "airlock.quickjs";
export const PROTOCOL_VERSION = 6;

export interface RunRequest {
  /** The host's id for this run on this VM side: a positive integer, increasing. */
  exec: number;
  /** Index of the run's stop flag, for VM sides that share flags with the host (0 otherwise). */
  slot: number;
  code: string;
  configuration: RunConfiguration;
  /** Initial store: key -> JSON text. */
  store: Record<string, string>;
  memoryLimitBytes: number;
  /**
   * Time the run may take, in ms from when the VM side receives the request (the host's deadline less what has passed
   * of it), or null for none: relative, so that a VM side whose clock differs from the host's (another machine)
   * keeps the same deadline. The host's own timer is the one that ends an execution; this one stops a VM the host
   * cannot reach in time.
   */
  timeLeftMs: number | null;
  /** Time the guest may compute, tool waits excluded, or null for none. */
  cpuLimitMs: number | null;
  /**
   * Interrupt polls the guest may compute through, in pi-codemode's unit (BUDGET_SHARES in limits.ts), or null for
   * none: the limit where clocks stand still while a script computes (Workers), so that neither the deadline nor the
   * CPU limit can stop it.
   */
  interruptBudget: number | null;
  /** Tool and global calls the run may make; a call past it rejects in the script. */
  maxCalls: number;
  deterministic: { startedAt: number; seed: number } | null;
  /** Four 32-bit words seeding `Math.random` of a run that is not deterministic; null: the VM side picks them. */
  random: number[] | null;
  /** Whether the VM side reports the clock values the run reads (`clock` messages), so that it can be replayed. */
  journal: boolean;
  /** Clock values a replayed run reads first, in order (those its first attempt read); null when not a replay. */
  replayClock: number[] | null;
  /**
   * Deterministic runs only: answers known before the run starts (a resumed program's journaled calls), answer i for
   * call i + 1, or null. The VM side applies one, in `seq` order like a settle, once its call was made, without
   * waiting for the host; it still sends every call, and the host checks it (and stops the run) as it comes.
   */
  answers: PreAnswer[] | null;
  /**
   * Deterministic program runs only: a snapshot of an earlier run of this program where it waited on its calls (see
   * the `snapshot` command), or null. A VM side whose snapshot key is the snapshot's continues that run from there
   * (`started.restored` true: no call it made before is made again, and `answers` are not used); any other runs the
   * program from its start as without (`started.restored` false).
   */
  restore: VmSnapshot | null;
  /**
   * Set for a program: `code` is a function expression `async (input, tools) => ...`, called with the parsed input
   * and a `tools` object whose `call(toolId, input)` resolves to whatever the host answers. A program sees no other
   * globals of the script environment.
   */
  program: { input: string } | null;
}

/**
 * A run request before a launcher placed it on a VM side (ids, seed and journal are the launcher's); its deadline is
 * absolute, in ms since the epoch on the host's clock, and becomes the request's `timeLeftMs` as it is sent.
 */
export type UnplacedRequest = Omit<
  RunRequest,
  "exec" | "slot" | "random" | "journal" | "replayClock" | "timeLeftMs"
> & {
  deadline: number | null;
};

/** How a launcher seeds a request and whether it journals it (see RunRequest's fields of these names). */
export interface Seeding {
  random: number[] | null;
  journal: boolean;
  replayClock: number[] | null;
}

/** No seed (the VM side picks one) and no journal: a run that is never moved. */
export const UNSEEDED: Seeding = Object.freeze({ random: null, journal: false, replayClock: null });

/** Where a launcher placed a request, and how (see RunRequest's fields of these names). */
export interface Placement extends Seeding {
  exec: number;
  slot: number;
}

/**
 * The request as sent, every field written out. Every run builds one: an object spread of this size takes V8's slow
 * path (several microseconds a run, about a fifth of the host's cost of a trivial execution).
 */
export function placedRequest(request: UnplacedRequest, placement: Placement): RunRequest {
  return {
    exec: placement.exec,
    slot: placement.slot,
    code: request.code,
    configuration: request.configuration,
    store: request.store,
    memoryLimitBytes: request.memoryLimitBytes,
    timeLeftMs: request.deadline === null ? null : Math.max(0, request.deadline - Date.now()),
    cpuLimitMs: request.cpuLimitMs,
    interruptBudget: request.interruptBudget,
    maxCalls: request.maxCalls,
    deterministic: request.deterministic,
    random: placement.random,
    journal: placement.journal,
    replayClock: placement.replayClock,
    answers: request.answers,
    restore: request.restore,
    program: request.program,
  };
}

/** An answer in a run request: what a settle of its call would carry. */
export interface PreAnswer {
  outcome: CallOutcome;
  seq: number;
  now: number;
}

/**
 * A deterministic program run captured between two of its turns: its VM's memory and the runner's state of the run.
 * The memory holds everything the program has (its heap, its pending promises, its random generator's state); the
 * run state is what the runner keeps of it outside the memory (its calls so far and those still open, the next result
 * number, the clock). Program runs have no output and store no values, so there is none of either to keep.
 */
export interface VmSnapshot {
  /**
   * Which VM sides may restore it: the hex SHA-256 of the module's digest (engine/wasm/module-digest.ts), the prelude's and the
   * versions of quickjs-wasi and QuickJS. A VM side with another key runs the program from its start instead.
   */
  key: string;
  memory: {
    /** The memory's size, a whole number of 64 KiB wasm pages. */
    byteLength: number;
    stackPointer: number;
    runtimePtr: number;
    contextPtr: number;
    /** Where the prelude's entry points are in this memory (quickjs-wasi handle tokens). */
    entries: { configure: number; prepare: number; start: number; settle: number };
    /** [from, to) byte ranges of the pages that are not all zero, flat: 4 KiB aligned, increasing. */
    ranges: number[];
    /** Their bytes, range after range, as base64. */
    data: string;
  };
  run: {
    /** Calls the run made so far (the next gets number calls + 1). */
    calls: number;
    /** The result number it applies next (those before it are applied). */
    nextSeq: number;
    /** Its clock. */
    clockNow: number;
    /** Its calls still waiting for their results, in order. */
    open: { id: number; target: "tool" | "global"; name: string; args?: string }[];
  };
}

/** Why a VM side took no snapshot: over MAX_SNAPSHOT_BYTES, no module digest to bind it to, or not a program waiting. */
export type SnapshotRefusal = "too_large" | "unkeyed" | "not_capturable";
export const SNAPSHOT_REFUSALS: readonly SnapshotRefusal[] = ["too_large", "unkeyed", "not_capturable"];

/** What the script environment of a run offers: the same for many runs of a sandbox. */
export interface ConfigurationContent {
  tools: { name: string; id: string; description: string }[];
  globals: { name: string; spread: boolean }[];
  deterministic: boolean;
  program: boolean;
}

/**
 * A configuration as it travels: its JSON (the prelude's `configure` argument) and a digest of it. VM sides key what
 * they derive from a configuration (its parsed tool names, a VM image captured after `configure`) by the digest, so
 * that a catalog of hundreds of tools is neither rebuilt, re-serialized nor hashed again for every execution.
 */
export interface RunConfiguration {
  key: string;
  json: string;
}

export function runConfiguration(content: ConfigurationContent): RunConfiguration {
  const json = JSON.stringify(content);
  return { key: sha256Base64Url(json), json };
}

/** A call's outcome handed back to the VM. `value` is JSON text (undefined for `undefined`). */
export type CallOutcome =
  | { ok: true; value: string | undefined }
  | { ok: false; message: string; properties: string | undefined };

/**
 * How a run ended, as the engine saw it: code mode and the host map these to their own codes without reading error
 * texts. `returned` includes `exit()`; `threw` is a script error (also one it failed to parse, or a limit of the
 * script environment such as its output); `stalled`: it waits on a promise nothing can settle; `cpu_limit` and `memory_limit` are the VM's own limits; `deadline` its
 * wall clock; `stopped` a stop from the host (an abort); `vm_failed` anything that is the VM side's fault.
 */
export type RunEndReason =
  | "returned"
  | "threw"
  | "stalled"
  | "cpu_limit"
  | "memory_limit"
  | "deadline"
  | "stopped"
  | "vm_failed";
export const RUN_END_REASONS: readonly RunEndReason[] = [
  "returned",
  "threw",
  "stalled",
  "cpu_limit",
  "memory_limit",
  "deadline",
  "stopped",
  "vm_failed",
];

export type RunResult =
  | {
      ok: true;
      reason: "returned";
      value: string | undefined;
      writes: string | undefined;
      cpuMs: number;
      during: During | null;
    }
  | {
      ok: false;
      reason: Exclude<RunEndReason, "returned">;
      error: CodemodeError;
      cpuMs: number;
      during: During | null;
    };

export interface During {
  seq: number;
  issued: number;
}

/** Run events: VM side -> host, about one run. */
export type VmEvent =
  /** `restored`: the run continues from its request's snapshot (see RunRequest.restore). */
  | { type: "started"; exec: number; fingerprint: string; restored: boolean }
  | { type: "call"; exec: number; id: number; target: "tool" | "global"; name: string; args: string | undefined }
  | { type: "output"; exec: number; item: CodemodeOutputItem }
  | { type: "idle"; exec: number; seq: number; issued: number }
  /** Clock values the run read since its last message (null: more than a journal keeps; it cannot be replayed). */
  | { type: "clock"; exec: number; reads: number[] | null }
  /** The run captured, as the `snapshot` command asked, or why not. */
  | { type: "snapshot"; exec: number; snapshot: VmSnapshot; refused: null }
  | { type: "snapshot"; exec: number; snapshot: null; refused: SnapshotRefusal }
  | { type: "done"; exec: number; result: RunResult };

/** Messages of the VM side about itself. */
export type VmStatus =
  | { type: "ready"; protocol: typeof PROTOCOL_NAME; version: number; versions: Record<string, string> }
  | { type: "failed"; message: string }
  /** The run whose turn has computed for LONG_TURN_MS (null: that turn ended): a stop queued behind it waits. */
  | { type: "busy"; exec: number | null }
  /** The VM side nears a limit of its own (a process's CPU rlimit): it takes no new runs and ends once idle. */
  | { type: "retire" };

/** VM side -> host. */
export type VmMessage = VmEvent | VmStatus;

/** Host -> VM side. */
export type HostCommand =
  | { type: "run"; request: RunRequest }
  | { type: "settle"; exec: number; id: number; outcome: CallOutcome; seq: number | null; now: number | null }
  | { type: "stop"; exec: number; reason: StopReason }
  /**
   * Capture run `exec` (a deterministic program run) between two of its turns, as it is then: the VM side answers
   * with one `snapshot` event, and the run goes on.
   */
  | { type: "snapshot"; exec: number };

export type StopReason = "timeout" | "aborted";

/** `error.name` of a run stopped because it computed past its CPU limit. */
export const CPU_LIMIT_ERROR = "CpuLimitExceeded";

/** Message of a run the VM side stopped at its deadline; the host replaces it with one that names the limit. */
export const DEADLINE_MESSAGE = "The execution timed out";

/** Codes written to a shared stop flag. */
export const StopCode = { none: 0, timeout: 1, aborted: 2 } as const;

/** A message that breaks the protocol; the host ends that VM side once. */
export class ProtocolError extends Error {}

/** Clock values one run may report for its journal before it stops being replayable. */
export const MAX_JOURNAL_CLOCK_READS = 65_536;
/** Clock values one `clock` message carries at most. */
export const CLOCK_READS_PER_MESSAGE = 1024;

const isInt = (v: unknown): v is number => typeof v === "number" && Number.isSafeInteger(v) && v >= 0;
const isStr = (v: unknown): v is string => typeof v === "string";
const isOptStr = (v: unknown): v is string | undefined => v === undefined || typeof v === "string";
const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === "object" && !Array.isArray(v);
const isFiniteNumber = (v: unknown): v is number => typeof v === "number" && Number.isFinite(v);

function exactKeys(value: Record<string, unknown>, allowed: readonly string[], what: string): void {
  const keys = Object.keys(value);
  // Fields in the order Airlock writes them (every message of its own, optional ones left out at the end) match one by
  // one; the rest are looked up.
  let i = 0;
  while (i < keys.length && keys[i] === allowed[i]) i++;
  for (; i < keys.length; i++) {
    const key = keys[i] as string;
    if (!allowed.includes(key)) throw new ProtocolError(`${what} has an unknown field "${key}"`);
  }
}

function object(value: unknown, what: string): Record<string, unknown> {
  if (!isObject(value)) throw new ProtocolError(`${what} is not an object`);
  return value;
}

/** Checks a message from a VM side: known type, exact fields, right types. Returns it typed, or throws ProtocolError. */
export function parseVmMessage(value: unknown): VmMessage {
  const m = object(value, "a VM message");
  switch (m.type) {
    case "ready":
      exactKeys(m, ["type", "protocol", "version", "versions"], "ready");
      if (m.protocol !== PROTOCOL_NAME || m.version !== PROTOCOL_VERSION) {
        throw new ProtocolError(
          `the VM side speaks ${String(m.protocol)} version ${String(m.version)}, not ${PROTOCOL_NAME} version ${PROTOCOL_VERSION}`,
        );
      }
      if (!isObject(m.versions) || !Object.values(m.versions).every(isStr)) {
        throw new ProtocolError("ready.versions is not an object of strings");
      }
      return m as unknown as VmMessage;
    case "failed":
      exactKeys(m, ["type", "message"], "failed");
      if (!isStr(m.message)) throw new ProtocolError("failed.message is not a string");
      return m as unknown as VmMessage;
    case "busy":
      exactKeys(m, ["type", "exec"], "busy");
      if (m.exec !== null && !isInt(m.exec)) throw new ProtocolError("busy.exec is not a run id or null");
      return m as unknown as VmMessage;
    case "retire":
      exactKeys(m, ["type"], "retire");
      return m as unknown as VmMessage;
    default:
      return checkVmEvent(m);
  }
}

/** Checks a run event (see parseVmMessage). */
export function parseVmEvent(value: unknown): VmEvent {
  return checkVmEvent(object(value, "a VM message"));
}

function checkVmEvent(m: Record<string, unknown>): VmEvent {
  if (!isInt(m.exec)) throw new ProtocolError("a VM message has no valid exec id");
  switch (m.type) {
    case "started":
      exactKeys(m, ["type", "exec", "fingerprint", "restored"], "started");
      if (!isStr(m.fingerprint) || typeof m.restored !== "boolean") {
        throw new ProtocolError("started has fields of the wrong type");
      }
      break;
    case "snapshot":
      exactKeys(m, ["type", "exec", "snapshot", "refused"], "snapshot");
      if (m.snapshot === null) {
        if (!SNAPSHOT_REFUSALS.includes(m.refused as SnapshotRefusal)) {
          throw new ProtocolError("snapshot.refused is not a known reason");
        }
      } else {
        if (m.refused !== null) throw new ProtocolError("a snapshot event gives a snapshot and a refusal");
        checkSnapshot(m.snapshot, "snapshot.snapshot");
      }
      break;
    case "call":
      exactKeys(m, ["type", "exec", "id", "target", "name", "args"], "call");
      if (!isInt(m.id) || (m.target !== "tool" && m.target !== "global") || !isStr(m.name) || !isOptStr(m.args)) {
        throw new ProtocolError("call has fields of the wrong type");
      }
      break;
    case "output": {
      exactKeys(m, ["type", "exec", "item"], "output");
      const item = object(m.item, "output.item");
      if (item.type === "text") {
        exactKeys(item, ["type", "text", "console"], "output.item");
        if (!isStr(item.text) || (item.console !== undefined && item.console !== true)) {
          throw new ProtocolError("a text item has fields of the wrong type");
        }
      } else if (item.type === "image") {
        exactKeys(item, ["type", "data", "mimeType"], "output.item");
        if (!isStr(item.data) || !isStr(item.mimeType)) {
          throw new ProtocolError("an image item has fields of the wrong type");
        }
      } else throw new ProtocolError("output.item has an unknown type");
      break;
    }
    case "idle":
      exactKeys(m, ["type", "exec", "seq", "issued"], "idle");
      if (!isInt(m.seq) || !isInt(m.issued)) throw new ProtocolError("idle has fields of the wrong type");
      break;
    case "clock":
      exactKeys(m, ["type", "exec", "reads"], "clock");
      if (
        m.reads !== null &&
        (!Array.isArray(m.reads) || m.reads.length > CLOCK_READS_PER_MESSAGE || !m.reads.every(isFiniteNumber))
      ) {
        throw new ProtocolError("clock.reads is not a list of numbers or null");
      }
      break;
    case "done":
      exactKeys(m, ["type", "exec", "result"], "done");
      checkResult(object(m.result, "done.result"));
      break;
    default:
      throw new ProtocolError("a VM message has an unknown type");
  }
  return m as unknown as VmEvent;
}

function checkResult(r: Record<string, unknown>): void {
  if (!isFiniteNumber(r.cpuMs) || r.cpuMs < 0) throw new ProtocolError("done.result.cpuMs is not a number");
  const during = r.during;
  if (during !== null) {
    const d = object(during, "done.result.during");
    exactKeys(d, ["seq", "issued"], "done.result.during");
    if (!isInt(d.seq) || !isInt(d.issued)) throw new ProtocolError("done.result.during is malformed");
  }
  if (r.ok === true) {
    exactKeys(r, ["ok", "reason", "value", "writes", "cpuMs", "during"], "done.result");
    if (r.reason !== "returned") throw new ProtocolError("a successful done.result has another reason than returned");
    if (!isOptStr(r.value) || !isOptStr(r.writes)) throw new ProtocolError("done.result has fields of the wrong type");
  } else if (r.ok === false) {
    exactKeys(r, ["ok", "reason", "error", "cpuMs", "during"], "done.result");
    if (r.reason === "returned" || !RUN_END_REASONS.includes(r.reason as RunEndReason)) {
      throw new ProtocolError("a failed done.result has no valid reason");
    }
    const e = object(r.error, "done.result.error");
    exactKeys(e, ["kind", "name", "message", "stack"], "done.result.error");
    if (
      !["script", "timeout", "aborted", "sandbox"].includes(e.kind as string) ||
      !isStr(e.message) ||
      !isOptStr(e.name) ||
      !isOptStr(e.stack)
    ) {
      throw new ProtocolError("done.result.error has fields of the wrong type");
    }
  } else throw new ProtocolError("done.result.ok is not a boolean");
}

/** Checks a command from the host (see the module comment). Returns it typed, or throws ProtocolError. */
export function parseHostCommand(value: unknown): HostCommand {
  const m = object(value, "a host command");
  switch (m.type) {
    case "run": {
      exactKeys(m, ["type", "request"], "run");
      checkRequest(object(m.request, "run.request"));
      break;
    }
    case "settle": {
      exactKeys(m, ["type", "exec", "id", "outcome", "seq", "now"], "settle");
      if (!isInt(m.exec) || !isInt(m.id)) throw new ProtocolError("settle has no valid exec or call id");
      if ((m.seq !== null && !isInt(m.seq)) || (m.now !== null && !isFiniteNumber(m.now))) {
        throw new ProtocolError("settle.seq or settle.now is malformed");
      }
      checkOutcome(m.outcome, "settle.outcome");
      break;
    }
    case "stop":
      exactKeys(m, ["type", "exec", "reason"], "stop");
      if (!isInt(m.exec) || (m.reason !== "timeout" && m.reason !== "aborted")) {
        throw new ProtocolError("stop has fields of the wrong type");
      }
      break;
    case "snapshot":
      exactKeys(m, ["type", "exec"], "snapshot");
      if (!isInt(m.exec)) throw new ProtocolError("snapshot has no valid exec id");
      break;
    default:
      throw new ProtocolError("a host command has an unknown type");
  }
  return m as unknown as HostCommand;
}

function checkOutcome(value: unknown, what: string): void {
  const o = object(value, what);
  if (o.ok === true) {
    exactKeys(o, ["ok", "value"], what);
    if (!isOptStr(o.value)) throw new ProtocolError(`${what}.value is not JSON text`);
  } else if (o.ok === false) {
    exactKeys(o, ["ok", "message", "properties"], what);
    if (!isStr(o.message) || !isOptStr(o.properties)) {
      throw new ProtocolError(`${what} has fields of the wrong type`);
    }
  } else throw new ProtocolError(`${what}.ok is not a boolean`);
}

/** A run's answers: only for a deterministic run, at most one per call it may make, each result number once. */
function checkAnswers(r: Record<string, unknown>): void {
  if (r.answers === null) return;
  const wrong = (why: string) => new ProtocolError(`run.request.answers ${why}`);
  if (r.deterministic === null) throw wrong("are given for a run that is not deterministic");
  if (!Array.isArray(r.answers)) throw wrong("is not an array or null");
  if (r.answers.length > (r.maxCalls as number)) throw wrong("hold more answers than the run may make calls");
  const seqs = new Set<number>();
  for (const answer of r.answers as unknown[]) {
    const a = object(answer, "run.request.answers[]");
    exactKeys(a, ["outcome", "seq", "now"], "run.request.answers[]");
    checkOutcome(a.outcome, "run.request.answers[].outcome");
    if (!isInt(a.seq) || a.seq === 0 || !isFiniteNumber(a.now)) throw wrong("hold a malformed seq or now");
    if (seqs.has(a.seq)) throw wrong(`give result number ${a.seq} twice`);
    seqs.add(a.seq);
  }
}

/** Base64 characters of a snapshot's memory at most (MAX_SNAPSHOT_BYTES of pages). */
const MAX_SNAPSHOT_DATA_CHARS = Math.ceil(MAX_SNAPSHOT_BYTES / 3) * 4;
/** The largest memory of a wasm32 instance. */
const MAX_MEMORY_BYTES = 2 ** 32;

/**
 * Checks a snapshot's shape (see VmSnapshot): exact fields and types, the memory's pages in order within its size and
 * as many bytes as they say, the open calls in order among the calls made. Whether the VM side can restore it is the
 * VM side's to say (its key, the bytes' base64).
 */
export function checkSnapshot(value: unknown, what: string): void {
  const wrong = (why: string) => new ProtocolError(`${what} ${why}`);
  const s = object(value, what);
  exactKeys(s, ["key", "memory", "run"], what);
  if (!isStr(s.key) || !/^[0-9a-f]{64}$/.test(s.key)) throw wrong("has no valid key");
  const m = object(s.memory, `${what}.memory`);
  exactKeys(
    m,
    ["byteLength", "stackPointer", "runtimePtr", "contextPtr", "entries", "ranges", "data"],
    `${what}.memory`,
  );
  const byteLength = m.byteLength;
  if (!isInt(byteLength) || byteLength === 0 || byteLength % 65536 !== 0 || byteLength > MAX_MEMORY_BYTES) {
    throw wrong("has a memory of no valid size");
  }
  for (const field of ["stackPointer", "runtimePtr", "contextPtr"] as const) {
    if (!isInt(m[field]) || (m[field] as number) >= byteLength) throw wrong(`has no valid memory.${field}`);
  }
  const entries = object(m.entries, `${what}.memory.entries`);
  exactKeys(entries, ["configure", "prepare", "start", "settle"], `${what}.memory.entries`);
  for (const name of ["configure", "prepare", "start", "settle"]) {
    if (!isInt(entries[name])) throw wrong(`has no valid memory.entries.${name}`);
  }
  if (!Array.isArray(m.ranges) || m.ranges.length % 2 !== 0 || !isStr(m.data)) throw wrong("has no valid pages");
  let end = 0;
  let bytes = 0;
  for (let i = 0; i < m.ranges.length; i += 2) {
    const from = m.ranges[i];
    const to = m.ranges[i + 1];
    if (!isInt(from) || !isInt(to) || from % 4096 !== 0 || to % 4096 !== 0 || from < end || to <= from) {
      throw wrong("has pages out of order");
    }
    if (to > byteLength) throw wrong("has pages past its memory");
    bytes += to - from;
    end = to;
  }
  if (bytes > MAX_SNAPSHOT_BYTES || m.data.length > MAX_SNAPSHOT_DATA_CHARS) throw wrong("is over MAX_SNAPSHOT_BYTES");
  if (m.data.length !== Math.ceil(bytes / 3) * 4) throw wrong("has other bytes than its pages say");
  const r = object(s.run, `${what}.run`);
  exactKeys(r, ["calls", "nextSeq", "clockNow", "open"], `${what}.run`);
  if (!isInt(r.calls) || !isInt(r.nextSeq) || r.nextSeq === 0 || !isFiniteNumber(r.clockNow)) {
    throw wrong("has no valid run state");
  }
  if (!Array.isArray(r.open) || r.open.length > r.calls) throw wrong("has no valid open calls");
  let last = 0;
  for (const entry of r.open as unknown[]) {
    const c = object(entry, `${what}.run.open[]`);
    exactKeys(c, ["id", "target", "name", "args"], `${what}.run.open[]`);
    if (!isInt(c.id) || c.id <= last || c.id > r.calls) throw wrong("has open calls out of order");
    if ((c.target !== "tool" && c.target !== "global") || !isStr(c.name) || !isOptStr(c.args)) {
      throw wrong("has an open call of the wrong shape");
    }
    last = c.id;
  }
}

const REQUEST_KEYS = [
  "exec",
  "slot",
  "code",
  "configuration",
  "store",
  "memoryLimitBytes",
  "timeLeftMs",
  "cpuLimitMs",
  "interruptBudget",
  "maxCalls",
  "deterministic",
  "random",
  "journal",
  "replayClock",
  "answers",
  "restore",
  "program",
];

function checkRequest(r: Record<string, unknown>): void {
  exactKeys(r, REQUEST_KEYS, "run.request");
  const wrong = (field: string) => new ProtocolError(`run.request.${field} is malformed`);
  if (!isInt(r.exec) || r.exec === 0) throw wrong("exec");
  if (!isInt(r.slot)) throw wrong("slot");
  if (!isStr(r.code)) throw wrong("code");
  const c = object(r.configuration, "run.request.configuration");
  exactKeys(c, ["key", "json"], "run.request.configuration");
  if (!isStr(c.key) || !isStr(c.json)) throw wrong("configuration");
  const store = object(r.store, "run.request.store");
  if (!Object.values(store).every(isStr)) throw wrong("store");
  if (!isInt(r.memoryLimitBytes) || r.memoryLimitBytes === 0) throw wrong("memoryLimitBytes");
  if (r.timeLeftMs !== null && (!isFiniteNumber(r.timeLeftMs) || r.timeLeftMs < 0)) throw wrong("timeLeftMs");
  if (r.cpuLimitMs !== null && (!isFiniteNumber(r.cpuLimitMs) || r.cpuLimitMs < 0)) throw wrong("cpuLimitMs");
  if (r.interruptBudget !== null && (!isInt(r.interruptBudget) || r.interruptBudget === 0)) {
    throw wrong("interruptBudget");
  }
  if (!isInt(r.maxCalls)) throw wrong("maxCalls");
  if (r.deterministic !== null) {
    const d = object(r.deterministic, "run.request.deterministic");
    exactKeys(d, ["startedAt", "seed"], "run.request.deterministic");
    if (!isFiniteNumber(d.startedAt) || !isInt(d.seed)) throw wrong("deterministic");
  }
  if (r.random !== null && (!Array.isArray(r.random) || r.random.length !== 4 || !r.random.every(isInt))) {
    throw wrong("random");
  }
  if (typeof r.journal !== "boolean") throw wrong("journal");
  if (r.replayClock !== null && (!Array.isArray(r.replayClock) || !r.replayClock.every(isFiniteNumber))) {
    throw wrong("replayClock");
  }
  checkAnswers(r);
  if (r.restore !== null) {
    if (r.deterministic === null || r.program === null) {
      throw new ProtocolError("run.request.restore is given for a run that is not a deterministic program");
    }
    checkSnapshot(r.restore, "run.request.restore");
  }
  if (r.program !== null) {
    const p = object(r.program, "run.request.program");
    exactKeys(p, ["input"], "run.request.program");
    if (!isStr(p.input)) throw wrong("program");
  }
}

/** The `done` event of a run that the VM side could not run or finish: a `sandbox` error. */
export function sandboxFailure(exec: number, message: string): Extract<VmEvent, { type: "done" }> {
  return {
    type: "done",
    exec,
    result: { ok: false, reason: "vm_failed", error: { kind: "sandbox", message }, cpuMs: 0, during: null },
  };
}
