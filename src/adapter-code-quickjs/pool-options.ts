/** The pool options both QuickJS adapters take, checked the same way (INVALID_CONFIG naming the option). */
import { configError } from "../tools/errors.ts";

/** The largest value of the adapters' count options (`poolSize`, `maxPoolSize`, `maxVmsPerWorker`), as the sandboxes'. */
export const MAX_ADAPTER_COUNT = 1024;

/** Whether `value` is a count the adapters take: an integer from 1 to `MAX_ADAPTER_COUNT`. */
export function isAdapterCount(value: unknown): value is number {
  return typeof value === "number" && Number.isSafeInteger(value) && value >= 1 && value <= MAX_ADAPTER_COUNT;
}

/** A count option from 1 to `MAX_ADAPTER_COUNT`; `fallback` when it is not given. */
export function countOption(value: unknown, field: string, fallback: number): number {
  if (value === undefined) return fallback;
  if (!isAdapterCount(value)) {
    throw configError(`${field} must be an integer from 1 to ${MAX_ADAPTER_COUNT}`);
  }
  return value;
}

/** `maxPoolSize`: VM sides at most, at least `size` (the VM sides kept); `fallback` when it is not given. */
export function maxPoolSizeOption(value: unknown, size: number, fallback: number): number {
  const max = countOption(value, "maxPoolSize", fallback);
  if (max < size) throw configError(`maxPoolSize (${max}) must be at least poolSize (${size})`);
  return max;
}
