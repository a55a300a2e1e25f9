/** Checks shared by the public functions that take an options object. */

/**
 * Throws a TypeError naming the first key of `options` that is not in `known`, and the keys that are: a misspelt
 * option (`timeout` for `timeoutMs`) must not leave its default in place unnoticed.
 */
export function refuseUnknownOptions(options: object, what: string, known: readonly string[]): void {
  for (const key of Object.keys(options)) {
    if (!known.includes(key)) throw new TypeError(`${what} has no option "${key}" (it takes ${known.join(", ")})`);
  }
}
