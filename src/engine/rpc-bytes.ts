/**
 * The size limit of remote exchanges. Workers RPC carries at most 32 MiB a call (RPC_LIMIT_BYTES), measured on V8's
 * structured-clone serialization of the arguments (or of the answer). An exchange between a remote VM side and its
 * host (remote/vm-side.ts, remote/channel.ts) carries at most MAX_EXCHANGE_BYTES of messages; more waits for the next
 * exchange, in order, and one message that alone is larger can never be sent: the VM refuses such a call in the
 * script (run.ts) and the host fails such an answer in the script, as every launcher refuses an oversize value.
 */

/** What one Workers RPC carries at most. */
export const RPC_LIMIT_BYTES = 32 * 1024 * 1024;

/**
 * Bytes of messages one remote exchange carries at most, by `rpcBytes`: safely below RPC_LIMIT_BYTES (the envelope,
 * an estimate that is off), and above one call of MAX_VALUE_CHARS Latin-1 characters, so that any value that fits
 * the other launchers' limits and is one byte a character crosses too.
 */
export const MAX_EXCHANGE_BYTES = 24 * 1024 * 1024;

/** Strings shorter than this are counted at two bytes a character, without looking at them. */
const SCAN_CHARS = 4096;
const WIDE = /[^\0-\xff]/;

/**
 * Bytes `value` takes in V8's structured-clone serialization, estimated from above: a string one byte a character
 * when every character is Latin-1 (V8 keeps and writes such strings so), else two; a few bytes for each tag, number
 * and property. For the plain data of protocol messages.
 */
export function rpcBytes(value: unknown): number {
  if (typeof value === "string") {
    const wide = value.length < SCAN_CHARS || WIDE.test(value);
    return 5 + value.length * (wide ? 2 : 1);
  }
  if (value === null || typeof value !== "object") return 9;
  let bytes = 5;
  if (Array.isArray(value)) {
    for (const item of value) bytes += rpcBytes(item);
    return bytes;
  }
  for (const [key, item] of Object.entries(value)) bytes += rpcBytes(key) + rpcBytes(item);
  return bytes;
}
