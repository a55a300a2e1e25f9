/** Runs the built `airlock` CLI (dist/cli/main.js) as a child process, the way a shell would. */
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

export const REPO_ROOT = fileURLToPath(new URL("../..", import.meta.url));
export const CLI = join(REPO_ROOT, "dist", "cli", "main.js");

export interface CliResult {
  /** Exit status; `null` when the process was killed (for instance by the timeout below). */
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  durationMs: number;
}

export interface CliOptions {
  cwd?: string;
  /** Written to the child's stdin, which is then closed. */
  input?: string;
  /** Kill the child after this many ms; default 20,000. */
  timeoutMs?: number;
  /** Called with all of stderr so far whenever more arrives, for example to send a signal at the right moment. */
  onStderr?: (stderr: string, child: ChildProcess) => void;
}

/** `node dist/cli/main.js ...args`, resolved with its exit status and output (never rejects for a non-zero exit). */
export function runCli(args: string[], options: CliOptions = {}): Promise<CliResult> {
  const started = performance.now();
  return new Promise((resolve) => {
    const child = execFile(
      process.execPath,
      [CLI, ...args],
      {
        cwd: options.cwd ?? REPO_ROOT,
        timeout: options.timeoutMs ?? 20_000,
        encoding: "utf8",
        maxBuffer: 64 * 1024 * 1024,
        env: { ...process.env, NODE_OPTIONS: "" },
      },
      (_error, stdout, stderr) => {
        resolve({
          code: child.exitCode,
          signal: child.signalCode,
          stdout,
          stderr,
          durationMs: performance.now() - started,
        });
      },
    );
    if (options.onStderr) {
      let seen = "";
      const onStderr = options.onStderr;
      child.stderr?.on("data", (chunk: string) => {
        seen += chunk;
        onStderr(seen, child);
      });
    }
    child.stdin?.on("error", () => {});
    child.stdin?.end(options.input ?? "");
  });
}

/** Fails early, with the fix, when dist/cli is missing or older than src/cli. */
export function assertCliBuilt(): void {
  const build = "run `npm run build` (tsc -p tsconfig.build.json) before these tests";
  if (!existsSync(CLI)) throw new Error(`${CLI} does not exist: ${build}`);
  const src = join(REPO_ROOT, "src", "cli");
  for (const file of readdirSync(src).filter((f) => f.endsWith(".ts"))) {
    const built = join(REPO_ROOT, "dist", "cli", file.replace(/\.ts$/, ".js"));
    if (!existsSync(built) || statSync(built).mtimeMs < statSync(join(src, file)).mtimeMs) {
      throw new Error(`dist/cli is older than src/cli/${file}: ${build}`);
    }
  }
}

/** A fresh temporary directory holding `files`; `cleanup()` removes it. */
export function tempDir(files: Record<string, string> = {}): { dir: string; cleanup(): void } {
  const dir = mkdtempSync(join(tmpdir(), "airlock-cli-"));
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/** `airlock serve --http` running from its build, until `stop()`. */
export interface HttpGatewayProcess {
  /** The endpoint it listens on, as it said on stderr. */
  url: string;
  pid: number;
  /** What it wrote to stderr so far. */
  log(): string;
  /** SIGTERM, and its exit. */
  stop(): Promise<void>;
}

/** Starts `airlock serve --config <config> --http 0 ...flags` and resolves once it listens (or fails saying why not). */
export async function serveHttpCli(config: string, flags: string[] = []): Promise<HttpGatewayProcess> {
  assertCliBuilt();
  let log = "";
  const child: ChildProcess = spawn(process.execPath, [CLI, "serve", "--config", config, "--http", "0", ...flags], {
    stdio: ["ignore", "ignore", "pipe"],
    env: { ...process.env, NODE_OPTIONS: "" },
  });
  child.stderr?.setEncoding("utf8");
  child.stderr?.on("data", (chunk: string) => {
    log += chunk;
  });
  const deadline = Date.now() + 60_000;
  while (!/listening on \S+/.test(log)) {
    if (child.exitCode !== null || Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`airlock serve did not listen; it wrote:\n${log}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return {
    url: /listening on (\S+)/.exec(log)?.[1] ?? "",
    pid: child.pid as number,
    log: () => log,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise((resolve) => child.once("exit", resolve));
      child.kill("SIGTERM");
      await exited;
    },
  };
}
