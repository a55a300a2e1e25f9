/** The workflow store conformance suite on PostgreSQL (a fresh schema per test); skips without a server. */
import { createPostgresStore } from "airlock-codemode/workflows/postgres";
import { describe } from "vitest";
import { dropSchema, freshSchema, query } from "./helpers/postgres.ts";
import { requirePostgres } from "./helpers/system-tools.ts";
import { workflowConformance } from "./helpers/workflow-conformance.ts";

const url = await requirePostgres();

describe.skipIf(url === undefined)("PostgreSQL", () => {
  workflowConformance("PostgreSQL", async () => {
    const connectionString = url as string;
    const schema = freshSchema();
    return {
      store: createPostgresStore({ connectionString, schema }),
      open: async () => createPostgresStore({ connectionString, schema }),
      async tamper(scope, id, edit) {
        const rows = await query(
          connectionString,
          `SELECT state FROM "${schema}".airlock_records WHERE scope = $1 AND id = $2`,
          [scope, id],
        );
        const state = JSON.parse(rows[0]?.state as string);
        edit(state);
        await query(
          connectionString,
          `UPDATE "${schema}".airlock_records SET state = $3 WHERE scope = $1 AND id = $2`,
          [scope, id, JSON.stringify(state)],
        );
      },
      cleanup: () => dropSchema(connectionString, schema),
    };
  });
});
