/**
 * `airlock-codemode/workflows/postgres`: the store that many workers on many machines share. Every state change is one
 * transaction that locks its run's row (`SELECT ... FOR UPDATE`), claims too: workers racing for a run wait only for
 * each other's one short transaction (none spans a tool call), and never both take the same step (the lease's fence).
 * A claim that skipped a locked row instead would find nothing while another worker merely advanced the run, and every
 * worker could so leave a free step behind. Times come from the
 * database's clock, so that leases and approval expiries mean the same on every machine.
 *
 * Why no job library (graphile-worker, pg-boss) holds the leases, measured (docs/design/2026-12-04-leases-not-a-job-library.md): a step must be
 * marked started in the same transaction that checks its lease's fence on the run's row, and a started step whose
 * worker died must never run again, where both libraries own their job rows and retry a job whose worker vanished.
 * graphile-worker (0.17.3, the newest on Node 20; 0.18 needs Node 22.18) frees a SIGKILLed worker's job only after a
 * fixed 4 hours. pg-boss 10.4.2 (the newest on Node 20; 11 needs Node 22, 12 Node 22.12) has no heartbeat: with an
 * expiry short enough to recover in seconds, a live step longer than it was handed out twice. Here a killed worker's
 * step is taken over, or marked unknown, within one lease (2.5-2.7 s at the default 3 s), and a claim costs one
 * transaction (4.7-8.0 ms against pg-boss's fetch at 4.0-8.1 ms on the same server).
 */
import { createRequire } from "node:module";
import type { Pool, PoolClient, PoolConfig } from "pg";
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
  type StoredEvent,
  type StoredRecord,
  serializeState,
  statusOf,
  storageError,
} from "./records.ts";
import { makeWorkflowStore, type WorkflowStore } from "./store.ts";

/** The schema tables go in when `schema` is not given. */
export const DEFAULT_POSTGRES_SCHEMA = "airlock";
/** Connections one store keeps open at most. */
export const POSTGRES_POOL_SIZE = 10;
/** Time to get a connection before the operation fails (STORAGE_UNAVAILABLE). */
export const POSTGRES_CONNECT_TIMEOUT_MS = 10_000;

/** Characters of a connection string. */
export const MAX_CONNECTION_STRING_CHARS = 4_096;

export interface PostgresStoreOptions {
  /**
   * Any form pg reads: `postgres://user:password@host:port/database?sslmode=...` (or `postgresql://`; a socket
   * directory as the host, written `%2Fdir`, or as `?host=/dir`), `socket://user:password@/dir?db=database`, or
   * `/dir database` (a socket directory and a database). Never echoed in errors.
   */
  connectionString: string;
  /** Default `DEFAULT_POSTGRES_SCHEMA`; created if missing. */
  schema?: string;
}

const OPTION_KEYS = optionKeys<PostgresStoreOptions>({ connectionString: true, schema: true });
const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,62}$/;
const URL_FORMS = "a postgres:// or postgresql:// URL, a socket:// URL, or a socket directory and a database";

/**
 * Whether pg reads `text` as the URL it is, as pg's parser does: spaces and stray `%` escaped first, an empty host
 * (`user@/db`: the default host) allowed, its parts %-decoded.
 */
function readsAsUrl(text: string): boolean {
  const escaped = / |%[^a-f0-9]|%[a-f0-9][^a-f0-9]/i.test(text) ? encodeURI(text).replace(/%25(\d\d)/g, "%$1") : text;
  const parse = (value: string) => new URL(value, "postgres://base");
  try {
    let url: URL;
    try {
      url = parse(escaped);
    } catch {
      url = parse(escaped.replace("@/", "@___DUMMY___/"));
    }
    decodeURIComponent(url.username);
    decodeURIComponent(url.password);
    decodeURIComponent(url.hostname);
    decodeURI(url.pathname);
    return true;
  } catch {
    return false;
  }
}

/**
 * Why pg would not read `text` as a connection string, or `undefined`. Forms pg misreads rather than refuses are
 * refused here: another scheme, a bare word, or libpq's `key=value` list (pg takes all of it for a database name on a
 * host named `base`). The answer never quotes the text, which may hold a password.
 */
function connectionStringProblem(text: unknown): string | undefined {
  if (typeof text !== "string" || text.trim().length === 0) return `connectionString must be ${URL_FORMS}`;
  if (text.length > MAX_CONNECTION_STRING_CHARS) {
    return `connectionString must be at most ${MAX_CONNECTION_STRING_CHARS} characters`;
  }
  if (/[\0\r\n]/.test(text)) return "connectionString must not contain NUL bytes or line breaks";
  if (text.startsWith("/")) {
    // pg takes the text up to its first space for the directory and the next word for the database, dropping more.
    return text.split(" ").length <= 2
      ? undefined
      : "a socket connectionString is '<directory> [database]': write further settings as a socket:// URL";
  }
  if (/^\s*[A-Za-z_]+\s*=/.test(text)) {
    return "connectionString is a key=value list, which pg does not read: write it as postgres://user:password@host:port/database";
  }
  const scheme = /^(postgres|postgresql|socket):\/\//i.exec(text)?.[1]?.toLowerCase();
  if (scheme === undefined) return `connectionString must be ${URL_FORMS}`;
  if (!readsAsUrl(text))
    return `connectionString is not a ${scheme}:// URL pg can read (look at its port and % escapes)`;
  return undefined;
}

type PgModule = { Pool: new (config: PoolConfig) => Pool };

function loadDriver(): PgModule {
  try {
    return createRequire(import.meta.url)("pg") as PgModule;
  } catch {
    throw new AirlockError("UNSUPPORTED_PROFILE", "the PostgreSQL store needs the package pg: npm install pg@8");
  }
}

/** Store time in ms: the database's clock at the moment of the statement. */
const NOW = "(extract(epoch from clock_timestamp()) * 1000)::float8";

class PostgresEngine implements RecordEngine {
  private pool: Pool | undefined;
  private closed = false;
  private readonly records: string;
  private readonly events_: string;

  constructor(
    private readonly driver: PgModule,
    private readonly connectionString: string,
    private readonly schema: string,
  ) {
    this.records = `"${schema}".airlock_records`;
    this.events_ = `"${schema}".airlock_events`;
  }

  private open(): Pool {
    if (this.closed) throw storageError("the PostgreSQL store is closed");
    if (this.pool === undefined) throw storageError("the PostgreSQL store is not initialized: call initialize() first");
    return this.pool;
  }

  /** Runs `body` in one transaction on one connection; any database failure is STORAGE_UNAVAILABLE. */
  private async transaction<T>(body: (client: PoolClient) => Promise<T>): Promise<T> {
    let client: PoolClient;
    try {
      client = await this.open().connect();
    } catch (error) {
      if (error instanceof AirlockError) throw error;
      throw storageError("the PostgreSQL store could not get a connection");
    }
    let broken = false;
    try {
      await client.query("BEGIN");
      const result = await body(client);
      await client.query("COMMIT");
      return result;
    } catch (error) {
      try {
        await client.query("ROLLBACK");
      } catch {
        broken = true;
      }
      if (error instanceof AirlockError) throw error;
      throw storageError("the PostgreSQL store failed to complete the operation");
    } finally {
      client.release(broken);
    }
  }

  async initialize(): Promise<void> {
    if (this.closed) throw storageError("the PostgreSQL store is closed");
    if (this.pool !== undefined) return;
    this.pool = new this.driver.Pool({
      connectionString: this.connectionString,
      max: POSTGRES_POOL_SIZE,
      connectionTimeoutMillis: POSTGRES_CONNECT_TIMEOUT_MS,
    });
    // An idle connection that breaks (the server restarted) must not crash the process.
    this.pool.on("error", () => {});
    try {
      await this.transaction(async (client) => {
        // Two processes initializing at once must not race on CREATE ... IF NOT EXISTS.
        await client.query("SELECT pg_advisory_xact_lock(hashtext($1))", [`airlock:${this.schema}`]);
        await client.query(`CREATE SCHEMA IF NOT EXISTS "${this.schema}"`);
        // State and event data are TEXT, not JSONB: JSONB refuses \u0000 in strings and reorders keys, and both
        // stores must give back exactly the JSON they were given.
        await client.query(`CREATE TABLE IF NOT EXISTS ${this.records} (
          scope TEXT NOT NULL,
          id TEXT NOT NULL,
          kind TEXT NOT NULL,
          idempotency_key TEXT NOT NULL,
          definition_hash TEXT NOT NULL,
          version BIGINT NOT NULL,
          status TEXT,
          event_count BIGINT NOT NULL,
          state TEXT NOT NULL,
          updated_at DOUBLE PRECISION NOT NULL,
          PRIMARY KEY (scope, id))`);
        await client.query(
          `CREATE INDEX IF NOT EXISTS airlock_records_listing ON ${this.records} (kind, status, updated_at)`,
        );
        await client.query(`CREATE TABLE IF NOT EXISTS ${this.events_} (
          scope TEXT NOT NULL,
          id TEXT NOT NULL,
          sequence BIGINT NOT NULL,
          type TEXT NOT NULL,
          data TEXT NOT NULL,
          at DOUBLE PRECISION NOT NULL,
          PRIMARY KEY (scope, id, sequence))`);
      });
    } catch (error) {
      const pool = this.pool;
      this.pool = undefined;
      await pool?.end().catch(() => {});
      throw error;
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    const pool = this.pool;
    this.pool = undefined;
    await pool?.end().catch(() => {});
  }

  private async insertEvents(
    client: PoolClient,
    scope: string,
    id: string,
    first: number,
    events: readonly NewEvent[],
    at: number,
  ): Promise<void> {
    if (events.length === 0) return;
    const values: unknown[] = [];
    const rows = events.map((event, index) => {
      values.push(scope, id, first + index, event.type, JSON.stringify(event.data), at);
      const base = index * 6;
      return `($${base + 1}, $${base + 2}, $${base + 3}, $${base + 4}, $${base + 5}, $${base + 6})`;
    });
    await client.query(
      `INSERT INTO ${this.events_} (scope, id, sequence, type, data, at) VALUES ${rows.join(", ")}`,
      values,
    );
  }

  create(record: NewRecord): Promise<{ record: StoredRecord; created: boolean }> {
    return this.transaction(async (client) => {
      const events = record.events ?? [];
      const inserted = await client.query(
        `INSERT INTO ${this.records} (scope, id, kind, idempotency_key, definition_hash, version, status, event_count, state, updated_at)
         VALUES ($1, $2, $3, $4, $5, 1, $6, $7, $8, ${NOW})
         ON CONFLICT (scope, id) DO NOTHING RETURNING updated_at`,
        [
          record.scope,
          record.id,
          record.kind,
          record.idempotencyKey,
          record.definitionHash,
          statusOf(record.state),
          events.length,
          serializeState(record.state),
        ],
      );
      if (inserted.rowCount === 1) {
        const at = Number(inserted.rows[0].updated_at);
        await this.insertEvents(client, record.scope, record.id, 1, events, at);
        return { record: { ...record, version: 1 } as StoredRecord, created: true };
      }
      const existing = await client.query(`SELECT * FROM ${this.records} WHERE scope = $1 AND id = $2`, [
        record.scope,
        record.id,
      ]);
      if (existing.rowCount !== 1) throw storageError("a record that conflicted on insert could not be read");
      return { record: recordFromRow(existing.rows[0]), created: false };
    });
  }

  async read(scope: string, id: string): Promise<StoredRecord | undefined> {
    let rows: unknown[];
    try {
      rows = (await this.open().query(`SELECT * FROM ${this.records} WHERE scope = $1 AND id = $2`, [scope, id])).rows;
    } catch (error) {
      if (error instanceof AirlockError) throw error;
      throw storageError("the PostgreSQL store failed to read a record");
    }
    return rows.length === 0 ? undefined : recordFromRow(rows[0] as Parameters<typeof recordFromRow>[0]);
  }

  mutate(scope: string, id: string, change: Mutation): Promise<{ record: StoredRecord; changed: boolean } | undefined> {
    return this.transaction(async (client) => {
      const locked = await client.query(
        `SELECT *, ${NOW} AS now FROM ${this.records} WHERE scope = $1 AND id = $2 FOR UPDATE`,
        [scope, id],
      );
      if (locked.rowCount !== 1) return undefined;
      const row = locked.rows[0];
      const current = recordFromRow(row);
      const now = Number(row.now);
      const next = change(current, now);
      if (next === null) return { record: current, changed: false };
      const version = current.version + 1;
      const count = Number(row.event_count);
      await client.query(
        `UPDATE ${this.records} SET version = $3, status = $4, event_count = $5, state = $6, updated_at = $7 WHERE scope = $1 AND id = $2`,
        [scope, id, version, statusOf(next.state), count + next.events.length, serializeState(next.state), now],
      );
      await this.insertEvents(client, scope, id, count + 1, next.events, now);
      return { record: { ...current, version, state: next.state }, changed: true };
    });
  }

  async events(scope: string, id: string, after: number, limit: number): Promise<StoredEvent[]> {
    try {
      const result = await this.open().query(
        `SELECT sequence, type, data, at FROM ${this.events_} WHERE scope = $1 AND id = $2 AND sequence > $3 ORDER BY sequence LIMIT $4`,
        [scope, id, after, Math.min(limit, MAX_EVENTS_PER_READ)],
      );
      return result.rows.map((row) => eventFromRow(row));
    } catch (error) {
      if (error instanceof AirlockError) throw error;
      throw storageError("the PostgreSQL store failed to read events");
    }
  }

  async list(query: RecordListQuery): Promise<StoredRecord[]> {
    const where: string[] = [];
    const params: unknown[] = [];
    if (query.kind !== undefined) {
      params.push(query.kind);
      where.push(`kind = $${params.length}`);
    }
    if (query.status !== undefined) {
      params.push(query.status);
      where.push(`status = $${params.length}`);
    }
    params.push(Math.min(query.limit, MAX_LIST_RECORDS));
    try {
      const result = await this.open().query(
        `SELECT * FROM ${this.records} ${where.length > 0 ? `WHERE ${where.join(" AND ")}` : ""} ORDER BY updated_at DESC, id LIMIT $${params.length}`,
        params,
      );
      return result.rows.map((row) => recordFromRow(row));
    } catch (error) {
      if (error instanceof AirlockError) throw error;
      throw storageError("the PostgreSQL store failed to list records");
    }
  }
}

/** The shared store: call `initialize()` (creates the schema's tables if needed) before use and `close()` when done. */
export function createPostgresStore(options: PostgresStoreOptions): WorkflowStore {
  // Bad options are INVALID_INPUT, as Mayura's stores answer them.
  const refuse = (message: string) => new AirlockError("INVALID_INPUT", message);
  if (typeof options !== "object" || options === null) throw refuse("createPostgresStore needs { connectionString }");
  const unknown = unknownOption(options, "createPostgresStore", OPTION_KEYS);
  if (unknown !== undefined) throw refuse(unknown);
  const { connectionString } = options;
  const problem = connectionStringProblem(connectionString);
  if (problem !== undefined) throw refuse(problem);
  const schema = options.schema ?? DEFAULT_POSTGRES_SCHEMA;
  if (typeof schema !== "string" || !SCHEMA_NAME.test(schema)) {
    throw refuse("schema must be 1-63 characters of lower-case letters, digits and _, not starting with a digit");
  }
  return makeWorkflowStore(new PostgresEngine(loadDriver(), connectionString, schema));
}
