export {
  renderToolOverview,
  renderToolSignatures,
  type ToolGroup,
  type ToolOverviewOptions,
  type ToolSignaturesOptions,
} from "./compact.ts";
export type {
  JsonSchemaObject,
  RenderDeclarationsOptions,
  SchemaToTypeOptions,
  SearchToolsOptions,
  ToolIndexOptions,
  ToolLike,
  ToolSearchResult,
} from "./declaration-types.ts";
export { describeTool } from "./describe.ts";
export { resolveSchemaRef } from "./ref.ts";
export { renderDeclarations, renderToolOutputType, renderToolSignature, type ToolSignatureOptions } from "./render.ts";
export {
  COMPACT_INPUT_MAX_CHARS,
  COMPACT_OUTPUT_MAX_CHARS,
  COMPACT_SUMMARY_MAX_CHARS,
  DEFAULT_INDEX_HINT,
  DEFAULT_INPUT_SCHEMA_MAX_CHARS,
  DEFAULT_OUTPUT_SCHEMA_MAX_CHARS,
  INDEX_THRESHOLD_TOOLS,
  MAX_REF_DEPTH,
  MAX_REF_EXPANSIONS,
  MAX_SCHEMA_NESTING,
  MAX_SCHEMA_NODES,
  SUMMARY_MAX_CHARS,
} from "./render-limits.ts";
export { schemaToType } from "./schema-to-type.ts";
export { searchTools } from "./search.ts";
export { renderToolIndex } from "./tool-index.ts";
