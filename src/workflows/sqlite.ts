/**
 * `airlock-codemode/workflows/sqlite`: the embedded store. One file (or `:memory:`) through better-sqlite3 12.x, in
 * WAL mode with `synchronous = FULL`, so that a change is on disk when its transaction returns; every state change is
 * one `BEGIN IMMEDIATE` transaction. Several processes may open the same file: SQLite serialises their writers.
 */
import { createRequire } from "node:module";
import { optionKeys, unknownOption } from "../platform/options.ts";
import { AirlockError } from "../tools/errors.ts";
import {
  eventFromRow,
  MAX_EVENTS_PER_READ,
  MAX_LIST_RECORDS,
  type Mutation,
  type NewEvent,
  type NewRecord,
  type RecordEngine,
  type RecordListQuery,
  recordFromRow,
  type StoredRecord,
  serializeState,
  statusOf,
  storageError,
} from "./records.ts";
import { makeWorkflowStore, type WorkflowStore } from "./store.ts";

/** How long a writer waits for another process's transaction on the same file. */
export const SQLITE_BUSY_TIMEOUT_MS = 5_000;

export interface SqliteStoreOptions {
  /** A file path, or `:memory:` for a store that lives as long as the process. */
  filename: string;
}

const OPTION_KEYS = optionKeys<SqliteStoreOptions>({ filename: true });

interface Statement {
  run(...params: unknown[]): { changes: number };
  get(...params: unknown[]): unknown;
  all(...params: unknown[]): unknown[];
}
interface Database {
  pragma(text: string): unknown;
  exec(sql: string): void;
  prepare(sql: string): Statement;
  transaction<T>(fn: () => T): { immediate(): T };
  close(): void;
}

const SCHEMA = `
CREATE TABLE IF NOT EXISTS airlock_records (
  scope TEXT NOT NULL,
  id TEXT NOT NULL,
  kind TEXT NOT NULL,
  idempotency_key TEXT NOT NULL,
  definition_hash TEXT NOT NULL,
  version INTEGER NOT NULL,
  status TEXT,
  event_count INTEGER NOT NULL,
  state TEXT NOT NULL,
  updated_at INTEGER NOT NULL,
  PRIMARY KEY (scope, id)
);
CREATE INDEX IF NOT EXISTS airlock_records_listing ON airlock_records (kind, status, updated_at);
CREATE TABLE IF NOT EXISTS airlock_events (
  scope TEXT NOT NULL,
  id TEXT NOT NULL,
  sequence INTEGER NOT NULL,
  type TEXT NOT NULL,
  data TEXT NOT NULL,
  at INTEGER NOT NULL,
  PRIMARY KEY (scope, id, sequence)
);`;

function loadDriver(): new (filename: string, options: { timeout: number }) => Database {
  try {
    return createRequire(import.meta.url)("better-sqlite3");
  } catch {
    throw new AirlockError(
      "UNSUPPORTED_PROFILE",
      "the SQLite store needs the package better-sqlite3 (12.x on Node 20): npm install better-sqlite3@12",
    );
  }
}

class SqliteEngine implements RecordEngine {
  private db: Database | undefined;
  private closed = false;

  constructor(private readonly filename: string) {}

  private open(): Database {
    if (this.closed) throw storageError("the SQLite store is closed");
    if (this.db === undefined) throw storageError("the SQLite store is not initialized: call initialize() first");
    return this.db;
  }

  /** Runs a statement block; a driver error (a full disk, a locked file past the timeout) is STORAGE_UNAVAILABLE. */
  private guard<T>(body: () => T): Promise<T> {
    try {
      return Promise.resolve(body());
    } catch (error) {
      if (error instanceof AirlockError) return Promise.reject(error);
      return Promise.reject(storageError("the SQLite store failed to complete the operation"));
    }
  }

  async initialize(): Promise<void> {
    if (this.closed) throw storageError("the SQLite store is closed");
    if (this.db !== undefined) return;
    const Driver = loadDriver();
    await this.guard(() => {
      const db = new Driver(this.filename, { timeout: SQLITE_BUSY_TIMEOUT_MS });
      try {
        db.pragma("journal_mode = WAL");
        db.pragma("synchronous = FULL");
        db.pragma("foreign_keys = ON");
        db.exec(SCHEMA);
      } catch (error) {
        db.close();
        throw error;
      }
      this.db = db;
    });
  }

  async close(): Promise<void> {
    this.closed = true;
    const db = this.db;
    this.db = undefined;
    db?.close();
  }

  private insertEvents(
    db: Database,
    scope: string,
    id: string,
    first: number,
    events: readonly NewEvent[],
    at: number,
  ) {
    const insert = db.prepare(
      "INSERT INTO airlock_events (scope, id, sequence, type, data, at) VALUES (?, ?, ?, ?, ?, ?)",
    );
    events.forEach((event, index) => {
      insert.run(scope, id, first + index, event.type, JSON.stringify(event.data), at);
    });
  }

  private readRow(db: Database, scope: string, id: string): StoredRecord | undefined {
    const row = db.prepare("SELECT * FROM airlock_records WHERE scope = ? AND id = ?").get(scope, id);
    return row === undefined ? undefined : recordFromRow(row as Parameters<typeof recordFromRow>[0]);
  }

  create(record: NewRecord): Promise<{ record: StoredRecord; created: boolean }> {
    return this.guard(() => {
      const db = this.open();
      return db
        .transaction(() => {
          const existing = this.readRow(db, record.scope, record.id);
          if (existing !== undefined) return { record: existing, created: false };
          const now = Date.now();
          const events = record.events ?? [];
          db.prepare(
            "INSERT INTO airlock_records (scope, id, kind, idempotency_key, definition_hash, version, status, event_count, state, updated_at) VALUES (?, ?, ?, ?, ?, 1, ?, ?, ?, ?)",
          ).run(
            record.scope,
            record.id,
            record.kind,
            record.idempotencyKey,
            record.definitionHash,
            statusOf(record.state),
            events.length,
            serializeState(record.state),
            now,
          );
          this.insertEvents(db, record.scope, record.id, 1, events, now);
          return { record: { ...record, version: 1, state: record.state } as StoredRecord, created: true };
        })
        .immediate();
    });
  }

  read(scope: string, id: string): Promise<StoredRecord | undefined> {
    return this.guard(() => this.readRow(this.open(), scope, id));
  }

  mutate(scope: string, id: string, change: Mutation): Promise<{ record: StoredRecord; changed: boolean } | undefined> {
    return this.guard(() => {
      const db = this.open();
      return db
        .transaction(() => {
          const row = db.prepare("SELECT * FROM airlock_records WHERE scope = ? AND id = ?").get(scope, id) as
            | (Parameters<typeof recordFromRow>[0] & { event_count: number })
            | undefined;
          if (row === undefined) return undefined;
          const current = recordFromRow(row);
          const now = Date.now();
          const next = change(current, now);
          if (next === null) return { record: current, changed: false };
          const version = current.version + 1;
          db.prepare(
            "UPDATE airlock_records SET version = ?, status = ?, event_count = ?, state = ?, updated_at = ? WHERE scope = ? AND id = ?",
          ).run(
            version,
            statusOf(next.state),
            row.event_count + next.events.length,
            serializeState(next.state),
            now,
            scope,
            id,
          );
          this.insertEvents(db, scope, id, row.event_count + 1, next.events, now);
          return { record: { ...current, version, state: next.state }, changed: true };
        })
        .immediate();
    });
  }

  events(scope: string, id: string, after: number, limit: number): Promise<ReturnType<typeof eventFromRow>[]> {
    return this.guard(() =>
      this.open()
        .prepare(
          "SELECT sequence, type, data, at FROM airlock_events WHERE scope = ? AND id = ? AND sequence > ? ORDER BY sequence LIMIT ?",
        )
        .all(scope, id, after, Math.min(limit, MAX_EVENTS_PER_READ))
        .map((row) => eventFromRow(row as Parameters<typeof eventFromRow>[0])),
    );
  }

  list(query: RecordListQuery): Promise<StoredRecord[]> {
    return this.guard(() => {
      const where: string[] = [];
      const params: unknown[] = [];
      if (query.kind !== undefined) {
        where.push("kind = ?");
        params.push(query.kind);
      }
      if (query.status !== undefined) {
        where.push("status = ?");
        params.push(query.status);
      }
      const sql = `SELECT * FROM airlock_records ${where.length > 0 ? `WHERE ${where.join(" AND ")}` : ""} ORDER BY updated_at DESC, id LIMIT ?`;
      return this.open()
        .prepare(sql)
        .all(...params, Math.min(query.limit, MAX_LIST_RECORDS))
        .map((row) => recordFromRow(row as Parameters<typeof recordFromRow>[0]));
    });
  }
}

/** The embedded store: call `initialize()` before use and `close()` when done. */
export function createSqliteStore(options: SqliteStoreOptions): WorkflowStore {
  // Bad options are INVALID_INPUT, as Mayura's stores answer them.
  const refuse = (message: string) => new AirlockError("INVALID_INPUT", message);
  if (typeof options !== "object" || options === null) throw refuse("createSqliteStore needs { filename }");
  const unknown = unknownOption(options, "createSqliteStore", OPTION_KEYS);
  if (unknown !== undefined) throw refuse(unknown);
  const { filename } = options;
  if (typeof filename !== "string" || filename.length === 0 || filename.includes("\0")) {
    throw refuse("filename must be a non-empty path (or ':memory:') without NUL bytes");
  }
  loadDriver();
  return makeWorkflowStore(new SqliteEngine(filename));
}
