/** How many VM sides a pool keeps and grows to, and how many VMs each keeps: the defaults every pool shares. */
import { integerOption, type OptionErrors, SANDBOX_OPTION_ERRORS } from "../platform/options.ts";
import { nodeBuiltin } from "../platform/platform.ts";

/** Default largest pool: this many VM sides per core, for executions that compute while others wait. */
export const MAX_POOL_SIZE_PER_CORE = 4;

/** The largest count a pool takes: VM sides kept, VM sides at most, VMs per VM side. */
export const MAX_POOL_COUNT = 1024;

/** VMs one thread keeps for executions that wait on tools at the same time. */
export const DEFAULT_VMS_PER_THREAD = 64;

/** The default largest pool for `size` VM sides kept. */
export function defaultMaxPoolSize(size: number): number {
  return Math.max(size, MAX_POOL_SIZE_PER_CORE * cores());
}

/** The cores this process may use (Node's `availableParallelism`), 1 where the runtime does not say. */
export function cores(): number {
  const os = nodeBuiltin<typeof import("node:os")>("os");
  return Math.max(1, os?.availableParallelism?.() ?? 1);
}

/** A count option of a pool (`poolSize`, `maxVmsPerWorker`, ...): an integer from 1 to MAX_POOL_COUNT, or undefined. */
export function countOption(
  value: unknown,
  name: string,
  errors: OptionErrors = SANDBOX_OPTION_ERRORS,
): number | undefined {
  return integerOption(value, name, 1, MAX_POOL_COUNT, errors);
}

/** `maxPoolSize`, at least `size` (the VM sides kept); the default for `size` when it is not given. */
export function maxPoolSizeOption(value: unknown, size: number, errors: OptionErrors = SANDBOX_OPTION_ERRORS): number {
  const max = countOption(value, "maxPoolSize", errors);
  if (max === undefined) return defaultMaxPoolSize(size);
  if (max < size) throw errors.range(`maxPoolSize (${max}) must be at least poolSize (${size})`);
  return max;
}
