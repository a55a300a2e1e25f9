import { CodemodeSourceError } from "./source-error.ts";
import { hasCode, INLINE_WHITESPACE_CLASS } from "./whitespace.ts";

/** The first line of a script may set options: `// @options: {"max_output_tokens": 2000, "timeout_ms": 30000}`. */
export const CODEMODE_OPTIONS_PREFIX = "// @options:";

/**
 * Options a script sets for its own run on its first line, named as in pi-codemode (the line itself says
 * `max_output_tokens` and `timeout_ms`).
 */
export interface CodemodeSourceOptions {
  /** Cap on the tokens of output the run returns to the model (0 to `CODEMODE_OPTIONS_LIMITS.max_output_tokens`). */
  maxOutputTokens?: number;
  /** Wall-clock limit of the run in milliseconds (1 to `CODEMODE_OPTIONS_LIMITS.timeout_ms`, one hour). */
  timeoutMs?: number;
}

/** The fields of the options line, as the script writes them. */
export interface CodemodeOptionsFields {
  max_output_tokens: number;
  timeout_ms: number;
}

/** A script split into its code and its options. */
export interface ParsedCodemodeSource {
  /** The script with its options line (if any) replaced by an empty line, so line numbers stay the same. */
  code: string;
  options: CodemodeSourceOptions;
}

/**
 * Largest value each field of the options line accepts; the smallest is 0 for `max_output_tokens` (only the note
 * that the text was cut comes back) and 1 for `timeout_ms`. A script's own options can't go past these; a host that
 * wants lower ceilings clamps the parsed values to its own.
 */
export const CODEMODE_OPTIONS_LIMITS: Readonly<CodemodeOptionsFields> = Object.freeze({
  max_output_tokens: 1_000_000,
  timeout_ms: 3_600_000,
});

/** How each field reads in an error, and the option it becomes. */
const OPTION_FIELDS: Readonly<
  Record<keyof CodemodeOptionsFields, { rule: string; smallest: number; option: keyof CodemodeSourceOptions }>
> = {
  max_output_tokens: { rule: "a non-negative safe integer", smallest: 0, option: "maxOutputTokens" },
  timeout_ms: { rule: "a positive integer", smallest: 1, option: "timeoutMs" },
};
const FIELD_NAMES = Object.keys(OPTION_FIELDS) as (keyof CodemodeOptionsFields)[];
/** How the errors name the supported fields (pi-codemode's wording, which ported hosts may look for). */
const SUPPORTED = "`max_output_tokens` and `timeout_ms`";

/** A line that starts, after optional whitespace, with the options prefix. */
const OPTIONS_LINE = new RegExp(`^[${INLINE_WHITESPACE_CLASS}]*// @options:`);

const EXAMPLE = `${CODEMODE_OPTIONS_PREFIX} {"max_output_tokens": 2000, "timeout_ms": 30000}`;

/**
 * Splits a script into code and options. The first line may be an options line (`// @options:` after optional
 * whitespace, then a JSON object with any of `max_output_tokens` (0 or more) and `timeout_ms` (1 or more), each an
 * integer up to its `CODEMODE_OPTIONS_LIMITS` value), returned as `maxOutputTokens` and `timeoutMs`; it becomes an
 * empty line of `code`. Lines are split at `\n`; a `\r` before it belongs to the line. Error messages start with
 * pi-codemode's wording.
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
      `Expected JavaScript source text (non-empty): the script is ${text === "" ? "empty" : "only whitespace"}. ` +
        `Write the code to run, optionally after a first line ${EXAMPLE}.`,
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
      "The @options line must be followed by JavaScript source on subsequent lines; the script has no code after it.",
      { line: 1 },
    );
  }
  return { code: hasOptions ? rest : text, options };
}

function parseOptionsLine(line: string): CodemodeSourceOptions {
  const json = line.slice(line.indexOf(CODEMODE_OPTIONS_PREFIX) + CODEMODE_OPTIONS_PREFIX.length);
  const notObject = (got: string) =>
    new CodemodeSourceError(
      "options-object",
      `@options must be a JSON object with supported fields ${SUPPORTED}, got ${got}. Write it as: ${EXAMPLE}`,
      { line: 1 },
    );
  if (json.trim() === "") throw notObject("nothing");
  let value: unknown;
  try {
    value = JSON.parse(json);
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    throw new CodemodeSourceError(
      "options-json",
      `@options must be valid JSON with supported fields ${SUPPORTED}: ${reason}. Write it as: ${EXAMPLE}`,
      { line: 1 },
    );
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) throw notObject(describeType(value));

  const fields = value as Record<string, unknown>;
  const unknown = Object.keys(fields).filter((key) => !(FIELD_NAMES as string[]).includes(key));
  if (unknown.length > 0) {
    const quoted = unknown.map((key) => `\`${key}\``).join(", ");
    throw new CodemodeSourceError(
      "options-unknown-field",
      `@options only supports ${SUPPORTED}; got ${quoted}. Remove the unknown field${unknown.length === 1 ? "" : "s"} ` +
        `${unknown.join(", ")} or write the line as: ${EXAMPLE}`,
      { line: 1 },
    );
  }

  const options: CodemodeSourceOptions = {};
  const problems: string[] = [];
  for (const field of FIELD_NAMES) {
    if (!Object.hasOwn(fields, field)) continue;
    const problem = checkValue(field, fields[field]);
    if (problem === undefined) options[OPTION_FIELDS[field].option] = fields[field] as number;
    else problems.push(problem);
  }
  if (problems.length > 0) {
    throw new CodemodeSourceError("options-value", `${problems.join("; ")}.`, { line: 1 });
  }
  return options;
}

function checkValue(field: keyof CodemodeOptionsFields, value: unknown): string | undefined {
  const { rule, smallest } = OPTION_FIELDS[field];
  const limit = CODEMODE_OPTIONS_LIMITS[field];
  const expected = `@options field \`${field}\` must be ${rule} up to ${limit}`;
  if (typeof value !== "number") return `${expected}, got ${describeType(value)}`;
  if (!Number.isInteger(value) || value < smallest || value > limit) return `${expected}, got ${String(value)}`;
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
