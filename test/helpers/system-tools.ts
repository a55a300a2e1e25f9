/**
 * System tools that some tests need: bubblewrap, gVisor's runsc, a PostgreSQL server. `npm test` has to pass on a
 * machine with only Node and npm, so a test file that needs one asks here first:
 *
 *   const postgresUrl = await requirePostgres();
 *   describe.runIf(hasSystemTool("bwrap"))("...", () => { ... });
 *
 * When the tool is missing, the run prints one line naming it and the command that installs it (once per run, however
 * many files ask; see `test/helpers/system-tools-setup.ts`) and the tests are skipped. With
 * AIRLOCK_REQUIRE_SYSTEM_TOOLS=1 (CI sets it) a missing tool throws instead, which fails the file that asked.
 */
import { spawnSync } from "node:child_process";
import { accessSync, closeSync, constants, openSync } from "node:fs";
import { connect } from "node:net";
import { delimiter, join } from "node:path";

/** Set to 1 to turn a skip for a missing tool into a failure. */
export const REQUIRE_SYSTEM_TOOLS_ENV = "AIRLOCK_REQUIRE_SYSTEM_TOOLS";
/** A PostgreSQL connection URL for the tests that need a server, e.g. postgres://postgres@127.0.0.1:5432/postgres. */
export const POSTGRES_URL_ENV = "AIRLOCK_TEST_POSTGRES_URL";
/** A folder where the run notes which missing tools it has reported, so that each is reported once per run. */
export const REPORTED_DIR_ENV = "AIRLOCK_SYSTEM_TOOLS_REPORTED";
/** How long a PostgreSQL server may take to answer the reachability check. */
export const POSTGRES_CHECK_TIMEOUT_MS = 3_000;
/** How long bubblewrap may take to start `true` in fresh namespaces. */
const BWRAP_PROBE_TIMEOUT_MS = 10_000;

export type SystemToolName = "bwrap" | "runsc" | "postgres";

interface ToolInfo {
  /** How the printed line names the tool. */
  label: string;
  /** What installs it on Debian/Ubuntu (and, for PostgreSQL, points the tests at it). */
  install: string;
}

export const SYSTEM_TOOLS: Readonly<Record<SystemToolName, ToolInfo>> = {
  bwrap: { label: "bubblewrap (bwrap)", install: "apt-get install bubblewrap" },
  runsc: { label: "gVisor (runsc)", install: "apt-get install runsc" },
  postgres: {
    label: "a PostgreSQL server",
    install: `apt-get install postgresql, start a server and set ${POSTGRES_URL_ENV}=postgres://user@127.0.0.1:5432/db`,
  },
};

/** The first executable `name` in the directories of `path` (PATH by default), or undefined. */
export function findOnPath(name: string, path = process.env.PATH ?? ""): string | undefined {
  for (const dir of path.split(delimiter)) {
    if (!dir.startsWith("/")) continue;
    const candidate = join(dir, name);
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {}
  }
  return undefined;
}

/** Why `tool` cannot be used here (a phrase for the printed line), or undefined when it can. */
export function missingSystemTool(tool: "bwrap" | "runsc", env: NodeJS.ProcessEnv = process.env): string | undefined {
  if (process.platform !== "linux") return `Linux only, and this is ${process.platform}`;
  const path = findOnPath(tool, env.PATH);
  if (path === undefined) return `not found on PATH; install it: ${SYSTEM_TOOLS[tool].install}`;
  if (tool === "runsc") {
    return process.getuid?.() === 0
      ? undefined
      : "installed, but it starts sandboxes only as root: run the tests as root";
  }
  // Installed is not enough: the process tier needs unprivileged user namespaces.
  const probe = spawnSync(path, ["--unshare-all", "--ro-bind", "/", "/", "--", "true"], {
    encoding: "utf8",
    timeout: BWRAP_PROBE_TIMEOUT_MS,
  });
  if (probe.status === 0) return undefined;
  const why = (probe.error?.message ?? probe.stderr.trim().split("\n")[0]) || `exit status ${probe.status}`;
  return `installed, but it cannot create namespaces here (${why}): enable unprivileged user namespaces`;
}

/** Why no PostgreSQL server can be used (a phrase for the printed line), or undefined when one answers. */
export async function missingPostgres(env: NodeJS.ProcessEnv = process.env): Promise<string | undefined> {
  const text = env[POSTGRES_URL_ENV];
  if (text === undefined || text === "") return `${POSTGRES_URL_ENV} is not set; ${SYSTEM_TOOLS.postgres.install}`;
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return `${POSTGRES_URL_ENV} is not a URL`;
  }
  if (url.protocol !== "postgres:" && url.protocol !== "postgresql:") {
    return `${POSTGRES_URL_ENV} must be a postgres:// URL, got ${url.protocol}`;
  }
  const host = url.hostname === "" ? "127.0.0.1" : url.hostname.replace(/^\[(.*)\]$/, "$1");
  const port = url.port === "" ? 5432 : Number(url.port);
  return await askPostgres(host, port);
}

/**
 * Sends PostgreSQL's SSLRequest, which every server answers with one byte ("S" or "N") before any authentication, so
 * that a port where something else listens is not taken for a server.
 */
function askPostgres(host: string, port: number): Promise<string | undefined> {
  return new Promise((settle) => {
    const where = `${host}:${port}`;
    const socket = connect({ host, port });
    const done = (reason: string | undefined) => {
      socket.destroy();
      clearTimeout(timer);
      settle(reason);
    };
    const timer = setTimeout(
      () => done(`nothing answered at ${where} within ${POSTGRES_CHECK_TIMEOUT_MS} ms`),
      POSTGRES_CHECK_TIMEOUT_MS,
    );
    socket.once("error", (error) => done(`cannot reach ${where} (${error.message})`));
    socket.once("connect", () => {
      const request = Buffer.alloc(8);
      request.writeInt32BE(8, 0);
      request.writeInt32BE(80877103, 4);
      socket.write(request);
    });
    socket.once("data", (data) => {
      const answer = String.fromCharCode(data[0] ?? 0);
      done(answer === "S" || answer === "N" ? undefined : `what answers at ${where} is not a PostgreSQL server`);
    });
    socket.once("end", () => done(`${where} closed the connection without answering as PostgreSQL does`));
  });
}

/** True when `tool` can be used. When not: one printed line and false, or (AIRLOCK_REQUIRE_SYSTEM_TOOLS=1) a throw. */
export function hasSystemTool(tool: "bwrap" | "runsc"): boolean {
  return decide(tool, missingSystemTool(tool));
}

/**
 * The URL of a PostgreSQL server for the tests (from AIRLOCK_TEST_POSTGRES_URL), or undefined when none answers
 * there: then one printed line, or (AIRLOCK_REQUIRE_SYSTEM_TOOLS=1) a throw.
 */
export async function requirePostgres(): Promise<string | undefined> {
  return decide("postgres", await missingPostgres()) ? process.env[POSTGRES_URL_ENV] : undefined;
}

/** What is missing and how to get it: the printed line, and the error under AIRLOCK_REQUIRE_SYSTEM_TOOLS=1. */
export function missingLine(tool: SystemToolName, reason: string): string {
  return `the tests that need ${SYSTEM_TOOLS[tool].label}: ${reason}`;
}

function decide(tool: SystemToolName, reason: string | undefined): boolean {
  if (reason === undefined) return true;
  const line = missingLine(tool, reason);
  if (process.env[REQUIRE_SYSTEM_TOOLS_ENV] === "1") throw new Error(`${REQUIRE_SYSTEM_TOOLS_ENV}=1 requires ${line}`);
  // Straight to stdout: vitest would put a header line above a console.log.
  if (firstReport(tool)) process.stdout.write(`skipped ${line}\n`);
  return false;
}

/** True the first time in this run that `tool` is reported missing (always, outside a run that set up the folder). */
function firstReport(tool: SystemToolName): boolean {
  const dir = process.env[REPORTED_DIR_ENV];
  if (dir === undefined || dir === "") return true;
  try {
    closeSync(openSync(join(dir, tool), "wx"));
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code !== "EEXIST";
  }
}
