/** Checks shared by the public functions that take an options object. */

/**
 * The message naming the first key of `options` that is not in `known`, and the keys that are, or undefined: a
 * misspelt option (`timeout` for `timeoutMs`, `permision` for `permissions`) must not leave its default in place
 * unnoticed.
 */
export function unknownOption(
  options: object,
  what: string,
  known: readonly string[],
  noun = "option",
): string | undefined {
  for (const key of Object.keys(options)) {
    if (!known.includes(key)) return `${what} has no ${noun} "${key}" (it takes ${known.join(", ")})`;
  }
  return undefined;
}

/** Throws a TypeError with `unknownOption`'s message, if it has one. */
export function refuseUnknownOptions(options: object, what: string, known: readonly string[]): void {
  const message = unknownOption(options, what, known);
  if (message !== undefined) throw new TypeError(message);
}

/**
 * The keys of the options type `T`, as a list the compiler checks both ways: `optionKeys<T>({ a: true, b: true })`
 * fails to compile when a key of `T` is missing or one that `T` lacks is listed.
 */
export function optionKeys<T>(keys: { [K in keyof Required<T>]: true }): string[] {
  return Object.keys(keys);
}
