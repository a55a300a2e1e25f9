import { CodemodeSourceError } from "./errors.ts";
import { hasCode, INLINE_WHITESPACE_CLASS } from "./whitespace.ts";

/** The first line of a script may set options: `// @options: {"max_output_tokens": 2000, "timeout_ms": 30000}`. */
export const CODEMODE_OPTIONS_PREFIX = "// @options:";

/** Options a script sets for its own run on its first line. */
export interface CodemodeSourceOptions {
  /** Cap on the tokens of output the run returns to the model (1 to `CODEMODE_OPTIONS_LIMITS.max_output_tokens`). */
  max_output_tokens?: number;
  /** Wall-clock limit of the run in milliseconds (1 to `CODEMODE_OPTIONS_LIMITS.timeout_ms`, one hour). */
  timeout_ms?: number;
}

/** A script split into its code and its options. */
export interface ParsedCodemodeSource {
  /** The script with its options line (if any) replaced by an empty line, so line numbers stay the same. */
  code: string;
  options: CodemodeSourceOptions;
}

/**
 * Largest value each option accepts; the smallest is 1. A script's own options can't go past these; a host that
 * wants lower ceilings clamps the parsed values to its own.
 */
export const CODEMODE_OPTIONS_LIMITS: Readonly<Required<CodemodeSourceOptions>> = Object.freeze({
  max_output_tokens: 1_000_000,
  timeout_ms: 3_600_000,
});

const OPTION_UNITS: Readonly<Record<keyof CodemodeSourceOptions, string>> = {
  max_output_tokens: "tokens",
  timeout_ms: "milliseconds",
};

const OPTION_FIELDS = Object.keys(CODEMODE_OPTIONS_LIMITS) as (keyof CodemodeSourceOptions)[];

/** A line that starts, after optional whitespace, with the options prefix. */
const OPTIONS_LINE = new RegExp(`^[${INLINE_WHITESPACE_CLASS}]*// @options:`);

const EXAMPLE = `${CODEMODE_OPTIONS_PREFIX} {"max_output_tokens": 2000, "timeout_ms": 30000}`;

/**
 * Splits a script into code and options. The first line may be an options line (`// @options:` after optional
 * whitespace, then a JSON object with any of `max_output_tokens` and `timeout_ms`, each a positive integer up to
 * its `CODEMODE_OPTIONS_LIMITS` value); it becomes an empty line of `code`. Lines are split at `\n`; a `\r` before
 * it belongs to the line.
 *
 * Throws `CodemodeSourceError` when the script breaks a rule (see `CodemodeSourceRule`), and `TypeError` when
 * `text` is not a string. JSON is read with `JSON.parse`: any spelling of a number that parses to an allowed
 * integer (`3e4`, `30000.0`) is accepted, and a repeated field keeps its last value.
 */
export function parseCodemodeSource(text: string): ParsedCodemodeSource {
  if (typeof text !== "string") {
    throw new TypeError(`parseCodemodeSource expects the script as a string, got ${describeType(text)}`);
  }
  if (!hasCode(text)) {
    throw new CodemodeSourceError(
      "empty",
      text === ""
        ? "The script is empty: write the code to run."
        : "The script is only whitespace: write the code to run.",
    );
  }

  const newline = text.indexOf("\n");
  const firstLine = newline === -1 ? text : text.slice(0, newline);
  const rest = newline === -1 ? "" : text.slice(newline);
  const hasOptions = OPTIONS_LINE.test(firstLine);
  const options = hasOptions ? parseOptionsLine(firstLine) : {};

  checkNoLaterOptionsLine(rest);
  if (hasOptions && !hasCode(rest)) {
    throw new CodemodeSourceError(
      "options-without-code",
      `The ${CODEMODE_OPTIONS_PREFIX} line must be followed by the code to run, on the next lines; the script has no code after it.`,
      { line: 1 },
    );
  }
  return { code: hasOptions ? rest : text, options };
}

function parseOptionsLine(line: string): CodemodeSourceOptions {
  const json = line.slice(line.indexOf(CODEMODE_OPTIONS_PREFIX) + CODEMODE_OPTIONS_PREFIX.length);
  let value: unknown;
  try {
    value = JSON.parse(json);
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    throw new CodemodeSourceError(
      "options-json",
      `The ${CODEMODE_OPTIONS_PREFIX} line on line 1 is not valid JSON (${reason}). Write it as: ${EXAMPLE}`,
      { line: 1 },
    );
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new CodemodeSourceError(
      "options-object",
      `The ${CODEMODE_OPTIONS_PREFIX} line must hold a JSON object, got ${describeType(value)}. Write it as: ${EXAMPLE}`,
      { line: 1 },
    );
  }

  const fields = value as Record<string, unknown>;
  const unknown = Object.keys(fields).filter((key) => !(OPTION_FIELDS as string[]).includes(key));
  if (unknown.length > 0) {
    const names = unknown.map((key) => JSON.stringify(key)).join(", ");
    throw new CodemodeSourceError(
      "options-unknown-field",
      `Unknown field${unknown.length === 1 ? "" : "s"} ${names} in the ${CODEMODE_OPTIONS_PREFIX} line; ` +
        `the supported fields are "max_output_tokens" and "timeout_ms".`,
      { line: 1 },
    );
  }

  const options: CodemodeSourceOptions = {};
  const problems: string[] = [];
  for (const field of OPTION_FIELDS) {
    if (!Object.hasOwn(fields, field)) continue;
    const problem = checkValue(field, fields[field]);
    if (problem === undefined) options[field] = fields[field] as number;
    else problems.push(problem);
  }
  if (problems.length > 0) {
    throw new CodemodeSourceError(
      "options-value",
      `Invalid ${problems.length === 1 ? "value" : "values"} in the ${CODEMODE_OPTIONS_PREFIX} line: ${problems.join("; ")}.`,
      { line: 1 },
    );
  }
  return options;
}

function checkValue(field: keyof CodemodeSourceOptions, value: unknown): string | undefined {
  const limit = CODEMODE_OPTIONS_LIMITS[field];
  const expected = `"${field}" must be a whole number of ${OPTION_UNITS[field]} from 1 to ${limit}`;
  if (typeof value !== "number") return `${expected}, got ${describeType(value)}`;
  if (!Number.isInteger(value) || value < 1 || value > limit) return `${expected}, got ${String(value)}`;
  return undefined;
}

/** `rest` is the script from the first `\n` on, so its n-th line (0-based) is the script's line n + 1. */
function checkNoLaterOptionsLine(rest: string): void {
  const lines = rest.split("\n");
  for (let index = 1; index < lines.length; index++) {
    if (OPTIONS_LINE.test(lines[index] as string)) {
      throw new CodemodeSourceError(
        "options-not-first-line",
        `Line ${index + 1} starts with ${CODEMODE_OPTIONS_PREFIX}, but options may only be set on the first line of the script.`,
        { line: index + 1 },
      );
    }
  }
}

function describeType(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  if (typeof value === "string") return `the string ${JSON.stringify(value)}`;
  if (typeof value === "number" || typeof value === "boolean") return `${typeof value} ${String(value)}`;
  if (typeof value === "object") return "an object";
  return typeof value;
}
