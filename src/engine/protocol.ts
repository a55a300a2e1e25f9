/**
 * The messages between the host side of an execution and the VM side, whatever separates them (nothing, a worker
 * thread, a process). Values travel as JSON text; the host parses them.
 */
import { createHash } from "node:crypto";
import type { CodemodeError, CodemodeOutputItem } from "../types.ts";

/** Version of this protocol; a launcher refuses a VM side that speaks another. 2: runs carry a configuration. */
export const PROTOCOL_VERSION = 2;

export interface RunRequest {
  /** The launcher's id for the execution. */
  exec: number;
  /** Index of the execution's abort flag, for VM sides that share flags with the host. */
  slot: number;
  code: string;
  configuration: RunConfiguration;
  /** Initial store: key -> JSON text. */
  store: Record<string, string>;
  memoryLimitBytes: number;
  /** Wall-clock deadline in ms since the epoch, or null for none. */
  deadline: number | null;
  /** Time the guest may compute, tool waits excluded, or null for none. */
  cpuLimitMs: number | null;
  deterministic: { startedAt: number; seed: number } | null;
  /**
   * Set for a program: `code` is a function expression `async (input, tools) => ...`, called with the parsed input
   * and a `tools` object whose `call(toolId, input)` resolves to whatever the host answers. A program sees no other
   * globals of the script environment.
   */
  program: { input: string } | null;
}

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
  return { key: createHash("sha256").update(json).digest("base64url"), json };
}

/** A call's outcome handed back to the VM. `value` is JSON text (undefined for `undefined`). */
export type CallOutcome =
  | { ok: true; value: string | undefined }
  | { ok: false; message: string; properties: string | undefined };

export type RunResult =
  | { ok: true; value: string | undefined; writes: string | undefined; cpuMs: number; during: During | null }
  | { ok: false; error: CodemodeError; cpuMs: number; during: During | null };

export interface During {
  seq: number;
  issued: number;
}

/** VM side -> host. */
export type VmEvent =
  | { type: "started"; exec: number; fingerprint: string }
  | { type: "call"; exec: number; id: number; target: "tool" | "global"; name: string; args: string | undefined }
  | { type: "output"; exec: number; item: CodemodeOutputItem }
  | { type: "idle"; exec: number; seq: number; issued: number }
  | { type: "done"; exec: number; result: RunResult };

/** Host -> VM side. */
export type HostCommand =
  | { type: "run"; request: RunRequest }
  | { type: "settle"; exec: number; id: number; outcome: CallOutcome; seq: number | null; now: number | null }
  | { type: "stop"; exec: number; reason: StopReason };

export type StopReason = "timeout" | "aborted";

/** `error.name` of a run stopped because it computed past its CPU limit. */
export const CPU_LIMIT_ERROR = "CpuLimitExceeded";

/** Message of a run the VM side stopped at its deadline; the host replaces it with one that names the limit. */
export const DEADLINE_MESSAGE = "The execution timed out";

/** Codes written to a shared abort flag. */
export const StopCode = { none: 0, timeout: 1, aborted: 2 } as const;

/** A message from a VM side that breaks the protocol; the launcher kills that VM side once. */
export class ProtocolError extends Error {}

const isInt = (v: unknown): v is number => typeof v === "number" && Number.isSafeInteger(v) && v >= 0;
const isStr = (v: unknown): v is string => typeof v === "string";
const isOptStr = (v: unknown): v is string | undefined => v === undefined || typeof v === "string";

function exactKeys(value: Record<string, unknown>, allowed: readonly string[], what: string): void {
  for (const key of Object.keys(value)) {
    if (!allowed.includes(key)) throw new ProtocolError(`${what} has an unknown field "${key}"`);
  }
}

/**
 * Checks that `value` is a well-formed VM event: known type, exact fields, right types. The VM side runs the guest, so
 * its traffic is validated like any untrusted input.
 */
export function parseVmEvent(value: unknown): VmEvent {
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new ProtocolError("a VM message is not an object");
  }
  const m = value as Record<string, unknown>;
  if (!isInt(m.exec)) throw new ProtocolError("a VM message has no valid exec id");
  switch (m.type) {
    case "started":
      exactKeys(m, ["type", "exec", "fingerprint"], "started");
      if (!isStr(m.fingerprint)) throw new ProtocolError("started.fingerprint is not a string");
      break;
    case "call":
      exactKeys(m, ["type", "exec", "id", "target", "name", "args"], "call");
      if (!isInt(m.id) || (m.target !== "tool" && m.target !== "global") || !isStr(m.name) || !isOptStr(m.args)) {
        throw new ProtocolError("call has fields of the wrong type");
      }
      break;
    case "output": {
      exactKeys(m, ["type", "exec", "item"], "output");
      const item = m.item as Record<string, unknown> | null;
      if (item === null || typeof item !== "object") throw new ProtocolError("output.item is not an object");
      if (item.type === "text") {
        exactKeys(item, ["type", "text", "console"], "output.item");
        if (!isStr(item.text) || (item.console !== undefined && item.console !== true)) {
          throw new ProtocolError("a text item has fields of the wrong type");
        }
      } else if (item.type === "image") {
        exactKeys(item, ["type", "data", "mimeType"], "output.item");
        if (!isStr(item.data) || !isStr(item.mimeType))
          throw new ProtocolError("an image item has fields of the wrong type");
      } else throw new ProtocolError("output.item has an unknown type");
      break;
    }
    case "idle":
      exactKeys(m, ["type", "exec", "seq", "issued"], "idle");
      if (!isInt(m.seq) || !isInt(m.issued)) throw new ProtocolError("idle has fields of the wrong type");
      break;
    case "done": {
      exactKeys(m, ["type", "exec", "result"], "done");
      const r = m.result as Record<string, unknown> | null;
      if (r === null || typeof r !== "object") throw new ProtocolError("done.result is not an object");
      if (typeof r.cpuMs !== "number") throw new ProtocolError("done.result.cpuMs is not a number");
      const during = r.during as Record<string, unknown> | null;
      if (during !== null && (typeof during !== "object" || !isInt(during.seq) || !isInt(during.issued))) {
        throw new ProtocolError("done.result.during is malformed");
      }
      if (r.ok === true) {
        exactKeys(r, ["ok", "value", "writes", "cpuMs", "during"], "done.result");
        if (!isOptStr(r.value) || !isOptStr(r.writes))
          throw new ProtocolError("done.result has fields of the wrong type");
      } else if (r.ok === false) {
        exactKeys(r, ["ok", "error", "cpuMs", "during"], "done.result");
        const e = r.error as Record<string, unknown> | null;
        if (e === null || typeof e !== "object") throw new ProtocolError("done.result.error is not an object");
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
      break;
    }
    default:
      throw new ProtocolError(`a VM message has an unknown type`);
  }
  return m as unknown as VmEvent;
}

/** The `done` event of a run that the VM side could not run or finish: a `sandbox` error. */
export function sandboxFailure(exec: number, message: string): VmEvent {
  return { type: "done", exec, result: { ok: false, error: { kind: "sandbox", message }, cpuMs: 0, during: null } };
}
