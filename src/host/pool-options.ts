/** How many VM sides a pool keeps and grows to, and how many VMs each keeps: the defaults every pool shares. */
import { nodeBuiltin } from "../platform/platform.ts";

/** Default largest pool: this many VM sides per core, for executions that compute while others wait. */
export const MAX_POOL_SIZE_PER_CORE = 4;

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
