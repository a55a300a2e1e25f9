/**
 * Starts a worker thread with the host's Node flags, given Node's `Worker` class (passed in, so that this file imports
 * no `node:` module and the portable entry may reach it). A worker inherits the flags by default, whatever they are,
 * except that `--input-type` (a host run with `-e`) stops it from starting. Leaving that one out means listing the
 * rest, and Node refuses a list with V8 or process-wide flags (`--max-old-space-size`, `--expose-gc`), which a worker
 * shares with the process anyway: such a host's workers start with no flags of their own.
 */
export function startWorker<W, O extends object>(
  WorkerClass: new (url: string | URL, options: O & { execArgv?: string[] }) => W,
  url: string | URL,
  options: O,
): W {
  const execArgv = (globalThis as { process?: { execArgv?: string[] } }).process?.execArgv ?? [];
  const inputType = execArgv.findIndex((flag) => flag === "--input-type" || flag.startsWith("--input-type="));
  if (inputType < 0) return new WorkerClass(url, options);
  const kept = execArgv.filter(
    (_, i) => i !== inputType && !(i === inputType + 1 && execArgv[inputType] === "--input-type"),
  );
  try {
    return new WorkerClass(url, { ...options, execArgv: kept });
  } catch (error) {
    if ((error as { code?: unknown }).code !== "ERR_WORKER_INVALID_EXEC_ARGV") throw error;
    return new WorkerClass(url, { ...options, execArgv: [] });
  }
}
