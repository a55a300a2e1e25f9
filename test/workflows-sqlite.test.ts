/** The workflow store conformance suite on the embedded SQLite store (a file per test). */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createSqliteStore } from "airlock-codemode/workflows/sqlite";
import Database from "better-sqlite3";
import { workflowConformance } from "./helpers/workflow-conformance.ts";

workflowConformance("SQLite", async () => {
  const directory = await mkdtemp(join(tmpdir(), "airlock-workflows-"));
  const filename = join(directory, "state.sqlite");
  return {
    store: createSqliteStore({ filename }),
    open: async () => createSqliteStore({ filename }),
    async tamper(scope, id, edit) {
      const db = new Database(filename);
      try {
        const row = db.prepare("SELECT state FROM airlock_records WHERE scope = ? AND id = ?").get(scope, id) as {
          state: string;
        };
        const state = JSON.parse(row.state);
        edit(state);
        db.prepare("UPDATE airlock_records SET state = ? WHERE scope = ? AND id = ?").run(
          JSON.stringify(state),
          scope,
          id,
        );
      } finally {
        db.close();
      }
    },
    cleanup: () => rm(directory, { recursive: true, force: true }),
  };
});
