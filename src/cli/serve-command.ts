/** `airlock serve --config <mcp.json>`: the code-mode MCP gateway, over stdio or Streamable HTTP. */
import { existsSync, readFileSync } from "node:fs";
import { createServer } from "node:net";
import { resolve } from "node:path";
import {
  DEFAULT_APPROVAL_TIMEOUT_MS,
  DEFAULT_GATEWAY_TIMEOUT_MS,
  DEFAULT_HTTP_HOST,
  DEFAULT_MAX_OUTPUT_TOKENS,
  DEFAULT_MAX_SESSIONS,
  DEFAULT_MAX_SESSIONS_PER_PRINCIPAL,
  DEFAULT_SESSION_IDLE_MS,
} from "../gateway/defaults.ts";
import type { WaitingDecision } from "../gateway/waiting.ts";
import type { HttpServing, McpGateway, ParsedMcpConfig } from "../mcp.ts";
import { DEFAULT_MEMORY_LIMIT_BYTES } from "../sandbox/base.ts";
import { CODEMODE_OPTIONS_LIMITS } from "../source/options-line.ts";
import { APPROVER_CREDENTIAL_ENV, EXIT_FAILED, EXIT_OK, parseFlags, positiveInteger, UsageError } from "./args.ts";
import type { CliIo, Command } from "./command.ts";
import { GATEWAY_PACKAGES, loadMcp } from "./mcp-config.ts";

/** The largest deadline a Node.js timer can hold. */
const MAX_TIMEOUT_MS = 2 ** 31 - 1;
/** The sandbox's heap cap goes up to 4 GiB. */
const MAX_MEMORY_MIB = 4096;
/** A week; the sweep's timer holds at most 60 s anyway. */
const MAX_SESSION_IDLE_MINUTES = 7 * 24 * 60;
/** The most --max-sessions and --max-sessions-per-principal take. */
const MAX_SESSIONS_FLAG = 100_000;

const USAGE = `Usage: airlock serve --config <mcp.json> [options]

Runs an MCP server that puts the tools of other MCP servers behind three tools: search (find tools by words),
describe (their TypeScript declarations) and execute (run a program that calls them in the sandbox). The model
writes one program instead of calling tools one at a time; in it, tool <tool> of server <server> is
tools.<server>__<tool>(args), with characters other than letters, digits, _ and $ written as _.

The config has the format desktop MCP clients use:
  { "mcpServers": {
      "files": { "command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "."], "env": {} },
      "remote": { "url": "https://example.com/mcp", "headers": { "Authorization": "Bearer \${TOKEN}" } } } }
or VS Code's, with "servers" instead of "mcpServers" (and \${env:VAR} for variables).
Per server, "tools": ["name", ...] exposes only those tools and "readOnly": true only the tools annotated
readOnlyHint: true; "readOnly": true at the top applies to every server. \${VAR} reads the environment.
"approval": "always" (or ["name", ...]) makes every call of the server's tools (or of the named ones) wait for
a person's approval, asked through the client (MCP elicitation); a refused call is not sent and rejects in the
program with code GUARD_BLOCKED. A client without elicitation cannot be asked: such calls are refused, unless the gateway has a --store, where
the run waits instead: execute answers with the run's id and the airlock approve and airlock reject lines, and
once a person decided, execute with the same code and "resume": "<id>" continues the run without sending any
earlier call again.
A server that does not start (or dies for good) is reported and tried again in the background; the others serve on.

Options:
  --config <file>            The MCP servers (required)
  --http <port>              Serve Streamable HTTP at http://<host>:<port>/mcp instead of stdio (0: a free port)
  --host <address>           Address to bind with --http (default ${DEFAULT_HTTP_HOST}: this machine only)
  --token-env <VAR>          With --http, require Authorization: Bearer <the value of environment variable VAR>
  --oauth-issuer <url>       With --http, require OAuth access tokens (JWTs) of this authorization server,
                             checked with its keys (JWKS) for issuer, audience (this gateway) and expiry
  --oauth-audience <uri>     The audience tokens must name (default: the public URL of the endpoint)
  --oauth-scopes <a,b>       Scopes every token must carry
  --oauth-jwks <url>         The issuer's JWKS (default: the jwks_uri of its metadata)
  --public-url <url>         With --http, the URL clients reach the endpoint at (behind a proxy): the resource
                             of the protected-resource metadata, and an allowed Host
  --allowed-hosts <a,b>      With --http, host names allowed in the Host header besides this machine's
  --forward-roots            With --http, hand clients' roots to the upstream servers that ask for them (over
                             stdio they always are): the servers are shared by all clients, and roots can widen
                             what a server may touch
  --session-idle <minutes>   With --http, close a client's session after this long without a request
                             (default ${DEFAULT_SESSION_IDLE_MS / 60_000}; the client then initializes a new one)
  --max-sessions <n>         With --http, the most sessions open at once; past it an initialize gets 503
                             (default ${DEFAULT_MAX_SESSIONS})
  --max-sessions-per-principal <n>
                             With --http, the most sessions of one principal (whom a token names; without a
                             token, all clients are one): past it the one idle longest is closed, or the
                             initialize gets 429 (default ${DEFAULT_MAX_SESSIONS_PER_PRINCIPAL})
  --timeout <ms>             Deadline of one execution (default ${DEFAULT_GATEWAY_TIMEOUT_MS})
  --approval-timeout <ms>    Deadline of a person's answer to one approval request; past it the call is
                             refused, not sent (default ${DEFAULT_APPROVAL_TIMEOUT_MS}; the execution's deadline still counts)
  --memory <MiB>             Heap cap of one execution (default ${DEFAULT_MEMORY_LIMIT_BYTES / 1024 / 1024})
  --max-output-tokens <n>    Most tokens of text one execution returns; the rest is cut, with a note
                             (default ${DEFAULT_MAX_OUTPUT_TOKENS})
  --read-only                Expose only tools annotated readOnlyHint: true, from every server
  --store <file|url>         Keep runs that wait for a person's approval in this durable store: a SQLite file
                             (created if missing) or a postgres:// URL; airlock approvals list, approve and
                             reject work on it
  --schema <name>            With a PostgreSQL --store, its schema (default airlock)
  --project <id>             With --store, the project of its runs' scope {"principalId": "airlock-gateway",
                             "projectId": <id>}: a person approving must belong to it (default airlock)
  --verifier <module>        With --store, the verifyHuman module to name in the approve and reject lines
                             (the gateway does not load it; airlock approve does)
  --approval-ttl <ms>        With --store, how long a waiting run waits for a person (default an hour)
  -h, --help                 Show this help

A script's first line may lower the limits for its own run: // @options: {"timeout_ms": 5000, "max_output_tokens": 800}.
Logs, and what the upstream servers write to stderr, go to stderr. The server runs until stdin closes (stdio) or
it gets SIGINT or SIGTERM.

Exit status: 0 stopped normally, 1 tool names collide, 2 bad usage or config, an --http port or --host that cannot
be bound, or an --oauth-issuer whose metadata cannot be read.
`;

const flags = {
  config: { type: "string" },
  http: { type: "string" },
  host: { type: "string" },
  "session-idle": { type: "string" },
  "max-sessions": { type: "string" },
  "max-sessions-per-principal": { type: "string" },
  "token-env": { type: "string" },
  "oauth-issuer": { type: "string" },
  "oauth-audience": { type: "string" },
  "oauth-scopes": { type: "string" },
  "oauth-jwks": { type: "string" },
  "public-url": { type: "string" },
  "allowed-hosts": { type: "string" },
  "forward-roots": { type: "boolean" },
  timeout: { type: "string" },
  "approval-timeout": { type: "string" },
  memory: { type: "string" },
  "max-output-tokens": { type: "string" },
  "read-only": { type: "boolean" },
  store: { type: "string" },
  schema: { type: "string" },
  project: { type: "string" },
  verifier: { type: "string" },
  "approval-ttl": { type: "string" },
  help: { type: "boolean", short: "h" },
} as const;

export const serveCommand: Command = {
  name: "serve",
  synopsis: "serve --config <mcp.json>",
  summary: "Serve MCP servers' tools as one code-mode MCP server (search, describe, execute)",
  usage: USAGE,
  run: serve,
};

/** Runs the gateway until the client goes away or the process is told to stop; resolves to the exit status. */
export async function serve(argv: string[], io: CliIo): Promise<number> {
  const { values, positionals } = parseFlags(argv, flags);
  if (values.help) {
    io.stdout(USAGE);
    return EXIT_OK;
  }
  if (positionals.length > 0) throw new UsageError(`unexpected argument ${positionals[0]}`);
  if (values.config === undefined) throw new UsageError("missing --config <mcp.json>");
  if (values.host !== undefined && values.http === undefined) throw new UsageError("--host needs --http <port>");
  if (values["session-idle"] !== undefined && values.http === undefined) {
    throw new UsageError("--session-idle needs --http <port>");
  }
  for (const flag of [
    "token-env",
    "oauth-issuer",
    "public-url",
    "allowed-hosts",
    "forward-roots",
    "max-sessions",
    "max-sessions-per-principal",
  ] as const) {
    if (values[flag] !== undefined && values.http === undefined) throw new UsageError(`--${flag} needs --http <port>`);
  }
  for (const flag of ["oauth-audience", "oauth-scopes", "oauth-jwks"] as const) {
    if (values[flag] !== undefined && values["oauth-issuer"] === undefined) {
      throw new UsageError(`--${flag} needs --oauth-issuer <url>`);
    }
  }
  if (values["token-env"] !== undefined && values["oauth-issuer"] !== undefined) {
    throw new UsageError("give --token-env or --oauth-issuer, not both");
  }
  const oauth =
    values["oauth-issuer"] === undefined
      ? undefined
      : {
          issuer: values["oauth-issuer"],
          ...(values["oauth-audience"] === undefined ? {} : { audience: values["oauth-audience"] }),
          ...(values["oauth-scopes"] === undefined ? {} : { requiredScopes: list(values["oauth-scopes"]) }),
          ...(values["oauth-jwks"] === undefined ? {} : { jwksUri: values["oauth-jwks"] }),
        };
  const allowedHosts = values["allowed-hosts"] === undefined ? undefined : list(values["allowed-hosts"]);
  const publicUrl = values["public-url"];
  const bearerToken = values["token-env"] === undefined ? undefined : tokenFrom(values["token-env"]);
  const sessionIdleMs =
    values["session-idle"] === undefined
      ? DEFAULT_SESSION_IDLE_MS
      : positiveInteger("--session-idle", values["session-idle"], MAX_SESSION_IDLE_MINUTES, "minutes") * 60_000;
  const maxSessions =
    values["max-sessions"] === undefined
      ? undefined
      : positiveInteger("--max-sessions", values["max-sessions"], MAX_SESSIONS_FLAG, "sessions");
  const maxSessionsPerPrincipal =
    values["max-sessions-per-principal"] === undefined
      ? undefined
      : positiveInteger(
          "--max-sessions-per-principal",
          values["max-sessions-per-principal"],
          MAX_SESSIONS_FLAG,
          "sessions",
        );
  const port = values.http === undefined ? undefined : portNumber(values.http);
  const host = values.host ?? DEFAULT_HTTP_HOST;
  const timeoutMs =
    values.timeout === undefined
      ? DEFAULT_GATEWAY_TIMEOUT_MS
      : positiveInteger("--timeout", values.timeout, MAX_TIMEOUT_MS, "milliseconds");
  const approvalTimeoutMs =
    values["approval-timeout"] === undefined
      ? DEFAULT_APPROVAL_TIMEOUT_MS
      : positiveInteger("--approval-timeout", values["approval-timeout"], MAX_TIMEOUT_MS, "milliseconds");
  const memoryLimitBytes =
    values.memory === undefined
      ? DEFAULT_MEMORY_LIMIT_BYTES
      : positiveInteger("--memory", values.memory, MAX_MEMORY_MIB, "MiB") * 1024 * 1024;
  const maxOutputTokens =
    values["max-output-tokens"] === undefined
      ? DEFAULT_MAX_OUTPUT_TOKENS
      : positiveInteger(
          "--max-output-tokens",
          values["max-output-tokens"],
          CODEMODE_OPTIONS_LIMITS.max_output_tokens,
          "tokens",
        );
  const readOnly = values["read-only"] === true;
  for (const flag of ["schema", "project", "verifier", "approval-ttl"] as const) {
    if (values[flag] !== undefined && values.store === undefined) throw new UsageError(`--${flag} needs --store`);
  }
  if (values.project !== undefined && (values.project === "" || values.project.length > 256)) {
    throw new UsageError("--project must be 1-256 characters");
  }
  const verifier = values.verifier === undefined ? undefined : resolve(io.cwd, values.verifier);
  if (verifier !== undefined && !existsSync(verifier)) throw new UsageError(`--verifier: no module at ${verifier}`);
  // Starting the upstream servers can take a while: a port in use or a bad host should fail before that.
  if (port !== undefined) await checkBindable(port, host);

  const mcp = await loadMcp("the MCP gateway", GATEWAY_PACKAGES);
  let config: ParsedMcpConfig;
  try {
    config = await mcp.loadMcpConfig(resolve(io.cwd, values.config), { readOnly });
  } catch (error) {
    if (error instanceof mcp.McpConfigError) throw new UsageError(error.message);
    throw error;
  }
  const log = (text: string) => io.stderr(`airlock serve: ${text}\n`);
  for (const warning of config.warnings) log(`warning: ${warning}`);

  // Loaded only with --store: the stores and their drivers stay out of every other start.
  const durable = values.store === undefined ? undefined : await import("./durable.ts");
  const approvalTtlMs =
    values["approval-ttl"] === undefined || durable === undefined
      ? undefined
      : positiveInteger("--approval-ttl", values["approval-ttl"], durable.MAX_CALL_APPROVAL_TTL_MS, "milliseconds");
  const store = durable === undefined ? undefined : await durable.openGatewayStore(values, io);
  const waiting =
    store === undefined
      ? undefined
      : {
          store: store.store,
          scope: {
            ...mcp.DEFAULT_GATEWAY_SCOPE,
            ...(values.project === undefined ? {} : { projectId: values.project }),
          },
          ...(approvalTtlMs === undefined ? {} : { ttlMs: approvalTtlMs }),
          commandLine: decisionLine(store.shown, values.schema, verifier),
        };

  let gateway: McpGateway;
  try {
    gateway = await mcp.McpGateway.start(config, {
      ...(waiting === undefined ? {} : { waiting }),
      readOnly,
      timeoutMs,
      approvalTimeoutMs,
      memoryLimitBytes,
      maxOutputTokens,
      serverInfo: { name: "airlock", version: packageVersion() },
      clientInfo: { name: "airlock", version: packageVersion() },
      onStderr: upstreamLogger(io),
      onWarning: (warning) => log(`warning: ${warning}`),
      onDown: (server, down) => {
        const seconds = Math.max(1, Math.round((down.retryAt - Date.now()) / 1000));
        // The first failure in full (with the server's stderr), later ones in a line.
        const reason = down.attempts === 1 ? down.error.message : (down.error.message.split("\n")[0] as string);
        log(`server "${server}" is down (attempt ${down.attempts}); trying again in ${seconds} s: ${reason}`);
      },
      onUp: (server) => log(`server "${server}" is up again`),
      forwardRoots: port === undefined || values["forward-roots"] === true,
    });
  } catch (error) {
    await store?.store.close();
    if (error instanceof mcp.McpToolCollisionError) {
      log(error.message);
      return EXIT_FAILED;
    }
    throw error;
  }
  const status = gateway.toolset.status();
  const counts = status.map((s) => `${s.server} (${s.state === "down" ? "down" : s.tools})`);
  log(`${gateway.tools.length} tools from ${counts.join(", ") || "no servers"}${readOnly ? ", read-only" : ""}`);

  let stop: (signal: string) => void = () => {};
  const stopped = new Promise<string>((done) => {
    stop = done;
  });
  const stopInterrupt = io.onInterrupt(() => stop("SIGINT"));
  const onTerm = () => stop("SIGTERM");
  process.on("SIGTERM", onTerm);
  try {
    if (port === undefined) {
      const serving = await mcp.serveGatewayStdio(gateway);
      await Promise.race([serving.closed, stopped]);
      await serving.close();
    } else {
      let serving: HttpServing;
      try {
        serving = await mcp.serveGatewayHttp(gateway, {
          port,
          host,
          sessionIdleMs,
          ...(maxSessions === undefined ? {} : { maxSessions }),
          ...(maxSessionsPerPrincipal === undefined ? {} : { maxSessionsPerPrincipal }),
          ...(bearerToken === undefined ? {} : { bearerToken }),
          ...(oauth === undefined ? {} : { oauth }),
          ...(publicUrl === undefined ? {} : { publicUrl }),
          ...(allowedHosts === undefined ? {} : { allowedHosts }),
        });
      } catch (error) {
        // The address was free a moment ago but may be taken since; the upstream servers are stopped below.
        if (error instanceof TypeError) throw new UsageError(error.message);
        if (oauth !== undefined && !(error as NodeJS.ErrnoException).code) {
          throw new UsageError(`--oauth-issuer: ${(error as Error).message}`);
        }
        throw bindError(error, port, host);
      }
      const guard =
        bearerToken !== undefined
          ? " (bearer token required)"
          : oauth !== undefined
            ? ` (OAuth access tokens of ${oauth.issuer} required)`
            : "";
      log(`listening on ${serving.url}${guard}`);
      if (guard === "" && host !== DEFAULT_HTTP_HOST && host !== "localhost" && host !== "::1") {
        log(
          `warning: bound to ${host} without --token-env: anyone who can reach it can run programs against the upstream tools`,
        );
      }
      await stopped;
      await serving.close();
    }
  } finally {
    // Signals that arrive while the upstream servers are being stopped wait for that to finish.
    await gateway.close();
    await store?.store.close();
    stopInterrupt();
    process.off("SIGTERM", onTerm);
  }
  return EXIT_OK;
}

/**
 * The `airlock approve` (or `reject`) line of a waiting call, as a person runs it: the credential from the
 * environment, the store as the gateway opened it (a PostgreSQL password left out: give it as PGPASSWORD).
 */
function decisionLine(
  store: string,
  schema: string | undefined,
  verifier: string | undefined,
): (decision: WaitingDecision) => string {
  const options = [
    `--store ${shellWord(store)}`,
    ...(schema === undefined ? [] : [`--schema ${shellWord(schema)}`]),
    `--verifier ${verifier === undefined ? "<a module exporting verifyHuman>" : shellWord(verifier)}`,
  ].join(" ");
  return ({ verdict, run, node, digest }) =>
    `${APPROVER_CREDENTIAL_ENV}=<the person's credential> airlock ${verdict} ${run} ${node} --digest ${digest} ${options}`;
}

/** A word as a POSIX shell reads it back. */
function shellWord(word: string): string {
  return /^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replaceAll("'", "'\\''")}'`;
}

/** The bearer token from an environment variable (never from the command line, which other users can see). */
function tokenFrom(variable: string): string {
  const token = process.env[variable];
  if (token === undefined || token === "")
    throw new UsageError(`--token-env: environment variable ${variable} is not set`);
  if (!/^[\x21-\x7e]+$/.test(token)) {
    throw new UsageError(`--token-env: ${variable} must hold printable ASCII without spaces`);
  }
  return token;
}

/** A comma-separated flag value as its items. */
function list(value: string): string[] {
  return value
    .split(",")
    .map((item) => item.trim())
    .filter((item) => item !== "");
}

function portNumber(value: string): number {
  const n = /^\d+$/.test(value) ? Number(value) : Number.NaN;
  if (!Number.isInteger(n) || n < 0 || n > 65535) {
    throw new UsageError(`--http must be a port number from 0 to 65535, got "${value}"`);
  }
  return n;
}

/** Listens on the address and closes it again, so that a bind failure surfaces before anything is started. */
async function checkBindable(port: number, host: string): Promise<void> {
  const server = createServer();
  try {
    await new Promise<void>((listening, failed) => {
      server.once("error", failed);
      server.listen(port, host, listening);
    });
  } catch (error) {
    throw bindError(error, port, host);
  }
  await new Promise((closed) => server.close(closed));
}

/** A failure to listen as a usage error naming the flag at fault; other errors as they are. */
function bindError(error: unknown, port: number, host: string): unknown {
  const { code, message } = error as NodeJS.ErrnoException;
  if (code === "EADDRINUSE") return new UsageError(`--http ${port}: address in use`);
  if (code === "EACCES") return new UsageError(`--http ${port}: permission denied (ports below 1024 need privileges)`);
  if (code === "ENOTFOUND" || code === "EAI_AGAIN") return new UsageError(`--host ${host}: no such host (${message})`);
  if (code === "EADDRNOTAVAIL") return new UsageError(`--host ${host}: not an address of this machine`);
  if (code !== undefined) return new UsageError(`--http ${port} --host ${host}: cannot listen: ${message}`);
  return error;
}

/** Upstream stderr, line by line, each line prefixed with the server's name. */
function upstreamLogger(io: CliIo): (server: string, text: string) => void {
  const partial = new Map<string, string>();
  return (server, text) => {
    const lines = ((partial.get(server) ?? "") + text).split("\n");
    partial.set(server, lines.pop() ?? "");
    for (const line of lines) io.stderr(`[${server}] ${line}\n`);
  };
}

let version: string | undefined;

function packageVersion(): string {
  version ??= (JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string })
    .version;
  return version;
}
