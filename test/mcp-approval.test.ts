/**
 * Approving single upstream calls through the gateway's client: a server's "approval" field, MCP elicitation asked of
 * the session whose execute runs the program, and what is sent. Real parts only: `airlock serve` from its build over
 * stdio and the gateway's Streamable HTTP server in this process, the official SDK's `Client` (with the elicitation
 * capability and without), and a real upstream MCP server that writes down every call it gets.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  type CallToolResult,
  type ElicitRequest,
  ElicitRequestSchema,
  type ElicitResult,
} from "@modelcontextprotocol/sdk/types.js";
import {
  type ExecuteStructuredResult,
  MAX_APPROVAL_ARGUMENTS_CHARS,
  MAX_APPROVAL_RECORDS,
  McpGateway,
  serveGatewayHttp,
} from "airlock-codemode/mcp";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { REPO_ROOT, recordedCalls, tempFolder } from "./fixtures/mcp/servers.ts";

const CLI = join(REPO_ROOT, "dist", "cli", "main.js");
const RECORDING = join(REPO_ROOT, "test", "fixtures", "mcp", "recording-server.mjs");
/** Short enough for the slow person's test, long enough for a person who answers at once on a busy machine. */
const APPROVAL_TIMEOUT_MS = 2_000;

type Params = ElicitRequest["params"];
/** A person at a client: answers each approval request it is shown. */
type Answer = (params: Params, signal: AbortSignal) => Promise<ElicitResult>;

interface Connected {
  client: Client;
  /** Every approval request this client's person was shown, in order. */
  asked: Params[];
  /** Whether the gateway cancelled a request (its signal aborted) while the person had it. */
  cancelled: boolean[];
}

const accept: Answer = async () => ({ action: "accept", content: { approve: true } });
const decline: Answer = async () => ({ action: "decline" });

let folder: { dir: string; cleanup: () => void };
let configPath = "";
const logs = { mail: "", notes: "", archive: "" };

beforeAll(() => {
  folder = tempFolder();
  for (const name of Object.keys(logs) as (keyof typeof logs)[]) logs[name] = join(folder.dir, `${name}.jsonl`);
  configPath = join(folder.dir, "mcp.json");
  writeFileSync(
    configPath,
    JSON.stringify({
      mcpServers: {
        // By the tool's name on the server and by its sandbox name.
        mail: { command: process.execPath, args: [RECORDING, logs.mail], approval: ["send_mail", "mail__delete_mail"] },
        notes: { command: process.execPath, args: [RECORDING, logs.notes] },
        archive: { command: process.execPath, args: [RECORDING, logs.archive], approval: "always" },
      },
    }),
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

function person(client: Client, answer: Answer): Pick<Connected, "asked" | "cancelled"> {
  const asked: Params[] = [];
  const cancelled: boolean[] = [];
  client.setRequestHandler(ElicitRequestSchema, async (request, extra) => {
    const index = asked.push(request.params) - 1;
    cancelled[index] = false;
    extra.signal.addEventListener("abort", () => {
      cancelled[index] = true;
    });
    return answer(request.params, extra.signal);
  });
  return { asked, cancelled };
}

function newClient(elicitation: boolean): Client {
  return new Client(
    { name: "approval-test", version: "1.0.0" },
    elicitation ? { capabilities: { elicitation: {} } } : { capabilities: {} },
  );
}

async function execute(
  client: Client,
  code: string,
): Promise<CallToolResult & { structuredContent: ExecuteStructuredResult }> {
  return (await client.callTool({ name: "execute", arguments: { code } })) as never;
}

function textOf(result: CallToolResult): string {
  return result.content
    .filter((block) => block.type === "text")
    .map((block) => (block as { text: string }).text)
    .join("\n");
}

/** One way to reach the gateway: `connect` opens a client session with a person (or without elicitation). */
interface Transport {
  name: string;
  start(): Promise<void>;
  connect(answer: Answer | undefined): Promise<Connected>;
  stop(): Promise<void>;
}

function stdio(): Transport {
  const clients: Client[] = [];
  return {
    name: "stdio (airlock serve)",
    async start() {},
    async connect(answer) {
      const client = newClient(answer !== undefined);
      const watched = answer === undefined ? { asked: [], cancelled: [] } : person(client, answer);
      clients.push(client);
      await client.connect(
        new StdioClientTransport({
          command: process.execPath,
          args: [CLI, "serve", "--config", configPath, "--approval-timeout", String(APPROVAL_TIMEOUT_MS)],
          stderr: "pipe",
        }),
      );
      await client.listTools();
      return { client, ...watched };
    },
    async stop() {
      await Promise.all(clients.splice(0).map((client) => client.close()));
    },
  };
}

function http(): Transport {
  let gateway: McpGateway | undefined;
  let serving: Awaited<ReturnType<typeof serveGatewayHttp>> | undefined;
  const clients: Client[] = [];
  return {
    name: "Streamable HTTP",
    async start() {
      gateway = await McpGateway.start(JSON.parse(readFileSync(configPath, "utf8")), {
        poolSize: 1,
        approvalTimeoutMs: APPROVAL_TIMEOUT_MS,
      });
      serving = await serveGatewayHttp(gateway, { port: 0 });
    },
    async connect(answer) {
      const client = newClient(answer !== undefined);
      const watched = answer === undefined ? { asked: [], cancelled: [] } : person(client, answer);
      clients.push(client);
      await client.connect(new StreamableHTTPClientTransport(new URL((serving as { url: string }).url)));
      await client.listTools();
      return { client, ...watched };
    },
    async stop() {
      await Promise.all(clients.splice(0).map((client) => client.close()));
      await serving?.close();
      await gateway?.close();
    },
  };
}

const SEND = 'return await tools.mail__send_mail({ to: "ana@example.com", subject: "Lunch", body: "At 1?\\n— Bo" });';

describe.each([stdio(), http()])("over $name", (transport) => {
  beforeAll(() => transport.start(), 60_000);
  afterAll(() => transport.stop());

  it("sends an accepted call once, with exactly the arguments the person was shown", async () => {
    const { client, asked } = await transport.connect(accept);
    const result = await execute(client, SEND);
    const args = { to: "ana@example.com", subject: "Lunch", body: "At 1?\n— Bo" };
    expect(result.isError).toBeFalsy();
    expect(result.structuredContent.value).toEqual({ sent: { tool: "send_mail", arguments: args } });
    expect(sent("mail")).toEqual([{ tool: "send_mail", arguments: args }]);
    expect(asked).toHaveLength(1);
    const request = asked[0] as Params & { message: string; requestedSchema: Record<string, unknown> };
    expect(request.message).toContain('the tool "send_mail" of the MCP server "mail"');
    expect(request.message).toContain(JSON.stringify(args, null, 2));
    expect(request.requestedSchema).toMatchObject({
      type: "object",
      properties: { approve: { type: "boolean" } },
      required: ["approve"],
    });
    expect(result.structuredContent.approvals).toEqual([{ server: "mail", tool: "send_mail", decision: "accepted" }]);
  });

  it("does not send a declined call: the script sees GUARD_BLOCKED, catches it and goes on", async () => {
    const { client, asked } = await transport.connect(decline);
    const result = await execute(
      client,
      [
        "let code;",
        "try { await tools.mail__delete_mail({ id: 7 }); } catch (error) { code = error.code; text(error.message); }",
        "const inbox = await tools.mail__read_inbox({});",
        "return { code, inbox: inbox.sent.tool };",
      ].join("\n"),
    );
    expect(result.structuredContent.value).toEqual({ code: "GUARD_BLOCKED", inbox: "read_inbox" });
    expect(result.structuredContent.output).toContain("the person declined the call to tools.mail__delete_mail");
    expect(sent("mail")).toEqual([{ tool: "read_inbox", arguments: {} }]);
    expect(asked).toHaveLength(1);
    expect(result.structuredContent.approvals).toEqual([{ server: "mail", tool: "delete_mail", decision: "declined" }]);
  });

  it("does not send a call whose form was accepted with the box unchecked, or dismissed", async () => {
    const answers: ElicitResult[] = [{ action: "accept", content: { approve: false } }, { action: "cancel" }];
    const { client } = await transport.connect(async () => answers.shift() as ElicitResult);
    const result = await execute(
      client,
      [
        "const codes = [];",
        "for (const to of ['a', 'b']) {",
        "  try { await tools.mail__send_mail({ to }); codes.push('sent'); } catch (error) { codes.push(error.code); }",
        "}",
        "return codes;",
      ].join("\n"),
    );
    expect(result.structuredContent.value).toEqual(["GUARD_BLOCKED", "GUARD_BLOCKED"]);
    expect(sent("mail")).toEqual([]);
    expect(result.structuredContent.approvals?.map((record) => record.decision)).toEqual(["declined", "cancelled"]);
  });

  it("does not send a call the person does not answer in time, and withdraws the request", async () => {
    // The person answers the first request and lets the second one lie. (The second: the SDK's client ignores a
    // cancellation of request id 0, the first request a session sends it, though the gateway sends one.)
    let answered = 0;
    const slow: Answer = (params, signal) =>
      answered++ === 0
        ? accept(params, signal)
        : new Promise((_resolve, reject) => signal.addEventListener("abort", () => reject(new Error("withdrawn"))));
    const { client, asked, cancelled } = await transport.connect(slow);
    expect((await execute(client, "return await tools.mail__delete_mail({ id: 1 });")).isError).toBeFalsy();
    writeFileSync(logs.mail, "");
    const result = await execute(client, SEND);
    expect(result.isError).toBe(true);
    expect(result.structuredContent.error?.message).toContain(
      `no answer to the approval request for tools.mail__send_mail came within ${APPROVAL_TIMEOUT_MS} ms; the call was not sent`,
    );
    expect(sent("mail")).toEqual([]);
    expect(asked).toHaveLength(2);
    await expect.poll(() => cancelled[1]).toBe(true);
    expect(result.structuredContent.approvals).toEqual([{ server: "mail", tool: "send_mail", decision: "expired" }]);
  });

  it("sends nothing when the run's own deadline ends while the person reads, even if the person accepts later", async () => {
    // The person answers only once the run has ended at its deadline.
    let runEnded = () => {};
    const ended = new Promise<void>((resolve) => {
      runEnded = resolve;
    });
    let answeredLate = false;
    const late: Answer = async (params, signal) => {
      await ended;
      answeredLate = true;
      return accept(params, signal);
    };
    const { client, asked } = await transport.connect(late);
    // The sandbox boots on first use: a first run, so that the deadline below is spent waiting on the person.
    expect((await execute(client, "return 1")).isError).toBeFalsy();
    const result = await execute(client, `// @options: {"timeout_ms": 1000}\n${SEND}`);
    runEnded();
    expect(result.structuredContent.error?.kind).toBe("timeout");
    expect(asked).toHaveLength(1);
    await expect.poll(() => answeredLate, { timeout: 5_000 }).toBe(true);
    // The late answer reached the gateway (or was dropped as withdrawn) before this execute's answer below.
    expect((await execute(client, "return await tools.mail__read_inbox({});")).isError).toBeFalsy();
    expect(sent("mail")).toEqual([{ tool: "read_inbox", arguments: {} }]);
  });

  it("does not send a call when the client answers the request with an error", async () => {
    const { client } = await transport.connect(async () => {
      throw new Error("the approval window crashed");
    });
    const result = await execute(
      client,
      "try { await tools.mail__send_mail({ to: 'x' }); } catch (error) { return [error.code, error.message]; }",
    );
    expect(result.structuredContent.value).toEqual([
      "GUARD_BLOCKED",
      expect.stringMatching(
        /^the approval request for tools\.mail__send_mail failed: .*the approval window crashed.*; the call was not sent$/,
      ),
    ]);
    expect(sent("mail")).toEqual([]);
    expect(result.structuredContent.approvals).toEqual([{ server: "mail", tool: "send_mail", decision: "failed" }]);
  });

  it("asks at most DEFAULT_MAX_APPROVALS_PER_EXECUTION (20) times in one execution, and lists at most 100 calls", async () => {
    const { client, asked } = await transport.connect(accept);
    const result = await execute(
      client,
      [
        "const codes = [];",
        "for (let n = 0; n < 130; n++) {",
        "  try { await tools.mail__send_mail({ n }); codes.push('sent'); } catch (error) { codes.push(error.code); }",
        "}",
        "return codes;",
      ].join("\n"),
    );
    expect(result.structuredContent.value).toEqual([...Array(20).fill("sent"), ...Array(110).fill("GUARD_BLOCKED")]);
    expect(sent("mail").map((call) => call.arguments.n)).toEqual([...Array(20).keys()]);
    expect(asked).toHaveLength(20);
    const approvals = result.structuredContent.approvals ?? [];
    expect(approvals).toHaveLength(MAX_APPROVAL_RECORDS);
    expect(approvals.slice(0, 20).every((record) => record.decision === "accepted")).toBe(true);
    expect(approvals.slice(20).every((record) => record.decision === "over_limit")).toBe(true);
    expect(approvals[20]).toEqual({ server: "mail", tool: "send_mail", decision: "over_limit" });
    expect(result.structuredContent.approvalsNotListed).toBe(30);
  });

  it("refuses a call whose arguments are too long to show a person, without asking", async () => {
    const { client, asked } = await transport.connect(accept);
    const result = await execute(
      client,
      `return await tools.mail__send_mail({ body: "x".repeat(${MAX_APPROVAL_ARGUMENTS_CHARS}) });`,
    );
    expect(result.structuredContent.error?.message).toContain(
      `more than the ${MAX_APPROVAL_ARGUMENTS_CHARS} an approval request shows a person; the call was not sent`,
    );
    expect(sent("mail")).toEqual([]);
    expect(asked).toEqual([]);
  });

  it("does not send the call for a client without elicitation, and says why and what to change", async () => {
    const { client } = await transport.connect(undefined);
    const result = await execute(client, SEND);
    expect(result.isError).toBe(true);
    expect(sent("mail")).toEqual([]);
    const text = textOf(result);
    expect(text).toContain(
      "tools.mail__send_mail needs a person's approval, and this MCP client did not declare the elicitation capability, so the gateway cannot ask; the call was not sent",
    );
    expect(text).toContain(
      'Not sent: "send_mail" of server "mail" needs a person\'s approval for every call (the server\'s "approval" field in the gateway\'s config), and this MCP client does not support elicitation',
    );
    expect(text).toContain("Use a client that declares the elicitation capability (form mode)");
    expect(result.structuredContent.approvals).toEqual([
      { server: "mail", tool: "send_mail", decision: "unsupported" },
    ]);
  });

  it("gates only the tools of the approval field: others are sent without asking", async () => {
    const { client, asked } = await transport.connect(decline);
    const result = await execute(
      client,
      [
        "await tools.mail__read_inbox({ folder: 'in' });",
        "await tools.notes__send_mail({ to: 'me' });",
        "await tools.notes__delete_mail({ id: 1 });",
        "let code;",
        "try { await tools.archive__read_inbox({}); } catch (error) { code = error.code; }",
        "return code;",
      ].join("\n"),
    );
    expect(result.structuredContent.value).toBe("GUARD_BLOCKED");
    expect(sent("mail")).toEqual([{ tool: "read_inbox", arguments: { folder: "in" } }]);
    expect(sent("notes")).toEqual([
      { tool: "send_mail", arguments: { to: "me" } },
      { tool: "delete_mail", arguments: { id: 1 } },
    ]);
    expect(sent("archive")).toEqual([]);
    // "always" gates even a read-only tool.
    expect(asked.map((params) => (params as { message: string }).message.split(" with ")[0])).toEqual([
      'A program run by Airlock wants to call the tool "read_inbox" of the MCP server "archive"',
    ]);
  });

  it("names the gated tools in execute's description", async () => {
    const { client } = await transport.connect(accept);
    const execute = (await client.listTools()).tools.find((tool) => tool.name === "execute");
    expect(execute?.description).toContain(
      "- A person approves each call of tools.mail__send_mail, tools.mail__delete_mail, tools.archive__send_mail, tools.archive__delete_mail, tools.archive__read_inbox before it is sent",
    );
    expect(execute?.description).toContain('rejects with an error whose code is "GUARD_BLOCKED"');
  });
});

describe("two sessions of one gateway", () => {
  it("asks each execution's own session, also while both wait at once", async () => {
    const transport = http();
    await transport.start();
    try {
      let both: () => void = () => {};
      const bothAsked = new Promise<void>((resolve) => {
        both = resolve;
      });
      let waiting = 0;
      const holdThen =
        (answer: Answer): Answer =>
        async (params, signal) => {
          if (++waiting === 2) both();
          await bothAsked;
          return answer(params, signal);
        };
      const ana = await transport.connect(holdThen(accept));
      const bo = await transport.connect(holdThen(decline));
      const [fromAna, fromBo] = await Promise.all([
        execute(ana.client, 'return await tools.mail__send_mail({ to: "from-ana" });'),
        execute(
          bo.client,
          'try { await tools.mail__send_mail({ to: "from-bo" }); } catch (error) { return error.code; }',
        ),
      ]);
      expect(fromAna.structuredContent.value).toEqual({ sent: { tool: "send_mail", arguments: { to: "from-ana" } } });
      expect(fromBo.structuredContent.value).toBe("GUARD_BLOCKED");
      expect(ana.asked.map((params) => (params as { message: string }).message)).toEqual([
        expect.stringContaining('"to": "from-ana"'),
      ]);
      expect(bo.asked.map((params) => (params as { message: string }).message)).toEqual([
        expect.stringContaining('"to": "from-bo"'),
      ]);
      expect(sent("mail")).toEqual([{ tool: "send_mail", arguments: { to: "from-ana" } }]);
    } finally {
      await transport.stop();
    }
  });
});

describe("outside a session", () => {
  it("refuses a gated call when execute has no caller to ask, and warns of approval names a server lacks", async () => {
    const warnings: string[] = [];
    const gateway = await McpGateway.start(
      {
        mcpServers: {
          mail: { command: process.execPath, args: [RECORDING, logs.mail], approval: ["send_mail", "send_mails"] },
        },
      },
      { poolSize: 1, onWarning: (warning) => warnings.push(warning) },
    );
    try {
      const result = await gateway.execute(
        "try { await tools.mail__send_mail({}); } catch (e) { return [e.code, e.message]; }",
      );
      expect(result.structuredContent?.value).toEqual([
        "GUARD_BLOCKED",
        'tools.mail__send_mail needs a person\'s approval (the "approval" field of server "mail"), and this run has no MCP client to ask: only the gateway\'s execute asks, through MCP elicitation; the call was not sent',
      ]);
      expect(sent("mail")).toEqual([]);
      expect(warnings).toContain(
        'server "mail": its "approval" list names "send_mails", which the server does not have',
      );
    } finally {
      await gateway.close();
    }
  });

  it("refuses bad limits, naming them", async () => {
    const config = { mcpServers: { mail: { command: process.execPath, args: [RECORDING, logs.mail] } } };
    await expect(McpGateway.start(config, { poolSize: 1, approvalTimeoutMs: 0 })).rejects.toThrow(
      "approvalTimeoutMs must be a positive integer, got 0",
    );
    await expect(McpGateway.start(config, { poolSize: 1, maxApprovalsPerExecution: 1.5 })).rejects.toThrow(
      "maxApprovalsPerExecution must be a positive integer, got 1.5",
    );
    await expect(McpGateway.start(config, { poolSize: 1, maxApprovalsPerExecution: 101 })).rejects.toThrow(
      "maxApprovalsPerExecution must be at most 100 (MAX_APPROVAL_RECORDS), got 101",
    );
  });
});
