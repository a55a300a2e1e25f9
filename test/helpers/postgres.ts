/**
 * The PostgreSQL server tests use: its URL comes from AIRLOCK_TEST_POSTGRES_URL (`.ci/run` starts one). Without it the
 * PostgreSQL tests skip with one printed line, unless AIRLOCK_REQUIRE_SYSTEM_TOOLS=1, when they fail instead.
 */
import { randomBytes } from "node:crypto";
import pg from "pg";

export const POSTGRES_URL = process.env.AIRLOCK_TEST_POSTGRES_URL;

let told = false;

/** The server's URL, or undefined (after printing once why the PostgreSQL tests skip). */
export function postgresUrl(): string | undefined {
  if (POSTGRES_URL !== undefined && POSTGRES_URL !== "") return POSTGRES_URL;
  if (process.env.AIRLOCK_REQUIRE_SYSTEM_TOOLS === "1") {
    throw new Error(
      "AIRLOCK_REQUIRE_SYSTEM_TOOLS=1 but AIRLOCK_TEST_POSTGRES_URL is not set: start PostgreSQL (see .ci/run)",
    );
  }
  if (!told) {
    told = true;
    console.log(
      "skipping PostgreSQL tests: AIRLOCK_TEST_POSTGRES_URL is not set (apt-get install postgresql, start a server, export its URL; .ci/run does)",
    );
  }
  return undefined;
}

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
