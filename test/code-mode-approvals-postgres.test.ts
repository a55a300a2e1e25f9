/**
 * Single-call approvals on a PostgreSQL store that workers on other machines share: an approval's expiry is the
 * database's time, like every other time the store keeps, so a worker whose clock is off does not shorten or stretch
 * it. (On SQLite the store's clock is the process's own, so there is nothing to differ.)
 */
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
// @ts-expect-error: a plain-JavaScript fixture shared with the crash tests' child process.
import { approveAndResume, context, makeRefund } from "./fixtures/workflows/approval-child.mjs";
import { dropSchema, freshSchema } from "./helpers/postgres.ts";
import { requirePostgres } from "./helpers/system-tools.ts";

const url = await requirePostgres();
/** Further off than the default approval lifetime (1 hour), so that a local-clock expiry would already have passed. */
const SKEW_MS = 2 * 60 * 60 * 1000;

describe.skipIf(url === undefined)("PostgreSQL: single-call approvals and a worker's clock", () => {
  let schema: string;
  let directory: string;
  let log: string;
  beforeEach(async () => {
    schema = freshSchema("airlock_approval_clock");
    directory = await mkdtemp(join(tmpdir(), "airlock-approval-clock-"));
    log = join(directory, "effects.log");
    await writeFile(log, "");
  });
  afterEach(async () => {
    vi.restoreAllMocks();
    await dropSchema(url as string, schema);
    await rm(directory, { recursive: true, force: true });
  });

  it("lets a person approve a call paused by a worker whose clock is two hours behind the database's", async () => {
    const realNow = Date.now.bind(Date);
    vi.spyOn(Date, "now").mockImplementation(() => realNow() - SKEW_MS);
    const { store, adapter, mode, program } = makeRefund({ store: "postgres", url, schema }, log);
    await store.initialize();
    try {
      const waiting = await mode.execute(program, { order: "o-1" }, context);
      expect(waiting).toMatchObject({ status: "waiting" });
      // The expiry is the database's now plus the lifetime, not the worker's.
      expect(waiting.approval.expiresAt).toBeGreaterThan(realNow());
      expect(await approveAndResume(mode, program, waiting.approval.digest)).toMatchObject({
        status: "succeeded",
        output: { status: "succeeded", code: null },
      });
      expect(await readFile(log, "utf8")).toBe("lookup\nrefund\n");
    } finally {
      await adapter.close();
      await store.close();
    }
  });
});
