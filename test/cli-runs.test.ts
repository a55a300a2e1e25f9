/**
 * The operator commands on a durable store: `airlock runs list|show`, `airlock approvals list`, `airlock approve` and
 * `airlock reject`, run as a shell would, against a SQLite file that a workflow runtime and a code mode wrote.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Budget, defineTool, invokeTool, type Tool, z } from "airlock-codemode";
import { createQuickJsSandboxAdapter } from "airlock-codemode/adapter-code-quickjs";
import { createCodeMode, defineCodeProgram } from "airlock-codemode/code-mode";
import { createScheduledWorkflowRuntime, defineWorkflow } from "airlock-codemode/workflows";
import { createSqliteStore } from "airlock-codemode/workflows/sqlite";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { assertCliBuilt, runCli } from "./helpers/cli.ts";

const scope = { principalId: "ops", projectId: "billing" };
let directory: string;
let filename: string;
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
  limits: {
    cpuMillis: 500,
    wallTimeMillis: 10_000,
    memoryBytes: 16 * 1024 * 1024,
    scratchBytes: 0,
    maxInputBytes: 1_024,
    maxOutputBytes: 1_024,
    maxToolInputBytes: 1_024,
    maxToolCalls: 2,
    maxToolConcurrency: 1,
  },
});
const verifyHuman = async (credential: unknown) => {
  if (credential !== "token-of-ana") throw new Error("unknown");
  return { id: "ana", projectId: "billing", canApprove: true };
};
let runId: string;

beforeAll(async () => {
  assertCliBuilt();
  directory = await mkdtemp(join(tmpdir(), "airlock-cli-runs-"));
  filename = join(directory, "state.sqlite");
  verifier = join(directory, "verifier.mjs");
  await writeFile(
    verifier,
    `export async function verifyHuman(credential) {
      if (credential !== "token-of-ana") throw new Error("unknown");
      return { id: "ana", projectId: "billing", canApprove: true };
    }\n`,
  );
  const store = createSqliteStore({ filename });
  await store.initialize();
  const runtime = createScheduledWorkflowRuntime({
    store,
    workerId: "w",
    scope,
    permissions: { allow: ["tool:mail.send", "effect:write"] },
    policyVersion: "1",
    maxCostMicros: 10,
  });
  runId = (await runtime.submit(definition, { input: { to: "a@example.org" }, idempotencyKey: "remind-1" })).id;
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
});
afterAll(async () => {
  await adapter.close();
  await rm(directory, { recursive: true, force: true });
});

describe("airlock runs, approvals, approve, reject", () => {
  it("lists runs and paused programs, shows one, and lists what waits for a person", async () => {
    const list = await runCli(["runs", "list", "--store", filename]);
    expect(list.code).toBe(0);
    expect(list.stdout).toContain(runId);
    expect(list.stdout).toContain("billing.remind@1");
    expect(list.stdout).toContain("mail-1");
    const json = JSON.parse((await runCli(["runs", "list", "--store", filename, "--json"])).stdout);
    expect(json).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ kind: "workflow", id: runId, status: "waiting" }),
        expect.objectContaining({ kind: "program", id: "mail-1", status: "waiting" }),
      ]),
    );
    const shown = JSON.parse((await runCli(["runs", "show", runId.slice(0, 12), "--store", filename])).stdout);
    expect(shown).toMatchObject({
      kind: "workflow",
      id: runId,
      status: "waiting",
      steps: { first: { status: "waiting" } },
    });
    expect(shown.events.length).toBeGreaterThan(0);
    const program = JSON.parse((await runCli(["runs", "show", "mail-1", "--store", filename])).stdout);
    expect(program).toMatchObject({ kind: "program", status: "waiting" });
    const waiting = JSON.parse((await runCli(["approvals", "list", "--store", filename, "--json"])).stdout);
    expect(waiting).toHaveLength(3);
    expect(waiting).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ kind: "workflow", run: runId, node: "first", tool: "mail.send@1" }),
        expect.objectContaining({ kind: "program", run: "mail-1", node: "call:1", tool: "mail.send@1" }),
      ]),
    );
  });

  it("approves and rejects with the person's credential from the environment, and refuses what does not check", async () => {
    const waiting = JSON.parse((await runCli(["approvals", "list", "--store", filename, "--json"])).stdout) as {
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
      return runCli([verb, run, node, "--digest", digest, "--verifier", verifier, "--store", filename]);
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
    expect((await runCli(["approve", runId, "first", "--digest", "xyz", "--store", filename])).code).toBe(2);
    expect((await runCli(["runs", "list", "--store", join(directory, "missing.sqlite")])).code).toBe(2);
    delete process.env.AIRLOCK_APPROVER_CREDENTIAL;

    // What the operator decided is what the application's runtime and code mode then see.
    const store = createSqliteStore({ filename });
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
