/**
 * The one option checker of the public functions that take an options object: unknown keys, integers in a range,
 * durations, booleans. Each family of the API reports a bad option as the library it is compatible with does:
 * - the sandbox classes and the rest of the script sandbox's API (loadQuickJSWasm, serveCodemodeRemote, the process
 *   tier, the MCP client and gateway, the AI SDK tool): a TypeError for a value of the wrong kind or an unknown key,
 *   a RangeError for a number out of range, naming the value (`SANDBOX_OPTION_ERRORS`, pi-codemode's);
 * - governed programs, their adapters, tools and workflows: an AirlockError with code INVALID_CONFIG, whose message
 *   does not repeat the value (`CONFIG_OPTION_ERRORS` in tools/errors.ts, Mayura's);
 * - the docker adapter: a DockerConfigError, which is a TypeError (Mayura's docker adapter's).
 */

/** How a family of the API reports a bad option. */
export interface OptionErrors {
  /** A value of the wrong kind, or a key the function does not take. */
  kind(message: string): Error;
  /** A number out of its range. */
  range(message: string): Error;
  /** Whether the message ends with the value that was refused. */
  showsValue: boolean;
}

/** The sandbox's: TypeError and RangeError, naming the value (pi-codemode's). */
export const SANDBOX_OPTION_ERRORS: OptionErrors = Object.freeze({
  kind: (message: string) => new TypeError(message),
  range: (message: string) => new RangeError(message),
  showsValue: true,
});

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

/** Throws the family's error with `unknownOption`'s message, if it has one. */
export function refuseUnknownOptions(
  options: object,
  what: string,
  known: readonly string[],
  errors: OptionErrors = SANDBOX_OPTION_ERRORS,
  noun = "option",
): void {
  const message = unknownOption(options, what, known, noun);
  if (message !== undefined) throw errors.kind(message);
}

/**
 * The keys of the options type `T`, as a list the compiler checks both ways: `optionKeys<T>({ a: true, b: true })`
 * fails to compile when a key of `T` is missing or one that `T` lacks is listed.
 */
export function optionKeys<T>(keys: { [K in keyof Required<T>]: true }): string[] {
  return Object.keys(keys);
}

/**
 * An integer option from `min` to `max` (`max` Infinity: no upper bound but the largest safe integer); undefined when
 * it is not given. Anything else, a number given as text included, is refused naming the option and the range.
 */
export function integerOption(
  value: unknown,
  name: string,
  min: number,
  max: number,
  errors: OptionErrors = SANDBOX_OPTION_ERRORS,
): number | undefined {
  return value === undefined ? undefined : checkInteger(value, name, min, max, errors);
}

/** A required integer from `min` to `max` (see integerOption). */
export function checkInteger(
  value: unknown,
  name: string,
  min: number,
  max: number,
  errors: OptionErrors = SANDBOX_OPTION_ERRORS,
): number {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < min || value > max) {
    const range =
      max !== Number.POSITIVE_INFINITY
        ? `an integer from ${min} to ${max}`
        : min === 1
          ? "a positive integer"
          : `an integer of at least ${min}`;
    throw errors.range(withValue(`${name} must be ${range}`, value, errors));
  }
  return value;
}

/**
 * A duration option in ms: a positive number, and Infinity (no deadline) where `infinite` allows it; undefined when
 * it is not given.
 */
export function durationOption(
  value: unknown,
  name: string,
  infinite: boolean,
  errors: OptionErrors = SANDBOX_OPTION_ERRORS,
): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== "number" || Number.isNaN(value) || value <= 0 || (!infinite && !Number.isFinite(value))) {
    const what = infinite ? "a positive number of ms or Infinity" : "a positive finite number of ms";
    throw errors.range(withValue(`${name} must be ${what}`, value, errors));
  }
  return value;
}

/** A boolean option; undefined when it is not given. */
export function booleanOption(
  value: unknown,
  name: string,
  errors: OptionErrors = SANDBOX_OPTION_ERRORS,
): boolean | undefined {
  if (value === undefined || typeof value === "boolean") return value;
  throw errors.kind(`${name} must be a boolean`);
}

function withValue(message: string, value: unknown, errors: OptionErrors): string {
  // Strings quoted, so that "2" is not taken for 2.
  return errors.showsValue
    ? `${message}, got ${typeof value === "string" ? JSON.stringify(value) : String(value)}`
    : message;
}
