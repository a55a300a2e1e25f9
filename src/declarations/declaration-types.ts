import type { CodemodeTool } from "../types.ts";

/** What the renderer reads from a tool: everything but `execute`. */
export type ToolLike = Pick<
  CodemodeTool,
  "name" | "description" | "inputSchema" | "outputSchema" | "spread" | "signature"
>;

/** A JSON Schema object (not the boolean form). */
export type JsonSchemaObject = { [key: string]: unknown };

export interface SchemaToTypeOptions {
  /** Size budget of the rendered type in characters; past it tags, then descriptions, then depth are dropped. */
  maxChars?: number;
  /** Constraint tags (`@minimum 1`) in property comments. Default true. */
  tags?: boolean;
  /** Property descriptions as `//` comments. Default true. */
  descriptions?: boolean;
  /** Indentation of the line the type starts on; nested lines are indented relative to it. Default "". */
  indent?: string;
  /** Which side of a zod schema to describe: what it accepts (`input`) or what it produces (`output`). Default input. */
  io?: "input" | "output";
}

export interface RenderDeclarationsOptions {
  /** Size budget of each tool's argument type. Default `DEFAULT_INPUT_SCHEMA_MAX_CHARS`. */
  inputSchemaMaxChars?: number;
  /** Size budget of each tool's result type. Default `DEFAULT_OUTPUT_SCHEMA_MAX_CHARS`. */
  outputSchemaMaxChars?: number;
  /** Constraint tags in property comments. Default true. */
  tags?: boolean;
  /** Property descriptions as comments. Default true. */
  descriptions?: boolean;
  /** More tools than this are rendered as a compact index. Default `INDEX_THRESHOLD_TOOLS`; `Infinity` never. */
  indexThreshold?: number;
  /** The index's sentence telling how to get a tool's full declaration. Default `DEFAULT_INDEX_HINT`. */
  indexHint?: string;
}

export interface ToolIndexOptions {
  /** The sentence telling how to get a tool's full declaration. Default `DEFAULT_INDEX_HINT`. */
  hint?: string;
  /** Longest summary in characters. Default `SUMMARY_MAX_CHARS`. */
  summaryMaxChars?: number;
}

export interface SearchToolsOptions {
  /** Most results returned. Default 10. */
  limit?: number;
}

export interface ToolSearchResult {
  /** The tool's name as registered. */
  name: string;
  /** The identifier scripts use: `tools.<identifier>(args)`. */
  identifier: string;
  /** First sentence of the description, on one line. */
  summary: string;
  /** Parameter list and return type, as `renderToolSignature` renders it. */
  signature: string;
  score: number;
}
