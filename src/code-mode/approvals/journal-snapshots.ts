/**
 * Snapshots of paused programs in the journal's store. A program paused after many calls is captured where it waits
 * (SandboxDeterministicRun.capture), so that its resume restores it instead of replaying every call: the snapshot is
 * kept as a record of its own beside the journal (gzipped, with a summary of the journal at the pause, so that the
 * resume reads only the events after it), and the journal's state names it with a digest of what was stored. A resume reads it back and refuses one whose digest differs (INTEGRITY_VIOLATION): a snapshot changed at
 * rest is never restored. Once an execution has moved past a snapshot, its data is dropped from the record.
 */
import { gunzipSync, gzipSync } from "node:zlib";
import { MAX_SNAPSHOT_BYTES } from "../../engine/limits.ts";
import { domainDigest, type JsonObject } from "../../json/index.ts";
import { sha256Hex } from "../../platform/platform.ts";
import { AirlockError } from "../../tools/errors.ts";
import type { SandboxSnapshot } from "../adapter.ts";
import { type ApprovalJournalStore, type Entry, isCallResult, isCount, type SnapshotRef } from "./call-journal.ts";

/**
 * Calls before the paused one from which a paused program is captured, so that its resume restores the snapshot
 * rather than replaying them all. Chosen from `npm run bench:snapshot` (docs/design/2026-12-04-snapshot-or-replay.md):
 * through the code mode a resume from a snapshot took 20-30 ms whatever the journal's length, a replay 6-8 ms and
 * 0.03 ms a call, so they met at 500-1,000 calls; taking the snapshot adds about 30 ms to the pause, which only longer
 * journals win back.
 */
export const SNAPSHOT_MIN_CALLS = 1_000;
export const SNAPSHOT_KIND = "code-snapshot";
/** gzip's level for a snapshot: its pages are mostly small integers and pointers; more effort shrinks them little. */
const SNAPSHOT_GZIP_LEVEL = 1;
/** Bytes a stored snapshot may unzip to: its pages as base64 in JSON (a third more) and its run's state. */
const MAX_SNAPSHOT_JSON_BYTES = 2 * MAX_SNAPSHOT_BYTES;

/**
 * The journal as the snapshot's run left it, so that a resume from the snapshot reads only the events after it: the
 * last event's sequence number then, the next result number and the clock, and the entries of the calls the run had
 * open (those it makes again first). The calls it had answered before are inside the snapshot, and not checked again.
 */
export interface JournalSummary {
  sequence: number;
  nextSeq: number;
  lastNow: number;
  entries: [number, Entry][];
}

const ENTRY_STATES: readonly Entry["state"][] = ["dispatching", "settled", "awaiting"];

function isSummary(value: unknown): value is JournalSummary {
  const summary = value as JournalSummary;
  return (
    typeof value === "object" &&
    value !== null &&
    isCount(summary.sequence) &&
    isCount(summary.nextSeq) &&
    typeof summary.lastNow === "number" &&
    Array.isArray(summary.entries) &&
    summary.entries.every(
      (item) =>
        Array.isArray(item) &&
        item.length === 2 &&
        isCount(item[0]) &&
        typeof item[1]?.toolId === "string" &&
        typeof item[1].argsDigest === "string" &&
        ENTRY_STATES.includes(item[1].state) &&
        isCount(item[1].seq) &&
        typeof item[1].now === "number" &&
        (item[1].result === null || isCallResult(item[1].result)) &&
        (item[1].decided === undefined || typeof item[1].decided?.digest === "string"),
    )
  );
}

interface SnapshotState {
  format: 1;
  kind: typeof SNAPSHOT_KIND;
  executionId: string;
  n: number;
  key: string;
  calls: number;
  open: number[];
  journal: JournalSummary;
  /** The sandbox's bytes, gzipped, as base64; null once dropped. */
  data: string | null;
}

const snapshotId = (executionId: string, n: number) => domainDigest("airlock:call-snapshot-id:v1", { executionId, n });

function digestOf(state: SnapshotState): string {
  const { executionId, n, key, calls, open, journal, data } = state;
  return domainDigest("airlock:call-snapshot:v1", {
    executionId,
    n,
    key,
    calls,
    open,
    journal,
    data: data === null ? null : sha256Hex(data),
  });
}

/** Stores the snapshot of an execution paused at call `n` and returns the journal's reference to it. */
export async function storeSnapshot(
  store: ApprovalJournalStore,
  sh: string,
  executionId: string,
  programDigest: string,
  n: number,
  snapshot: SandboxSnapshot,
  journal: JournalSummary,
): Promise<SnapshotRef> {
  const state: SnapshotState = {
    format: 1,
    kind: SNAPSHOT_KIND,
    executionId,
    n,
    key: snapshot.key,
    calls: snapshot.calls,
    open: [...snapshot.open],
    journal,
    data: gzipSync(snapshot.data, { level: SNAPSHOT_GZIP_LEVEL }).toString("base64"),
  };
  const id = snapshotId(executionId, n);
  const created = await store.create({
    scope: sh,
    id,
    kind: SNAPSHOT_KIND,
    idempotencyKey: id,
    definitionHash: programDigest,
    state: state as unknown as JsonObject,
  });
  // An attempt that paused here before and died before its journal said so left one: this one replaces it.
  if (!created.created) {
    await store.mutate(sh, id, () => ({ state: state as unknown as JsonObject, events: [] }));
  }
  return { id, n, digest: digestOf(state) };
}

/**
 * The snapshot the journal names, as the sandbox gave it, and its summary of the journal: INTEGRITY_VIOLATION when the
 * record is gone, is not one, or is not what was stored (its digest differs).
 */
export async function readSnapshot(
  store: ApprovalJournalStore,
  sh: string,
  executionId: string,
  ref: SnapshotRef,
): Promise<{ snapshot: SandboxSnapshot; journal: JournalSummary }> {
  const refused = () =>
    new AirlockError("INTEGRITY_VIOLATION", "the paused program's snapshot is not what was stored; it is not used");
  const record = await store.read(sh, ref.id);
  const state = record?.state as unknown as SnapshotState | undefined;
  if (
    record === undefined ||
    record.kind !== SNAPSHOT_KIND ||
    state === undefined ||
    state.format !== 1 ||
    state.executionId !== executionId ||
    state.n !== ref.n ||
    typeof state.key !== "string" ||
    !isCount(state.calls) ||
    !Array.isArray(state.open) ||
    !state.open.every(isCount) ||
    !isSummary(state.journal) ||
    typeof state.data !== "string" ||
    digestOf(state) !== ref.digest
  ) {
    throw refused();
  }
  let data: Buffer;
  try {
    data = gunzipSync(Buffer.from(state.data, "base64"), { maxOutputLength: MAX_SNAPSHOT_JSON_BYTES });
  } catch {
    throw refused();
  }
  const snapshot = Object.freeze({
    key: state.key,
    calls: state.calls,
    open: Object.freeze([...state.open]),
    data: new Uint8Array(data.buffer, data.byteOffset, data.byteLength),
  });
  return { snapshot, journal: state.journal };
}

/** Drops a snapshot's data once the execution moved past it (the program's heap is not kept longer than needed). */
export async function dropSnapshot(store: ApprovalJournalStore, sh: string, ref: SnapshotRef): Promise<void> {
  await store.mutate(sh, ref.id, (record) => {
    if (record.kind !== SNAPSHOT_KIND || record.state.data === null) return null;
    return { state: { ...record.state, data: null }, events: [] };
  });
}
