/**
 * `airlock-codemode/source`: reading a script before it runs. `parseCodemodeSource` splits off the options a script sets on
 * its first line, `CODEMODE_SOURCE_GRAMMAR` describes the same scripts for grammar-constrained tool input, and
 * `stripTypeScript` turns TypeScript into JavaScript by erasing its types in place.
 */

export { CODEMODE_SOURCE_GRAMMAR } from "./grammar.ts";
export {
  CODEMODE_OPTIONS_LIMITS,
  CODEMODE_OPTIONS_PREFIX,
  type CodemodeOptionsFields,
  type CodemodeSourceOptions,
  type ParsedCodemodeSource,
  parseCodemodeSource,
} from "./options-line.ts";
export { CodemodeSourceError, type CodemodeSourcePosition, type CodemodeSourceRule } from "./source-error.ts";
export {
  SCRIPT_ENVIRONMENT_DECLARATIONS,
  type TypecheckDiagnostic,
  type TypecheckOptions,
  type TypecheckResult,
  typecheckScript,
} from "./typecheck.ts";
export { MAX_TYPESCRIPT_CHARS, stripTypeScript } from "./typescript.ts";
