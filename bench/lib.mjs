// Measuring helpers shared by the bench scripts.
import { startProgress } from "../dist/cli/progress.js";

/** The runtime a bench ran on, for its first line and its results file: "Node v24.22.3" or "Bun 1.4.4". */
export const runtime = process.versions.bun === undefined ? `Node ${process.version}` : `Bun ${process.versions.bun}`;

/**
 * A line saying what the bench measures now, on a terminal (stderr) only: on a pipe or in a file nothing but the
 * results. `clear()` before printing a row keeps the two apart.
 */
export const benchProgress = () => startProgress(process.stderr, "starting…");

/** The median of a list of numbers. */
export const median = (values) => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
};

/** The median time in ms of `iterations` sequential executions of `code`; a failed one stops the bench. */
export async function timeEach(sandbox, code, iterations, options) {
  const times = [];
  for (let i = 0; i < iterations; i++) {
    const start = performance.now();
    const result = await sandbox.execute(code, options);
    times.push(performance.now() - start);
    if (!result.ok && !options?.expectFailure) throw new Error(`${code}: ${result.error.kind} ${result.error.message}`);
  }
  return median(times);
}
