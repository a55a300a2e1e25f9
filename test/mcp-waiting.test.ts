/**
 * Runs that wait for a person: a gateway with a durable store, and a client that cannot be asked (no elicitation).
 * A call that needs approval makes the run wait; `airlock approve` or `airlock reject` (the CLI, as a person runs
 * it, with the credential in the environment) decides; `execute` with `resume` continues the run without sending any
 * earlier call again. Real parts only: `airlock serve --store` from its build over stdio (killed and started again on
 * the same store), the gateway's Streamable HTTP server in this process, the official SDK's `Client`, a real SQLite
 * store (and a PostgreSQL schema for one flow, skipped with a printed line without a server), and real upstream MCP
 * servers that write down every call they get.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { type ExecuteStructuredResult, McpGateway, serveGatewayHttp } from "airlock-codemode/mcp";
import { createSqliteStore } from "airlock-codemode/workflows/sqlite";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { startAuthorizationServer } from "./fixtures/mcp/authorization-server.ts";
import { REPO_ROOT, recordedCalls, tempFolder } from "./fixtures/mcp/servers.ts";
import { assertCliBuilt, runCli } from "./helpers/cli.ts";
import { dropSchema, freshSchema } from "./helpers/postgres.ts";
import { requirePostgres } from "./helpers/system-tools.ts";

const postgresUrl = await requirePostgres();

const CLI = join(REPO_ROOT, "dist", "cli", "main.js");
const RECORDING = join(REPO_ROOT, "test", "fixtures", "mcp", "recording-server.mjs");
const CREDENTIAL_ENV = "AIRLOCK_APPROVER_CREDENTIAL";
const LINE_START = `${CREDENTIAL_ENV}=<the person's credential> airlock `;

type Answer = CallToolResult & { structuredContent: ExecuteStructuredResult };

let folder: { dir: string; cleanup: () => void };
let configPath = "";
let storePath = "";
let verifierPath = "";
const logs = { mail: "", notes: "" };

beforeAll(() => {
  assertCliBuilt();
  folder = tempFolder();
  for (const name of Object.keys(logs) as (keyof typeof logs)[]) logs[name] = join(folder.dir, `${name}.jsonl`);
  configPath = join(folder.dir, "mcp.json");
  storePath = join(folder.dir, "runs.sqlite");
  verifierPath = join(folder.dir, "verifier.mjs");
  writeFileSync(
    configPath,
    JSON.stringify({
      mcpServers: {
        mail: { command: process.execPath, args: [RECORDING, logs.mail], approval: ["send_mail"] },
        notes: { command: process.execPath, args: [RECORDING, logs.notes] },
      },
    }),
  );
  // The deployment's verifyHuman: one person of project "airlock" (the gateway's default scope) may approve.
  writeFileSync(
    verifierPath,
    `export async function verifyHuman(credential) {
  if (credential !== "token-of-ana") throw new Error("unknown credential");
  return { id: "ana", projectId: "airlock", canApprove: true };
}\n`,
  );
});
afterAll(() => folder?.cleanup());
beforeEach(() => {
  for (const file of Object.values(logs)) writeFileSync(file, "");
});

/** The calls a server got, in order. */
function sent(server: keyof typeof logs) {
  return recordedCalls(logs[server]);
}

function textOf(result: CallToolResult): string {
  return result.content
    .filter((block) => block.type === "text")
    .map((block) => (block as { text: string }).text)
    .join("\n");
}

async function execute(client: Client, code: string, resume?: string): Promise<Answer> {
  const args = resume === undefined ? { code } : { code, resume };
  return (await client.callTool({ name: "execute", arguments: args })) as never;
}

/** Runs a decision line of a waiting answer exactly as shown, as a person would, with their credential. */
async function decide(line: string, credential = "token-of-ana") {
  expect(line.startsWith(LINE_START)).toBe(true);
  const previous = process.env[CREDENTIAL_ENV];
  process.env[CREDENTIAL_ENV] = credential;
  try {
    return await runCli(line.slice(LINE_START.length).split(" "));
  } finally {
    if (previous === undefined) delete process.env[CREDENTIAL_ENV];
    else process.env[CREDENTIAL_ENV] = previous;
  }
}

/** One `airlock serve` child over stdio, with a client without elicitation. */
async function serveStdio(extra: string[] = ["--store", storePath, "--verifier", verifierPath]) {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [CLI, "serve", "--config", configPath, ...extra],
    stderr: "pipe",
  });
  const client = new Client({ name: "waiting-test", version: "1.0.0" }, { capabilities: {} });
  await client.connect(transport);
  return { client, transport };
}

/** Runs `body` against a new `airlock serve` child, closed after it. */
async function withGateway<T>(body: (gateway: Awaited<ReturnType<typeof serveStdio>>) => Promise<T>, extra?: string[]) {
  const gateway = await serveStdio(extra);
  try {
    return await body(gateway);
  } finally {
    await gateway.client.close();
  }
}

const CODE = [
  'const inbox = await tools.notes__read_inbox({ folder: "in" });',
  'const mail = await tools.mail__send_mail({ to: "ana@example.com", subject: "Lunch" });',
  'const note = await tools.notes__send_mail({ note: "mailed ana" });',
  "text('inbox ' + inbox.sent.tool);",
  "return { mail: mail.sent, note: note.sent.arguments };",
].join("\n");
const MAIL = { tool: "send_mail", arguments: { to: "ana@example.com", subject: "Lunch" } };
const INBOX = { tool: "read_inbox", arguments: { folder: "in" } };
const NOTE = { tool: "send_mail", arguments: { note: "mailed ana" } };

/** Checks a waiting answer for CODE's mail call and gives its `waiting` part. */
function expectWaiting(answer: Answer) {
  expect(answer.isError).toBeFalsy();
  const waiting = answer.structuredContent.waiting;
  expect(waiting).toMatchObject({
    run: expect.stringMatching(/^gw-[0-9a-f-]{36}$/),
    call: 2,
    server: "mail",
    tool: "send_mail",
    arguments: MAIL.arguments,
    digest: expect.stringMatching(/^[0-9a-f]{64}$/),
    argumentsDigest: expect.stringMatching(/^[0-9a-f]{64}$/),
  });
  const w = waiting as NonNullable<typeof waiting>;
  expect(Date.parse(w.expiresAt)).toBeGreaterThan(Date.now());
  expect(w.approve).toBe(
    `${LINE_START}approve ${w.run} call:2 --digest ${w.digest} --store ${storePath} --verifier ${verifierPath}`,
  );
  expect(w.reject).toBe(w.approve.replace(" approve ", " reject "));
  const text = textOf(answer);
  expect(text).toContain(`Run: ${w.run}`);
  expect(text).toContain(w.approve);
  expect(text).toContain(`"resume": "${w.run}"`);
  return w;
}

describe("over stdio (airlock serve --store)", () => {
  let gateway: Awaited<ReturnType<typeof serveStdio>>;
  beforeAll(async () => {
    gateway = await serveStdio();
  }, 60_000);
  afterAll(() => gateway?.client.close());

  it("waits at the call, lists it, and after airlock approve resumes without sending an earlier call again", async () => {
    const first = await execute(gateway.client, CODE);
    const waiting = expectWaiting(first);
    expect(sent("notes")).toEqual([INBOX]);
    expect(sent("mail")).toEqual([]);

    const listed = await runCli(["approvals", "list", "--store", storePath, "--json"]);
    expect(listed.code).toBe(0);
    expect(JSON.parse(listed.stdout)).toContainEqual(
      expect.objectContaining({ kind: "program", run: waiting.run, node: "call:2", digest: waiting.digest }),
    );
    // The store shows the call's exact arguments to whoever decides.
    const shown = await runCli(["runs", "show", waiting.run, "--store", storePath]);
    expect(shown.code).toBe(0);
    expect(JSON.parse(shown.stdout)).toMatchObject({
      status: "waiting",
      scope: { principalId: "airlock-gateway", projectId: "airlock" },
      pending: { n: 2, toolId: "mail__send_mail", digest: waiting.digest, input: MAIL.arguments },
    });
    // Another person's credential is refused, and changes nothing.
    expect((await decide(waiting.approve, "token-of-eve")).code).toBe(1);

    const approved = await decide(waiting.approve);
    expect(approved.stderr).toBe("");
    expect(approved.code).toBe(0);
    expect(approved.stdout).toContain(`approved call:2 of execution ${waiting.run}`);

    const resumed = await execute(gateway.client, CODE, waiting.run);
    expect(resumed.isError).toBeFalsy();
    expect(resumed.structuredContent.value).toEqual({ mail: MAIL, note: NOTE.arguments });
    expect(resumed.structuredContent.output).toBe("inbox read_inbox");
    expect(sent("notes")).toEqual([INBOX, NOTE]);
    expect(sent("mail")).toEqual([MAIL]);

    // The run is over: resuming it again sends nothing.
    const again = await execute(gateway.client, CODE, waiting.run);
    expect(again.isError).toBe(true);
    expect(again.structuredContent.error?.code).toBe("CONFLICT");
    expect(sent("notes")).toEqual([INBOX, NOTE]);
    expect(sent("mail")).toEqual([MAIL]);
  });

  it("gives a rejected call to the script as GUARD_BLOCKED, never sent", async () => {
    const code = [
      "const inbox = await tools.notes__read_inbox({});",
      "try { await tools.mail__send_mail({ to: 'bo' }); return 'sent'; }",
      "catch (error) { return { code: error.code, message: error.message, inbox: inbox.sent.tool }; }",
    ].join("\n");
    const first = await execute(gateway.client, code);
    const waiting = first.structuredContent.waiting as NonNullable<ExecuteStructuredResult["waiting"]>;
    expect(waiting.arguments).toEqual({ to: "bo" });
    const rejected = await decide(waiting.reject);
    expect(rejected.code).toBe(0);
    expect(rejected.stdout).toContain(`rejected call:2 of execution ${waiting.run}`);
    const resumed = await execute(gateway.client, code, waiting.run);
    expect(resumed.structuredContent.value).toEqual({
      code: "GUARD_BLOCKED",
      message: "a person rejected this call",
      inbox: "read_inbox",
    });
    expect(sent("mail")).toEqual([]);
    expect(sent("notes")).toEqual([{ tool: "read_inbox", arguments: {} }]);
  });

  it("asks for each of two calls made at once, one decision each, and finishes", async () => {
    const code = [
      "const [a, b] = await Promise.allSettled([",
      "  tools.mail__send_mail({ to: 'a@example.com' }),",
      "  tools.mail__send_mail({ to: 'b@example.com' }),",
      "]);",
      "return [a.status === 'fulfilled' ? a.value.sent.arguments.to : a.reason.code,",
      "  b.status === 'fulfilled' ? b.value.sent.arguments.to : b.reason.code];",
    ].join("\n");
    const verdicts: Record<string, "approve" | "reject"> = { "a@example.com": "approve", "b@example.com": "reject" };
    let answer = await execute(gateway.client, code);
    const asked: number[] = [];
    while (answer.structuredContent.waiting !== undefined) {
      const waiting = answer.structuredContent.waiting;
      expect(asked.length, "asked more often than there are calls").toBeLessThan(2);
      asked.push(waiting.call);
      // Each pause is about one call, with its own arguments, and nothing was sent for it; after a resume, it is a
      // new request, not the one decided before.
      expect(textOf(answer)).toContain(`The run waits for a person's approval: its call ${waiting.call}`);
      const to = (waiting.arguments as { to: string }).to;
      expect(sent("mail").map((call) => call.arguments)).not.toContainEqual({ to });
      expect((await decide(waiting[verdicts[to] as "approve" | "reject"])).code).toBe(0);
      answer = await execute(gateway.client, code, waiting.run);
    }
    expect(answer.isError).toBeFalsy();
    expect(asked.sort()).toEqual([1, 2]);
    expect(answer.structuredContent.value).toEqual(["a@example.com", "GUARD_BLOCKED"]);
    expect(sent("mail")).toEqual([{ tool: "send_mail", arguments: { to: "a@example.com" } }]);
  });

  it("refuses to resume with other code: INTEGRITY_VIOLATION, nothing sent", async () => {
    const waiting = expectWaiting(await execute(gateway.client, CODE));
    expect((await decide(waiting.approve)).code).toBe(0);
    const other = CODE.replace('"Lunch"', '"Dinner"');
    const refused = await execute(gateway.client, other, waiting.run);
    expect(refused.isError).toBe(true);
    expect(refused.structuredContent.error).toMatchObject({ code: "INTEGRITY_VIOLATION" });
    expect(textOf(refused)).toContain("INTEGRITY_VIOLATION");
    expect(sent("mail")).toEqual([]);
    expect(sent("notes")).toEqual([INBOX]);
    // The approved run still goes on with its own code.
    expect((await execute(gateway.client, CODE, waiting.run)).structuredContent.value).toEqual({
      mail: MAIL,
      note: NOTE.arguments,
    });
    expect(sent("mail")).toEqual([MAIL]);
  });

  it("answers bad resume arguments clearly", async () => {
    const malformed = await execute(gateway.client, CODE, "run-7");
    expect(malformed.isError).toBe(true);
    expect(textOf(malformed)).toContain('"resume" must be the id of a waiting run');
    const unknown = await execute(gateway.client, CODE, "gw-00000000-0000-4000-8000-000000000000");
    expect(unknown.isError).toBe(true);
    expect(unknown.structuredContent.error?.code).toBe("NOT_FOUND");
    expect(textOf(unknown)).toContain("no run gw-00000000-0000-4000-8000-000000000000 in the gateway's store");
    expect(sent("notes")).toEqual([]);
  });

  it("describes resume in execute's schema and description", async () => {
    const { tools } = await gateway.client.listTools();
    const tool = tools.find((t) => t.name === "execute");
    expect(Object.keys(tool?.inputSchema.properties ?? {})).toEqual(["code", "resume"]);
    expect(tool?.description).toContain('"resume": "<id>"');
  });
});

describe("a waiting run across gateway processes (stdio)", () => {
  it("says it still waits while nobody decided, and resumes in a new gateway on the same store", async () => {
    const waiting = await withGateway(async (first) => {
      const waiting = expectWaiting(await execute(first.client, CODE));
      const still = await execute(first.client, CODE, waiting.run);
      expect(still.isError).toBeFalsy();
      expect(textOf(still)).toContain(`Still waiting: nobody has approved or rejected call 2 of run ${waiting.run}`);
      expect(still.structuredContent.waiting).toMatchObject({ run: waiting.run, digest: waiting.digest });
      expect(sent("notes")).toEqual([INBOX]);
      // The gateway dies, as a crash would take it.
      process.kill(first.transport.pid as number, "SIGKILL");
      return waiting;
    });
    expect((await decide(waiting.approve)).code).toBe(0);
    await withGateway(async (second) => {
      const resumed = await execute(second.client, CODE, waiting.run);
      expect(resumed.structuredContent.value).toEqual({ mail: MAIL, note: NOTE.arguments });
    });
    expect(sent("notes")).toEqual([INBOX, NOTE]);
    expect(sent("mail")).toEqual([MAIL]);
  }, 60_000);

  it("resumes in a new gateway with the stored values the run first saw, which a new session does not have", async () => {
    const code = [
      'const to = load("to");',
      "const mail = await tools.mail__send_mail({ to });",
      'store("sent", to);',
      "return mail.sent.arguments;",
    ].join("\n");
    const waiting = await withGateway(async (first) => {
      expect((await execute(first.client, 'store("to", "cy@example.com"); return 1;')).isError).toBeFalsy();
      const waiting = (await execute(first.client, code)).structuredContent.waiting;
      expect(waiting?.arguments).toEqual({ to: "cy@example.com" });
      return waiting as NonNullable<typeof waiting>;
    });
    expect((await decide(waiting.approve)).code).toBe(0);
    await withGateway(async (second) => {
      const resumed = await execute(second.client, code, waiting.run);
      expect(resumed.structuredContent.value).toEqual({ to: "cy@example.com" });
      // The run's writes reach the session that resumed it.
      expect((await execute(second.client, 'return load("sent");')).structuredContent.value).toBe("cy@example.com");
    });
    expect(sent("mail")).toEqual([{ tool: "send_mail", arguments: { to: "cy@example.com" } }]);
  }, 60_000);

  it("says an expired request expired, and sends nothing", async () => {
    const ttl = ["--store", storePath, "--verifier", verifierPath, "--approval-ttl", "1"];
    await withGateway(async (gateway) => {
      const waiting = expectWaitingLoose(await execute(gateway.client, CODE));
      await new Promise((resolve) => setTimeout(resolve, 50));
      const expired = await execute(gateway.client, CODE, waiting.run);
      expect(expired.isError).toBe(true);
      expect(expired.structuredContent.error?.code).toBe("TIMEOUT");
      expect(textOf(expired)).toContain("expired before a person decided");
      // A person who comes too late is told so.
      const late = await decide(waiting.approve);
      expect(late.code).toBe(1);
      expect(sent("mail")).toEqual([]);
      expect(sent("notes")).toEqual([INBOX]);
    }, ttl);
  }, 60_000);

  it("without a store refuses the call as before, says --store makes it wait, and refuses resume", async () => {
    await withGateway(async (gateway) => {
      const refused = await execute(
        gateway.client,
        "try { await tools.mail__send_mail({ to: 'x' }); } catch (error) { return error.code; }",
      );
      expect(refused.structuredContent.value).toBe("GUARD_BLOCKED");
      expect(refused.structuredContent.approvals).toEqual([
        { server: "mail", tool: "send_mail", decision: "unsupported" },
      ]);
      expect(textOf(refused)).toContain("airlock serve --store <file|url>");
      const resume = await execute(gateway.client, CODE, "gw-00000000-0000-4000-8000-000000000000");
      expect(resume.isError).toBe(true);
      expect(textOf(resume)).toContain("it has no store (airlock serve --store <file|url>)");
      expect(sent("mail")).toEqual([]);
      expect(sent("notes")).toEqual([]);
    }, []);
  }, 60_000);
});

describe.skipIf(postgresUrl === undefined)("a waiting run on PostgreSQL (--store <url> --schema <name>)", () => {
  const schema = freshSchema("airlock_gateway");
  afterAll(() => dropSchema(postgresUrl as string, schema));

  it("waits in one gateway, is approved with the line it showed, and resumes in another without sending a call again", async () => {
    const flags = ["--store", postgresUrl as string, "--schema", schema, "--verifier", verifierPath];
    const waiting = await withGateway(async (first) => {
      const answer = await execute(first.client, CODE);
      const waiting = expectWaitingLoose(answer);
      expect(waiting).toMatchObject({ server: "mail", arguments: MAIL.arguments });
      // The line names the same store: its URL and its schema.
      expect(waiting.approve).toBe(
        `${LINE_START}approve ${waiting.run} call:2 --digest ${waiting.digest} --store ${postgresUrl} --schema ${schema} --verifier ${verifierPath}`,
      );
      expect(sent("notes")).toEqual([INBOX]);
      process.kill(first.transport.pid as number, "SIGKILL");
      return waiting;
    }, flags);
    const listed = await runCli(["approvals", "list", "--store", postgresUrl as string, "--schema", schema, "--json"]);
    expect(JSON.parse(listed.stdout)).toEqual([
      expect.objectContaining({ kind: "program", run: waiting.run, node: "call:2", digest: waiting.digest }),
    ]);
    expect((await decide(waiting.approve)).code).toBe(0);
    await withGateway(async (second) => {
      const resumed = await execute(second.client, CODE, waiting.run);
      expect(resumed.structuredContent.value).toEqual({ mail: MAIL, note: NOTE.arguments });
    }, flags);
    expect(sent("notes")).toEqual([INBOX, NOTE]);
    expect(sent("mail")).toEqual([MAIL]);
  }, 60_000);
});

/** A waiting answer whose expiry may already have passed. */
function expectWaitingLoose(answer: Answer) {
  const waiting = answer.structuredContent.waiting;
  expect(waiting).toMatchObject({ call: 2, tool: "send_mail" });
  return waiting as NonNullable<typeof waiting>;
}

/** A gateway in this process on the SQLite store, whose decision lines a person runs as shown. */
async function waitingGateway() {
  const store = createSqliteStore({ filename: storePath });
  await store.initialize();
  const gateway = await McpGateway.start(JSON.parse(readFileSync(configPath, "utf8")), {
    poolSize: 1,
    waiting: {
      store,
      commandLine: ({ verdict, run, node, digest }) =>
        `${LINE_START}${verdict} ${run} ${node} --digest ${digest} --store ${storePath} --verifier ${verifierPath}`,
    },
  });
  return { store, gateway };
}

describe("over Streamable HTTP", () => {
  it("waits, and resumes after airlock approve without sending an earlier call again", async () => {
    const { store, gateway } = await waitingGateway();
    const serving = await serveGatewayHttp(gateway, { port: 0 });
    const client = new Client({ name: "waiting-test", version: "1.0.0" }, { capabilities: {} });
    try {
      await client.connect(new StreamableHTTPClientTransport(new URL(serving.url)));
      const waiting = expectWaiting(await execute(client, CODE));
      expect(sent("notes")).toEqual([INBOX]);
      expect((await decide(waiting.approve)).code).toBe(0);
      const resumed = await execute(client, CODE, waiting.run);
      expect(resumed.structuredContent.value).toEqual({ mail: MAIL, note: NOTE.arguments });
      expect(sent("notes")).toEqual([INBOX, NOTE]);
      expect(sent("mail")).toEqual([MAIL]);
    } finally {
      await client.close();
      await serving.close();
      await gateway.close();
      await store.close();
    }
  }, 60_000);

  it("keeps a waiting run to the OAuth subject that started it: another subject's resume finds no such run", async () => {
    const as = await startAuthorizationServer();
    const { store, gateway } = await waitingGateway();
    const serving = await serveGatewayHttp(gateway, { port: 0, oauth: { issuer: as.issuer } });
    const clientOf = async (sub: string) => {
      const token = await as.sign({ iss: as.issuer, aud: serving.url, sub });
      const client = new Client({ name: `waiting-${sub}`, version: "1.0.0" }, { capabilities: {} });
      await client.connect(
        new StreamableHTTPClientTransport(new URL(serving.url), {
          requestInit: { headers: { authorization: `Bearer ${token}` } },
        }),
      );
      return client;
    };
    const alice = await clientOf("alice");
    const mallory = await clientOf("mallory");
    try {
      const waiting = expectWaiting(await execute(alice, CODE));
      expect((await decide(waiting.approve)).code).toBe(0);
      // Holding the run's id is not enough: its journal, and the results in it, are alice's.
      const stolen = await execute(mallory, CODE, waiting.run);
      expect(stolen.isError).toBe(true);
      expect(stolen.structuredContent.error).toMatchObject({ code: "NOT_FOUND" });
      expect(textOf(stolen)).not.toContain("inbox");
      expect(sent("mail")).toEqual([]);
      const resumed = await execute(alice, CODE, waiting.run);
      expect(resumed.structuredContent.value).toEqual({ mail: MAIL, note: NOTE.arguments });
      expect(sent("notes")).toEqual([INBOX, NOTE]);
      expect(sent("mail")).toEqual([MAIL]);
    } finally {
      await alice.close();
      await mallory.close();
      await serving.close();
      await gateway.close();
      await store.close();
      await as.close();
    }
  }, 60_000);
});
