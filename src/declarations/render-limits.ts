/** Default size budget, in characters, of one tool's argument type. */
export const DEFAULT_INPUT_SCHEMA_MAX_CHARS = 4000;

/** Default size budget, in characters, of one tool's result type. */
export const DEFAULT_OUTPUT_SCHEMA_MAX_CHARS = 2000;

/** Catalogs with more tools than this are declared as a compact index by `renderDeclarations`. */
export const INDEX_THRESHOLD_TOOLS = 40;

/** Longest one-line summary of a tool in an index or a search result. */
export const SUMMARY_MAX_CHARS = 120;

/** How deep `$ref`s are expanded inside each other before the rest renders as `unknown`. */
export const MAX_REF_DEPTH = 16;

/** How many `$ref`s one schema expands in all before the rest render as `unknown`. */
export const MAX_REF_EXPANSIONS = 256;

/** How deep schemas nest (objects, arrays, unions) before the rest renders as `unknown`. */
export const MAX_SCHEMA_NESTING = 48;

/** How many schema nodes one conversion visits before the rest render as `unknown` (shared subschemas count each time). */
export const MAX_SCHEMA_NODES = 20_000;

/** Deepest nesting of a `const` or `enum` value that renders as a literal type; a deeper one renders as its base type. */
export const MAX_LITERAL_DEPTH = 16;

/** Most values (counted each time they occur) one `const` or `enum` value may hold to render as a literal type. */
export const MAX_LITERAL_VALUES = 1_000;

/** The index's default sentence on how to get a tool's full declaration. */
export const DEFAULT_INDEX_HINT =
  'Before calling a tool, get its full declaration (parameters and result type) with describeTool("<name>").';

/** Longest argument type on one line of `renderToolSignatures`, in characters; larger ones lose nested levels. */
export const COMPACT_INPUT_MAX_CHARS = 400;

/** Longest result type on one line of `renderToolSignatures`, in characters. */
export const COMPACT_OUTPUT_MAX_CHARS = 200;

/** Longest summary after a tool in `renderToolSignatures`. */
export const COMPACT_SUMMARY_MAX_CHARS = 80;
