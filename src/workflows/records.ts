/**
 * The record contract every durable store keeps: versioned JSON records (workflow runs, audit records, call journals)
 * with an append-only event list each, changed only inside one transaction per state change. SQLite and PostgreSQL
 * implement this small engine; everything above it (the workflow commands, the audit, the journals) is shared, so
 * both stores behave alike by construction and one conformance suite checks them.
 */
import type { JsonObject, JsonValue } from "../json/index.ts";
import { AirlockError } from "../tools/errors.ts";

/** What a stored record holds. `scope` is the hex digest of the trusted scope that owns it. */
export interface StoredRecord {
  readonly scope: string;
  readonly id: string;
  /** `workflow-run`, `code-audit` or `code-journal`. */
  readonly kind: string;
  readonly idempotencyKey: string;
  readonly definitionHash: string;
  /** 1 when created, one more with every change. */
  readonly version: number;
  readonly state: JsonObject;
}

export interface StoredEvent {
  /** 1, 2, ... within the record. */
  readonly sequence: number;
  readonly type: string;
  readonly data: JsonObject;
  /** Store time, ms since the epoch. */
  readonly at: number;
}

export interface NewEvent {
  readonly type: string;
  readonly data: JsonObject;
}

export interface NewRecord {
  readonly scope: string;
  readonly id: string;
  readonly kind: string;
  readonly idempotencyKey: string;
  readonly definitionHash: string;
  readonly state: JsonObject;
  readonly events?: readonly NewEvent[];
}

/** A change computed from the current record and the store's clock; `null` changes nothing. */
export type Mutation = (record: StoredRecord, now: number) => { state: JsonObject; events: readonly NewEvent[] } | null;

export interface RecordListQuery {
  kind?: string;
  /** Only records whose `state.status` is this. */
  status?: string;
  limit: number;
}

/** The engine each store implements. Every method is one transaction. */
export interface RecordEngine {
  initialize(): Promise<void>;
  close(): Promise<void>;
  /** Inserts a record unless one with its scope and id exists; either way returns the stored one. */
  create(record: NewRecord): Promise<{ record: StoredRecord; created: boolean }>;
  read(scope: string, id: string): Promise<StoredRecord | undefined>;
  /**
   * Locks the record, computes the change with the store's clock and writes it with its events, all in one
   * transaction. `undefined` when there is no such record.
   */
  mutate(scope: string, id: string, change: Mutation): Promise<{ record: StoredRecord; changed: boolean } | undefined>;
  events(scope: string, id: string, after: number, limit: number): Promise<StoredEvent[]>;
  /** Records of every scope, newest change first: for operators (the CLI), never for a scoped caller. */
  list(query: RecordListQuery): Promise<StoredRecord[]>;
}

/** Events one `events()` call returns at most. */
export const MAX_EVENTS_PER_READ = 10_000;
/** Records one `list()` call returns at most. */
export const MAX_LIST_RECORDS = 1_000;
/** Bytes of one record's state JSON. */
export const MAX_RECORD_BYTES = 16 * 1024 * 1024;

export function storageError(message: string): AirlockError {
  return new AirlockError("STORAGE_UNAVAILABLE", message);
}

/** A record's state as the text a store writes, refused past `MAX_RECORD_BYTES`. */
export function serializeState(state: object): string {
  const text = JSON.stringify(state);
  if (Buffer.byteLength(text, "utf8") > MAX_RECORD_BYTES) {
    throw new AirlockError("LIMIT_EXCEEDED", `a record's state may have at most ${MAX_RECORD_BYTES} bytes of JSON`);
  }
  return text;
}

/** Rows read back from a database, checked before anything trusts them. */
export function recordFromRow(row: {
  scope: unknown;
  id: unknown;
  kind: unknown;
  idempotency_key: unknown;
  definition_hash: unknown;
  version: unknown;
  state: unknown;
}): StoredRecord {
  const version = typeof row.version === "string" ? Number(row.version) : row.version;
  let state: unknown = row.state;
  if (typeof state === "string") {
    try {
      state = JSON.parse(state);
    } catch {
      throw storageError("a stored record's state is not JSON");
    }
  }
  if (
    typeof row.scope !== "string" ||
    typeof row.id !== "string" ||
    typeof row.kind !== "string" ||
    typeof row.idempotency_key !== "string" ||
    typeof row.definition_hash !== "string" ||
    typeof version !== "number" ||
    !Number.isSafeInteger(version) ||
    version < 1 ||
    typeof state !== "object" ||
    state === null ||
    Array.isArray(state)
  ) {
    throw storageError("a stored record does not have the shape the store writes");
  }
  return {
    scope: row.scope,
    id: row.id,
    kind: row.kind,
    idempotencyKey: row.idempotency_key,
    definitionHash: row.definition_hash,
    version,
    state: state as JsonObject,
  };
}

export function eventFromRow(row: { sequence: unknown; type: unknown; data: unknown; at: unknown }): StoredEvent {
  const sequence = typeof row.sequence === "string" ? Number(row.sequence) : row.sequence;
  const at = typeof row.at === "string" ? Number(row.at) : row.at;
  let data: unknown = row.data;
  if (typeof data === "string") {
    try {
      data = JSON.parse(data);
    } catch {
      throw storageError("a stored event is not JSON");
    }
  }
  if (
    typeof sequence !== "number" ||
    !Number.isSafeInteger(sequence) ||
    typeof row.type !== "string" ||
    typeof at !== "number" ||
    typeof data !== "object" ||
    data === null ||
    Array.isArray(data)
  ) {
    throw storageError("a stored event does not have the shape the store writes");
  }
  return Object.freeze({ sequence, type: row.type, data: data as JsonObject, at });
}

/** The status column a store keeps beside a record's state, for listing. */
export function statusOf(state: JsonObject): string | null {
  const status: JsonValue | undefined = state.status;
  return typeof status === "string" ? status : null;
}
