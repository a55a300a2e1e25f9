/**
 * Which rule a script broke. Each value names one check of `parseCodemodeSource` or `stripTypeScript`:
 *
 * - `empty`: the script is empty or only whitespace.
 * - `options-json`: the `// @options:` line does not hold valid JSON.
 * - `options-object`: the options are valid JSON but not an object (an array, a number, `null`, ...).
 * - `options-unknown-field`: the options object has fields other than `max_output_tokens` and `timeout_ms`.
 * - `options-value`: a known field has the wrong type or is out of range.
 * - `options-without-code`: the options line is not followed by any code.
 * - `options-not-first-line`: a line other than the first starts with `// @options:`.
 * - `typescript`: the TypeScript (or JavaScript) has a syntax error.
 * - `typescript-unsupported`: the TypeScript uses a construct that needs code generation rather than type
 *   removal (enums, namespaces, parameter properties, `<T>value` assertions).
 * - `typescript-limit`: the TypeScript could not be stripped within Airlock's limits: longer than
 *   `MAX_TYPESCRIPT_CHARS`, nested too deeply for the stripper, or not stripped within `TYPESCRIPT_STRIP_TIMEOUT_MS`.
 */
export type CodemodeSourceRule =
  | "empty"
  | "options-json"
  | "options-object"
  | "options-unknown-field"
  | "options-value"
  | "options-without-code"
  | "options-not-first-line"
  | "typescript"
  | "typescript-unsupported"
  | "typescript-limit";

/** Where in the script a problem is: 1-based line and column (column counted in UTF-16 code units). */
export interface CodemodeSourcePosition {
  line: number;
  column?: number;
}

/** A script that breaks one of the source rules. The message is written for the model that wrote the script. */
export class CodemodeSourceError extends Error {
  override readonly name = "CodemodeSourceError";
  /** The rule that was broken. */
  readonly rule: CodemodeSourceRule;
  /** 1-based line of the problem in the script as written, when the rule is about one line. */
  readonly line: number | undefined;
  /** 1-based column (UTF-16 code units) of the problem, when known. */
  readonly column: number | undefined;

  constructor(rule: CodemodeSourceRule, message: string, position?: CodemodeSourcePosition) {
    super(message);
    this.rule = rule;
    this.line = position?.line;
    this.column = position?.column;
  }
}
