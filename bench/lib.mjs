// Measuring helpers shared by the bench scripts.

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
