/**
 * The operator commands on a durable store: `airlock runs list|show`, `airlock approvals list`, `airlock approve` and
 * `airlock reject`, run as a shell would, against a store that a workflow runtime and a code mode wrote: a SQLite
 * file, and a PostgreSQL schema (`--store postgres://... --schema <name>`; skipped with a printed line without a
 * server).
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Budget, defineTool, invokeTool, type Tool, z } from "airlock-codemode";
import { createQuickJsSandboxAdapter } from "airlock-codemode/adapter-code-quickjs";
import { createCodeMode, defineCodeProgram } from "airlock-codemode/code-mode";
import { createScheduledWorkflowRuntime, defineWorkflow, type WorkflowStore } from "airlock-codemode/workflows";
import { createPostgresStore } from "airlock-codemode/workflows/postgres";
import { createSqliteStore } from "airlock-codemode/workflows/sqlite";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { assertCliBuilt, runCli } from "./helpers/cli.ts";
import { testLimits } from "./helpers/code-mode.ts";
import { dropSchema, freshSchema } from "./helpers/postgres.ts";
import { requirePostgres } from "./helpers/system-tools.ts";

const url = await requirePostgres();

const scope = { principalId: "ops", projectId: "billing" };
let directory: string;
let verifier: string;
const adapter = createQuickJsSandboxAdapter({ poolSize: 1 });
let effects = 0;

const send = defineTool({
  id: "mail.send",
  version: "1",
  description: "Sends a mail.",
  input: z.object({ to: z.string() }),
  output: z.object({ sent: z.boolean() }),
  effects: "write",
  capabilities: [],
  costMicros: 1,
  approval: "always",
  execute: () => {
    effects++;
    return { sent: true };
  },
}) as Tool;
const definition = defineWorkflow({
  id: "billing.remind",
  version: "1",
  input: z.object({ to: z.string() }),
  output: z.unknown(),
  nodes: [
    { kind: "tool", id: "first", tool: send, input: { kind: "input", path: [] }, approval: true },
    { kind: "tool", id: "second", tool: send, input: { kind: "input", path: [] }, approval: true },
  ],
  result: { kind: "step", stepId: "first", path: [] },
});
const program = defineCodeProgram({
  id: "billing.mail",
  version: "1",
  intent: "Send one mail.",
  language: "javascript",
  source: `async (input, tools) => (await tools.call("mail.send", { to: input.to })).status`,
  input: z.object({ to: z.string() }),
  output: z.string(),
  inputSchemaId: "mail.in",
  outputSchemaId: "mail.out",
  tools: [send],
  limits: testLimits({ maxToolCalls: 2 }),
});
const verifyHuman = async (credential: unknown) => {
  if (credential !== "token-of-ana") throw new Error("unknown");
  return { id: "ana", projectId: "billing", canApprove: true };
};
beforeAll(async () => {
  assertCliBuilt();
  directory = await mkdtemp(join(tmpdir(), "airlock-cli-runs-"));
  verifier = join(directory, "verifier.mjs");
  await writeFile(
    verifier,
    `export async function verifyHuman(credential) {
      if (credential !== "token-of-ana") throw new Error("unknown");
      return { id: "ana", projectId: "billing", canApprove: true };
    }\n`,
  );
});
afterAll(async () => {
  await adapter.close();
  await rm(directory, { recursive: true, force: true });
});

/** A store the commands are pointed at: how the command line names it, and how the application opens it. */
interface Backing {
  args: string[];
  open(): WorkflowStore;
  cleanup(): Promise<void>;
}

/** A waiting workflow run (two approved steps) and a program paused at its call, written as an application would. */
async function seed(store: WorkflowStore): Promise<string> {
  await store.initialize();
  const runtime = createScheduledWorkflowRuntime({
    store,
    workerId: "w",
    scope,
    permissions: { allow: ["tool:mail.send", "effect:write"] },
    policyVersion: "1",
    maxCostMicros: 10,
  });
  const runId = (await runtime.submit(definition, { input: { to: "a@example.org" }, idempotencyKey: "remind-1" })).id;
  await runtime.runUntilSettled(definition, runId);
  const budget = new Budget(10, 10);
  const mode = createCodeMode({
    adapter,
    invokeTool: (tool, input, context) =>
      invokeTool(tool, input, { ...context, permissions: { allow: ["tool:mail.send", "effect:write"] }, budget }),
    approvals: { store, verifyHuman },
  });
  expect(
    (
      await mode.execute(
        program,
        { to: "b@example.org" },
        { runId: "r", executionId: "mail-1", scope, signal: new AbortController().signal },
      )
    ).status,
  ).toBe("waiting");
  await runtime.close();
  await store.close();
  return runId;
}

describe("on a SQLite file", () => {
  // The top-level beforeAll has made the directory by the time any of these runs.
  const file = () => join(directory, "state.sqlite");
  storeCommands({
    get args() {
      return ["--store", file()];
    },
    open: () => createSqliteStore({ filename: file() }),
    cleanup: async () => {},
  });

  it("refuses a store file that does not exist (usage, 2) rather than making an empty one", async () => {
    expect((await runCli(["runs", "list", "--store", join(directory, "missing.sqlite")])).code).toBe(2);
    expect((await runCli(["runs", "list", "--store", file(), "--schema", "airlock"])).code).toBe(2);
  });
});

describe.skipIf(url === undefined)("on PostgreSQL (--store <url> --schema <name>)", () => {
  const schema = freshSchema("airlock_cli");
  storeCommands({
    args: ["--store", url as string, "--schema", schema],
    open: () => createPostgresStore({ connectionString: url as string, schema }),
    cleanup: () => dropSchema(url as string, schema),
  });

  it("refuses a bad schema name as usage (2), and reports a server it cannot reach, without its password", async () => {
    const bad = await runCli(["runs", "list", "--store", url as string, "--schema", "Not-A-Name"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("--schema must be");
    const unreachable = await runCli(["approvals", "list", "--store", "postgres://ops:SECRET@127.0.0.1:1/db"]);
    expect(unreachable.code).toBe(1);
    expect(unreachable.stderr).toContain("STORAGE_UNAVAILABLE");
    expect(unreachable.stderr).not.toContain("SECRET");
    expect(unreachable.stderr).not.toContain("    at ");
  });

  it("shows nothing of another schema's runs", async () => {
    const other = freshSchema("airlock_cli_other");
    try {
      const list = await runCli(["runs", "list", "--store", url as string, "--schema", other, "--json"]);
      expect(list.code).toBe(0);
      expect(JSON.parse(list.stdout)).toEqual([]);
    } finally {
      await dropSchema(url as string, other);
    }
  });
});

function storeCommands(backing: Backing) {
  let runId = "";
  beforeAll(async () => {
    effects = 0;
    runId = await seed(backing.open());
  }, 60_000);
  afterAll(() => backing.cleanup());

  describe("airlock runs, approvals, approve, reject", () => {
    it("lists runs and paused programs, shows one, and lists what waits for a person", async () => {
      const list = await runCli(["runs", "list", ...backing.args]);
      expect(list.code).toBe(0);
      expect(list.stdout).toContain(runId);
      expect(list.stdout).toContain("billing.remind@1");
      expect(list.stdout).toContain("mail-1");
      const json = JSON.parse((await runCli(["runs", "list", ...backing.args, "--json"])).stdout);
      expect(json).toEqual(
        expect.arrayContaining([
          expect.objectContaining({ kind: "workflow", id: runId, status: "waiting" }),
          expect.objectContaining({ kind: "program", id: "mail-1", status: "waiting" }),
        ]),
      );
      const shown = JSON.parse((await runCli(["runs", "show", runId.slice(0, 12), ...backing.args])).stdout);
      expect(shown).toMatchObject({
        kind: "workflow",
        id: runId,
        status: "waiting",
        steps: { first: { status: "waiting" } },
      });
      expect(shown.events.length).toBeGreaterThan(0);
      const program = JSON.parse((await runCli(["runs", "show", "mail-1", ...backing.args])).stdout);
      expect(program).toMatchObject({ kind: "program", status: "waiting" });
      const waiting = JSON.parse((await runCli(["approvals", "list", ...backing.args, "--json"])).stdout);
      expect(waiting).toHaveLength(3);
      expect(waiting).toEqual(
        expect.arrayContaining([
          expect.objectContaining({ kind: "workflow", run: runId, node: "first", tool: "mail.send@1" }),
          expect.objectContaining({ kind: "program", run: "mail-1", node: "call:1", tool: "mail.send@1" }),
        ]),
      );
    });

    it("approves and rejects with the person's credential from the environment, and refuses what does not check", async () => {
      const waiting = JSON.parse((await runCli(["approvals", "list", ...backing.args, "--json"])).stdout) as {
        run: string;
        node: string;
        digest: string;
      }[];
      const first = waiting.find((row) => row.node === "first") as { digest: string };
      const second = waiting.find((row) => row.node === "second") as { digest: string };
      const call = waiting.find((row) => row.run === "mail-1") as { digest: string };
      const decide = (verb: string, run: string, node: string, digest: string, credential?: string) => {
        if (credential === undefined) delete process.env.AIRLOCK_APPROVER_CREDENTIAL;
        else process.env.AIRLOCK_APPROVER_CREDENTIAL = credential;
        return runCli([verb, run, node, "--digest", digest, "--verifier", verifier, ...backing.args]);
      };
      expect((await decide("approve", runId, "first", first.digest)).code).toBe(2);
      const forged = await decide("approve", runId, "first", first.digest, "token-of-eve");
      expect(forged.code).toBe(1);
      expect(forged.stderr).toContain("PERMISSION_DENIED");
      expect(forged.stderr).not.toContain("token-of-eve");
      const wrong = await decide("approve", runId, "first", "a".repeat(64), "token-of-ana");
      expect(wrong.code).toBe(1);
      expect(wrong.stderr).toContain("CONFLICT");
      expect((await decide("approve", runId, "first", first.digest, "token-of-ana")).code).toBe(0);
      expect((await decide("reject", runId, "second", second.digest, "token-of-ana")).code).toBe(0);
      expect((await decide("approve", "mail-1", "call:1", call.digest, "token-of-ana")).code).toBe(0);
      expect((await runCli(["approve", runId, "first", "--digest", "xyz", ...backing.args])).code).toBe(2);
      delete process.env.AIRLOCK_APPROVER_CREDENTIAL;

      // What the operator decided is what the application's runtime and code mode then see.
      const store = backing.open();
      await store.initialize();
      const runtime = createScheduledWorkflowRuntime({
        store,
        workerId: "w2",
        scope,
        permissions: { allow: ["tool:mail.send", "effect:write"] },
        policyVersion: "1",
        maxCostMicros: 10,
      });
      const result = await runtime.runUntilSettled(definition, runId);
      // A rejected step ends the run: a step not started yet does not start, approved or not.
      expect(result.status).toBe("blocked");
      expect(result.steps.first).toMatchObject({ status: "approved", approval: { humanId: "ana" } });
      expect(result.steps.second).toMatchObject({ status: "blocked", approval: { humanId: "ana" } });
      const mode = createCodeMode({
        adapter,
        invokeTool: (tool, input, context) =>
          invokeTool(tool, input, {
            ...context,
            permissions: { allow: ["tool:mail.send", "effect:write"] },
            budget: new Budget(10, 10),
          }),
        approvals: { store, verifyHuman },
      });
      expect(
        await mode.resume(
          program,
          { to: "b@example.org" },
          { runId: "r", executionId: "mail-1", scope, signal: new AbortController().signal },
        ),
      ).toMatchObject({
        status: "succeeded",
        output: "succeeded",
      });
      expect(effects).toBe(1);
      await runtime.close();
      await store.close();
    });
  });
}
