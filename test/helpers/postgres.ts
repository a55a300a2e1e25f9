/**
 * Schemas and queries for the tests that use a PostgreSQL server. The server's URL comes from `requirePostgres()`
 * (system-tools.ts), which skips those tests with one printed line when there is none (`.ci/run` starts one).
 */
import { randomBytes } from "node:crypto";
import pg from "pg";

/** A schema name no other test uses. */
export function freshSchema(prefix = "airlock_test"): string {
  return `${prefix}_${randomBytes(12).toString("hex")}`;
}

export async function dropSchema(url: string, schema: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  } finally {
    await client.end();
  }
}

export async function query(url: string, sql: string, params: unknown[] = []): Promise<Record<string, unknown>[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query(sql, params)).rows;
  } finally {
    await client.end();
  }
}
