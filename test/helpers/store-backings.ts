/**
 * The two backings of a workflow store, for tests that run on both: a SQLite file, a PostgreSQL schema (skipped with
 * one printed line when there is no server, see system-tools.ts). Each opens new store objects on the same data (as
 * another process would) and reads and writes its rows behind the store's back, as someone with access to the
 * database could.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { WorkflowStore } from "airlock-codemode/workflows";
import { createPostgresStore } from "airlock-codemode/workflows/postgres";
import { createSqliteStore } from "airlock-codemode/workflows/sqlite";
import Database from "better-sqlite3";
import { dropSchema, freshSchema, query } from "./postgres.ts";

export type BackingKind = "SQLite" | "PostgreSQL";

export interface StoreBacking {
  /** A new, initialized store object on the backing's data; closed by `cleanup`. */
  open(): Promise<WorkflowStore>;
  /**
   * Runs `sql` on the database itself: `{records}` and `{events}` name the store's tables, `$1`, `$2`... its
   * parameters, in order.
   */
  sql(sql: string, params?: unknown[]): Promise<Record<string, unknown>[]>;
  cleanup(): Promise<void>;
}

/** A fresh backing of `kind`; PostgreSQL needs `url` (from `requirePostgres()`). */
export async function openBacking(kind: BackingKind, url: string | undefined): Promise<StoreBacking> {
  const stores: WorkflowStore[] = [];
  const opened = async (store: WorkflowStore) => {
    stores.push(store);
    await store.initialize();
    return store;
  };
  const closeAll = async () => {
    for (const store of stores.splice(0)) await store.close();
  };
  if (kind === "SQLite") {
    const directory = await mkdtemp(join(tmpdir(), "airlock-backing-"));
    const filename = join(directory, "state.sqlite");
    return {
      open: () => opened(createSqliteStore({ filename })),
      async sql(text, params = []) {
        const db = new Database(filename);
        try {
          const statement = db.prepare(
            text
              .replaceAll("{records}", "airlock_records")
              .replaceAll("{events}", "airlock_events")
              .replace(/\$\d+/g, "?"),
          );
          if (statement.reader) return statement.all(...params) as Record<string, unknown>[];
          statement.run(...params);
          return [];
        } finally {
          db.close();
        }
      },
      async cleanup() {
        await closeAll();
        await rm(directory, { recursive: true, force: true });
      },
    };
  }
  if (url === undefined) throw new Error("PostgreSQL needs a server URL");
  const schema = freshSchema("airlock_backing");
  return {
    open: () => opened(createPostgresStore({ connectionString: url, schema })),
    sql: (text, params = []) =>
      query(
        url,
        text
          .replaceAll("{records}", `"${schema}".airlock_records`)
          .replaceAll("{events}", `"${schema}".airlock_events`),
        params,
      ),
    async cleanup() {
      await closeAll();
      await dropSchema(url, schema);
    },
  };
}

/** An event as the store's table holds it, its data parsed. */
export interface EventRow {
  scope: string;
  id: string;
  sequence: number;
  type: string;
  data: Record<string, unknown>;
}

/** The one code-mode call journal a backing holds: its record's keys and state, and its events in order. */
export async function journalRows(
  backing: StoreBacking,
): Promise<{ scope: string; id: string; state: Record<string, unknown>; events: EventRow[] }> {
  const [record] = await backing.sql("SELECT scope, id, state FROM {records} WHERE kind = 'code-journal'");
  const events = await backing.sql("SELECT * FROM {events} WHERE scope = $1 AND id = $2 ORDER BY sequence", [
    record?.scope,
    record?.id,
  ]);
  return {
    scope: record?.scope as string,
    id: record?.id as string,
    state: JSON.parse(record?.state as string),
    events: events.map((event) => ({
      scope: event.scope as string,
      id: event.id as string,
      // PostgreSQL gives a BIGINT as a string.
      sequence: Number(event.sequence),
      type: event.type as string,
      data: JSON.parse(event.data as string),
    })),
  };
}
