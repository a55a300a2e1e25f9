/** Runs the built `airlock` CLI (dist/cli/main.js) as a child process, the way a shell would. */
import { type ChildProcess, execFile } from "node:child_process";
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
