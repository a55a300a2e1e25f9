/**
 * The rule for tests that need a system tool (test/helpers/system-tools.ts): on a machine without it they are skipped
 * with one printed line naming it and its install command, once per run however many files need it; under
 * AIRLOCK_REQUIRE_SYSTEM_TOOLS=1 they fail instead. And the product's own errors for a missing tool, on a machine that
 * lacks it.
 */
import { execFile, spawnSync } from "node:child_process";
import { chmodSync, existsSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CLI, REPO_ROOT } from "./helpers/cli.ts";
import { findOnPath, missingPostgres, missingSystemTool, POSTGRES_URL_ENV } from "./helpers/system-tools.ts";

const VITEST = join(REPO_ROOT, "node_modules", "vitest", "vitest.mjs");
const FIXTURES_CONFIG = fileURLToPath(new URL("./fixtures/system-tools/vitest.config.ts", import.meta.url));
const isRoot = process.getuid?.() === 0;

let dir: string;
/** A folder for PATH holding nothing. */
let emptyBin: string;
/** A folder for PATH holding stand-ins for bwrap and runsc that succeed at whatever they are asked. */
let fakeBin: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "airlock-system-tools-"));
  emptyBin = join(dir, "empty");
  fakeBin = join(dir, "fake");
  for (const folder of [emptyBin, fakeBin]) spawnSync("mkdir", ["-p", folder]);
  for (const tool of ["bwrap", "runsc"]) {
    writeFileSync(join(fakeBin, tool), "#!/bin/sh\nexit 0\n");
    chmodSync(join(fakeBin, tool), 0o755);
  }
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Runs the fixture files (each needs one tool) in a vitest of their own, with `env` instead of this one's. */
function runFixtures(env: Record<string, string>): Promise<{ code: number | null; out: string }> {
  return new Promise((done) => {
    const child = execFile(
      process.execPath,
      [VITEST, "run", "--config", FIXTURES_CONFIG],
      { cwd: REPO_ROOT, env: { HOME: process.env.HOME ?? "/tmp", NO_COLOR: "1", ...env }, timeout: 60_000 },
      (_error, stdout, stderr) => done({ code: child.exitCode, out: `${stdout}${stderr}` }),
    );
  });
}

const lines = (out: string, start: string) => out.split("\n").filter((line) => line.startsWith(start));

describe("a machine without the tools", () => {
  it("skips their tests with one line per missing tool, naming it and how to install it", async () => {
    const { code, out } = await runFixtures({ PATH: emptyBin });
    expect(code, out).toBe(0);
    // Two files need bubblewrap: still one line.
    expect(lines(out, "skipped the tests that need bubblewrap (bwrap)")).toEqual([
      "skipped the tests that need bubblewrap (bwrap): not found on PATH; install it: apt-get install bubblewrap",
    ]);
    expect(lines(out, "skipped the tests that need gVisor (runsc)")).toEqual([
      "skipped the tests that need gVisor (runsc): not found on PATH; install it: apt-get install runsc",
    ]);
    expect(lines(out, "skipped the tests that need a PostgreSQL server")).toEqual([
      `skipped the tests that need a PostgreSQL server: ${POSTGRES_URL_ENV} is not set; apt-get install postgresql, start a server and set ${POSTGRES_URL_ENV}=postgres://user@127.0.0.1:5432/db`,
    ]);
    expect(lines(out, "skipped").length).toBe(3);
    expect(out).toMatch(/Tests\s+4 skipped \(4\)/);
  }, 90_000);

  it("fails their files instead under AIRLOCK_REQUIRE_SYSTEM_TOOLS=1, with the same words", async () => {
    const { code, out } = await runFixtures({ PATH: emptyBin, AIRLOCK_REQUIRE_SYSTEM_TOOLS: "1" });
    expect(code).toBe(1);
    expect(out).toContain(
      "AIRLOCK_REQUIRE_SYSTEM_TOOLS=1 requires the tests that need bubblewrap (bwrap): not found on PATH; install it: apt-get install bubblewrap",
    );
    expect(out).toContain("AIRLOCK_REQUIRE_SYSTEM_TOOLS=1 requires the tests that need gVisor (runsc)");
    expect(out).toContain("AIRLOCK_REQUIRE_SYSTEM_TOOLS=1 requires the tests that need a PostgreSQL server");
    expect(out).toMatch(/Test Files\s+4 failed \(4\)/);
    expect(lines(out, "skipped")).toEqual([]);
  }, 90_000);
});

describe("a machine with the tools", () => {
  let postgres: Server;
  let url: string;
  beforeAll(async () => {
    // What a PostgreSQL server answers to an SSLRequest when it takes no TLS: one byte, "N".
    postgres = createServer((socket) => socket.once("data", () => socket.end("N")));
    await new Promise<void>((listening) => postgres.listen(0, "127.0.0.1", listening));
    const address = postgres.address();
    url = `postgres://airlock@127.0.0.1:${typeof address === "object" && address ? address.port : 0}/airlock`;
  });
  afterAll(() => new Promise((closed) => postgres.close(closed)));

  it.runIf(process.platform === "linux" && isRoot)(
    "runs their tests, and prints nothing about them",
    async () => {
      const { code, out } = await runFixtures({
        PATH: fakeBin,
        [POSTGRES_URL_ENV]: url,
        AIRLOCK_REQUIRE_SYSTEM_TOOLS: "1",
      });
      expect(code, out).toBe(0);
      expect(out).toMatch(/Tests\s+4 passed \(4\)/);
      expect(lines(out, "skipped")).toEqual([]);
    },
    90_000,
  );

  it("says why a tool that is there cannot be used", async () => {
    const bin = join(dir, "failing");
    spawnSync("mkdir", ["-p", bin]);
    writeFileSync(join(bin, "bwrap"), "#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n");
    chmodSync(join(bin, "bwrap"), 0o755);
    if (process.platform === "linux") {
      expect(missingSystemTool("bwrap", { PATH: bin })).toBe(
        "installed, but it cannot create namespaces here (bwrap: No permissions to create new namespace): enable unprivileged user namespaces",
      );
    }
    // Relative folders of PATH are passed over.
    expect(findOnPath("bwrap", `relative:${bin}`)).toBe(join(bin, "bwrap"));
    // Not executable is not there.
    chmodSync(join(bin, "bwrap"), 0o644);
    expect(findOnPath("bwrap", bin)).toBeUndefined();
  });

  it("tells a PostgreSQL server from something else on the port, and from nothing", async () => {
    expect(await missingPostgres({ [POSTGRES_URL_ENV]: url })).toBeUndefined();
    expect(await missingPostgres({ [POSTGRES_URL_ENV]: "http://127.0.0.1:5432/" })).toBe(
      `${POSTGRES_URL_ENV} must be a postgres:// URL, got http:`,
    );
    expect(await missingPostgres({ [POSTGRES_URL_ENV]: "not a url" })).toBe(`${POSTGRES_URL_ENV} is not a URL`);
    const other = createServer((socket) => socket.once("data", () => socket.end("HTTP/1.1 400 Bad Request\r\n\r\n")));
    await new Promise<void>((listening) => other.listen(0, "127.0.0.1", listening));
    const port = (other.address() as { port: number }).port;
    expect(await missingPostgres({ [POSTGRES_URL_ENV]: `postgres://x@127.0.0.1:${port}/db` })).toBe(
      `what answers at 127.0.0.1:${port} is not a PostgreSQL server`,
    );
    await new Promise((closed) => other.close(closed));
    // The port is free again: nothing listens there.
    expect(await missingPostgres({ [POSTGRES_URL_ENV]: `postgres://x@127.0.0.1:${port}/db` })).toMatch(
      new RegExp(`^cannot reach 127\\.0\\.0\\.1:${port} \\(connect ECONNREFUSED`),
    );
  });
});

/**
 * The product's own errors where bubblewrap is missing: directly on a machine without it, and elsewhere (as root) in
 * a mount namespace where every bwrap the product would look at is covered by a file that is not executable.
 */
describe("the product on a machine without bubblewrap", () => {
  const absent = process.platform === "linux" && missingSystemTool("bwrap")?.startsWith("not found") === true;
  const unshare = findOnPath("unshare");
  const canHide = isRoot && unshare !== undefined && process.platform === "linux";
  if (!absent && !canHide) {
    process.stdout.write(
      "skipped the product's missing-bubblewrap errors: bubblewrap is installed, and hiding it needs root and unshare\n",
    );
  }

  /** Runs `node args` where bubblewrap cannot be found. */
  function withoutBwrap(args: string[], cwd: string) {
    if (absent) return spawnSync(process.execPath, args, { cwd, encoding: "utf8", timeout: 30_000 });
    const cover = join(dir, "not-bwrap");
    writeFileSync(cover, "");
    const places = ["/usr/bin", "/usr/local/bin", "/bin", "/usr/sbin", ...(process.env.PATH ?? "").split(":")]
      .map((folder) => join(folder, "bwrap"))
      .filter((path) => path.startsWith("/") && existsSync(path))
      .map((path) => realpathSync(path));
    const mounts = [...new Set(places)].map((path) => `mount --bind ${cover} ${path}`).join(" && ");
    const quoted = [process.execPath, ...args].map((arg) => `'${arg.replaceAll("'", "'\\''")}'`).join(" ");
    return spawnSync(unshare as string, ["-m", "sh", "-c", `${mounts || "true"} && exec ${quoted}`], {
      cwd,
      encoding: "utf8",
      timeout: 30_000,
    });
  }

  it.runIf(absent || canHide)("ProcessCodemodeSandbox says bubblewrap is missing and how to install it", () => {
    const script = `
      const { ProcessCodemodeSandbox } = await import("airlock-codemode");
      try { new ProcessCodemodeSandbox(); console.log("constructed"); } catch (error) { console.log(error.name + ": " + error.message); }`;
    const result = withoutBwrap(["--input-type=module", "-e", script], REPO_ROOT);
    expect(result.stdout).toMatch(
      /^IsolationUnavailableError: .*bubblewrap is not installed: apt-get install bubblewrap/,
    );
  });

  it.runIf(absent || canHide)("airlock run --isolation process is a usage error that says the same", () => {
    writeFileSync(join(dir, "one.js"), "return 1;\n");
    const result = withoutBwrap([CLI, "run", "one.js", "--isolation", "process"], dir);
    expect(result.status, result.stderr).toBe(2);
    expect(result.stderr).toMatch(/^airlock run: --isolation process: .*apt-get install bubblewrap/);
    expect(result.stdout).toBe("");
  });
});
