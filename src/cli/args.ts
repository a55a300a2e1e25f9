/** Flag parsing shared by the subcommands: `node:util` parseArgs in strict mode, with errors a person can act on. */
import { type ParseArgsConfig, parseArgs } from "node:util";

/**
 * The environment variable that holds the deciding person's credential for `airlock approve` and `reject` (read by
 * durable.ts, which those commands load when they run).
 */
export const APPROVER_CREDENTIAL_ENV = "AIRLOCK_APPROVER_CREDENTIAL";
/** Records `runs list` and `approvals list` show at most. */
export const LIST_LIMIT = 1_000;

/** Bad usage: the CLI prints the message with a pointer to the help and exits with status 2. */
export class UsageError extends Error {
  override name = "UsageError";
}

/** A command that could not do its work (an MCP server that did not start): one line, and exit status 1. */
export class CommandError extends Error {
  override name = "CommandError";
}

type Options = NonNullable<ParseArgsConfig["options"]>;
type FlagValue<F> = F extends { type: "boolean" } ? boolean : string;

/** Each flag that was given: booleans as `true`, strings as their value, flags with `multiple` as arrays. */
export type FlagValues<O extends Options> = {
  [K in keyof O]?: O[K] extends { multiple: true } ? FlagValue<O[K]>[] : FlagValue<O[K]>;
};

/**
 * Parses `argv` strictly (unknown flags, missing values and a value flag given twice are usage errors) and allows
 * positionals.
 */
export function parseFlags<const O extends Options>(
  argv: string[],
  options: O,
): { values: FlagValues<O>; positionals: string[] } {
  let parsed: ReturnType<typeof parseArgs>;
  try {
    parsed = parseArgs({ args: argv, options, strict: true, allowPositionals: true, tokens: true });
  } catch (error) {
    throw toUsageError(error, argv);
  }
  // parseArgs keeps the last of `--timeout 5000 --timeout 1`; which one was meant is anyone's guess.
  const seen = new Set<string>();
  for (const token of parsed.tokens ?? []) {
    if (token.kind !== "option" || options[token.name]?.type !== "string" || options[token.name]?.multiple) continue;
    if (seen.has(token.name)) throw new UsageError(`--${token.name} was given twice; give it once`);
    seen.add(token.name);
  }
  return { values: parsed.values as FlagValues<O>, positionals: parsed.positionals };
}

function toUsageError(error: unknown, argv: string[]): UsageError {
  const { code, message } = error as { code?: string; message?: string };
  const text = String(message ?? error);
  if (code === "ERR_PARSE_ARGS_UNKNOWN_OPTION") {
    const flag = /'([^']+)'/.exec(text)?.[1] ?? text;
    return new UsageError(`unknown flag ${flag}`);
  }
  if (code === "ERR_PARSE_ARGS_INVALID_OPTION_VALUE") {
    // The message names the option as '--name', '--name <value>' or '-n, --name <value>': keep the long form.
    const names = /'([^']+)'/.exec(text)?.[1]?.match(/--?[\w-]+/g) ?? [];
    const flag = names[names.length - 1] ?? "an option";
    if (text.includes("does not take an argument")) return new UsageError(`${flag} does not take a value`);
    // `--timeout -5` reads as a flag after --timeout; say how to pass a value that starts with a dash.
    const next = argv.includes(flag) ? argv[argv.indexOf(flag) + 1] : undefined;
    const hint = next !== undefined && /^-\d/.test(next) ? ` (to pass ${next}, write ${flag}=${next})` : "";
    return new UsageError(`${flag} needs a value${hint}`);
  }
  return new UsageError(text);
}

/** A flag's value as a positive integer no larger than `max`. */
export function positiveInteger(flag: string, value: string, max: number, unit: string): number {
  const n = /^\d+$/.test(value) ? Number(value) : Number.NaN;
  if (!Number.isSafeInteger(n) || n < 1 || n > max) {
    throw new UsageError(`${flag} must be a positive integer number of ${unit} up to ${max}, got "${value}"`);
  }
  return n;
}

/** The largest deadline a Node.js timer can hold. */
export const MAX_TIMEOUT_MS = 2 ** 31 - 1;

/** `--timeout <ms>`: a deadline a timer can hold. */
export function timeoutFlag(value: string): number {
  return positiveInteger("--timeout", value, MAX_TIMEOUT_MS, "milliseconds");
}

/** A flag's value that must be one of `choices`. */
export function oneOf<const T extends string>(flag: string, value: string, choices: readonly T[]): T {
  if (!(choices as readonly string[]).includes(value)) {
    throw new UsageError(`${flag} must be ${choices.map((c) => `"${c}"`).join(" or ")}, got "${value}"`);
  }
  return value as T;
}

/** Exit statuses of every command. */
export const EXIT_OK = 0;
/** The run failed: a script error, a timeout, an abort (Ctrl-C), or a sandbox failure. */
export const EXIT_FAILED = 1;
/** Bad usage: unknown command or flag, bad flag value, missing file. */
export const EXIT_USAGE = 2;
