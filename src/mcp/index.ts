/**
 * `airlock-codemode/mcp`: MCP servers as sandbox tools, and the code-mode gateway (`airlock serve`).
 *
 * Upstream tools are named `<server>__<tool>` (see `mcpToolName`): `tools.github__create_issue(args)` in a script.
 */

export {
  type ApprovalAsker,
  type ApprovalDecision,
  type ApprovalRecord,
  MAX_APPROVAL_ARGUMENTS_CHARS,
  MAX_APPROVAL_RECORDS,
} from "./approval.ts";
export {
  DEFAULT_OAUTH_ALGORITHMS,
  MAX_AUTHORIZATION_CHARS,
  OAUTH_CLOCK_TOLERANCE_S,
  OAUTH_FETCH_TIMEOUT_MS,
  type OAuthResourceServerOptions,
  PROTECTED_RESOURCE_METADATA_PATH,
} from "./auth.ts";
export {
  loadMcpConfig,
  type McpApprovalConfig,
  type McpConfig,
  type McpHttpServerConfig,
  type McpServerConfig,
  type McpServerSpec,
  type McpStdioServerConfig,
  type ParsedMcpConfig,
  type ParseMcpConfigOptions,
  parseMcpConfig,
} from "./config.ts";
export {
  DEFAULT_APPROVAL_TIMEOUT_MS,
  DEFAULT_GATEWAY_TIMEOUT_MS,
  DEFAULT_HTTP_HOST,
  DEFAULT_MAX_APPROVALS_PER_EXECUTION,
  DEFAULT_MAX_OUTPUT_TOKENS,
  DEFAULT_MAX_SESSIONS,
  DEFAULT_MAX_SESSIONS_PER_PRINCIPAL,
  DEFAULT_SESSION_IDLE_MS,
} from "./defaults.ts";
export { DEFAULT_DECLARATIONS_MAX_TOKENS, type DeclarationsForm } from "./description.ts";
export { McpConfigError, McpToolCollisionError, McpUpstreamError } from "./errors.ts";
export {
  type GatewayExecuteOptions,
  type GatewaySearchResult,
  type GatewaySessionOptions,
  McpGateway,
  type McpGatewayOptions,
  startMcpGateway,
} from "./gateway.ts";
export {
  HTTP_RECEIVE_TIMEOUT_MS,
  HTTP_RETRY_AFTER_S,
  MAX_HTTP_BODY_BYTES,
  MAX_HTTP_BODY_BYTES_PER_PRINCIPAL,
  MAX_HTTP_BODY_BYTES_TOTAL,
  MAX_HTTP_REQUESTS_PER_PRINCIPAL,
  MAX_HTTP_REQUESTS_TOTAL,
  SESSION_EVICTION_GRACE_MS,
} from "./http-limits.ts";
export {
  DEFAULT_SEARCH_LIMIT,
  MAX_DESCRIBE_NAMES,
  MAX_RESOURCE_URI_CHARS,
  MAX_SEARCH_LIMIT,
  MAX_SEARCH_QUERY_CHARS,
  MAX_STDIO_CALL_ARGUMENT_BYTES,
  MAX_TOOL_NAME_CHARS,
  MAX_UPSTREAM_ANSWER_BYTES_IN_FLIGHT,
  MAX_UPSTREAM_LIST_BYTES,
  MAX_UPSTREAM_LIST_ITEMS,
  MAX_UPSTREAM_MESSAGE_BYTES,
  MAX_UPSTREAM_OWED_ANSWERS,
  MAX_UPSTREAM_TOOLS,
} from "./limits.ts";
export { MCP_TOOL_SEPARATOR, mcpToolName } from "./names.ts";
export {
  EMPTY_RUN_TEXT,
  EXECUTE_OUTPUT_SCHEMA,
  type ExecuteStructuredResult,
  formatRunError,
  formatRunResult,
  type McpContentBlock,
  type McpToolResult,
} from "./output.ts";
export { callResultErrorMessage, callResultToValue, type McpCallResult, type McpImageValue } from "./result.ts";
export {
  DEFAULT_HTTP_PATH,
  type HttpServing,
  type ServeHttpOptions,
  type ServeStdioOptions,
  type StdioServing,
  serveGatewayHttp,
  serveGatewayStdio,
} from "./serve.ts";
export {
  MAX_LOG_CHARS_PER_RUN,
  MAX_LOG_MESSAGES_PER_RUN,
  PROGRESS_HEARTBEAT_MS,
  PROGRESS_MIN_INTERVAL_MS,
} from "./session.ts";
export { MAX_STDIO_LINE_BYTES } from "./stdio.ts";
export {
  countTokens,
  cutToTokens,
  loadTokenizer,
  MAX_PRE_TOKEN_CHARS,
  OUTPUT_TOKEN_ENCODING,
  OUTPUT_TOKEN_FALLBACK,
  tokenUnit,
} from "./tokens.ts";
export {
  type ConnectMcpServersOptions,
  connectMcpServers,
  type McpServerStatus,
  type McpTool,
  McpToolset,
  type McpToolsetChange,
} from "./toolset.ts";
export {
  DEFAULT_CALL_TIMEOUT_MS,
  DEFAULT_CONNECT_TIMEOUT_MS,
  HTTP_PROBE_TIMEOUT_MS,
  HTTP_TERMINATE_TIMEOUT_MS,
  MAX_TOOL_LIST_PAGES,
  type McpCallOptions,
  McpUpstream,
  type McpUpstreamDown,
  type McpUpstreamOptions,
  STDERR_TAIL_CHARS,
  STDERR_TAIL_LINES,
  STDIO_EXIT_GRACE_MS,
  UPSTREAM_RETRY_INITIAL_MS,
  UPSTREAM_RETRY_MAX_MS,
} from "./upstream.ts";
export { RESOURCE_NOT_FOUND, UpstreamResources } from "./upstream-resources.ts";
export {
  DEFAULT_GATEWAY_SCOPE,
  type GatewayWaitingOptions,
  type WaitingDecision,
} from "./waiting.ts";
